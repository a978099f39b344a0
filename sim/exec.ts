/**
 * One exec request on a simulated device: `/bin/sh -c <command>` in the device's sandbox, with the
 * sandbox environment only (sandbox.ts), in its own process group so a kill takes the whole tree.
 * Every exec is recorded (including failed / hung / dropped ones). Exec faults (faults.ts) are matched
 * against the exact command string and none of them runs the command, except a drop with dropAfterMs
 * and a hang with hangAfterRunning (the command runs, then the fault hits); latencyMs delays every exec.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import type * as net from 'node:net';
import type { ServerChannel } from 'ssh2';
import type { DeviceState, FleetRuntime, SimCommandRecord } from './device';
import { execFault } from './faults';
import { ensureSandbox, sandboxEnv } from './sandbox';

/** A running exec, killed when its channel or connection closes. */
export interface LiveExec {
  kill(): void;
}

export function runExec(
  st: DeviceState,
  channel: ServerChannel,
  command: string,
  live: Set<LiveExec>,
  sock: net.Socket | undefined,
  runtime: FleetRuntime,
): void {
  const rec: SimCommandRecord = { command, exitCode: null, startedAt: Date.now() };
  st.records.push(rec);
  const faults = st.faults; // the faults in force when the exec arrived, even if setFaults runs during its latency
  let finished = false;
  let child: ChildProcess | undefined;
  let timer: NodeJS.Timeout | undefined;
  let holdChannel = false;

  const finish = (code: number | null): void => {
    if (finished) return;
    finished = true;
    rec.exitCode = code;
    rec.endedAt = Date.now();
    live.delete(handle);
  };
  const killGroup = (): void => {
    if (child?.pid !== undefined && child.exitCode === null && child.signalCode === null) {
      try {
        process.kill(-child.pid, 'SIGKILL');
      } catch {
        try {
          child.kill('SIGKILL');
        } catch {
          /* already gone */
        }
      }
    }
  };
  const handle: LiveExec = {
    kill: () => {
      if (timer) clearTimeout(timer);
      killGroup();
      finish(null);
    },
  };
  live.add(handle);
  channel.on('error', () => {});
  channel.on('close', () => handle.kill());

  // ssh2 emits a server channel's 'close' only once its readable side has been consumed, so any
  // path that does not pipe the channel into a child must drain it.
  const drain = (): void => {
    channel.resume();
  };
  // The peer closing the channel makes ssh2 end() our writable side: nothing else ends it early.
  const peerClosed = (): boolean => channel.writableEnded;

  const start = (): void => {
    timer = undefined;
    if (finished || runtime.isStopped()) return;
    if (peerClosed()) {
      drain();
      handle.kill();
      return;
    }
    const fault = execFault(faults, command);
    if (fault === 'drop' && faults.raw.dropAfterMs !== undefined) {
      // Runs, and the connection dies under it later: whatever is still in the session dies with it.
      const drop = setTimeout(() => destroySocket(), faults.raw.dropAfterMs);
      drop.unref();
    } else if (fault === 'hang' && faults.raw.hangAfterRunning) {
      holdChannel = true;
    } else
      switch (fault) {
        case 'drop':
          finish(null);
          destroySocket();
          return;
        case 'fail':
          drain();
          channel.stderr.write('simulated failure\n');
          void endChannel(channel, 1).then(() => finish(1));
          return;
        case 'hang':
          drain();
          return; // never finishes; handle.kill() runs on channel/connection close
      }
    void ensureSandbox(st).then(
      (sandbox) => spawnCommand(sandbox),
      (err: unknown) => {
        drain();
        channel.stderr.write(`fleet-sim: cannot prepare sandbox: ${(err as Error).message}\n`);
        void endChannel(channel, 255).then(() => finish(255));
      },
    );
  };

  const spawnCommand = (sandbox: string): void => {
    if (finished || runtime.isStopped()) return;
    if (peerClosed()) {
      drain();
      handle.kill();
      return;
    }
    const c = spawn('/bin/sh', ['-c', command], {
      cwd: sandbox,
      env: sandboxEnv(sandbox, st.dev.id),
      detached: true, // own process group, so we can kill the whole tree
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    child = c;
    runtime.children.add(c);
    const pid = c.pid;
    if (pid !== undefined) runtime.pgids.add(pid);
    c.on('error', (err) => {
      channel.stderr.write(`fleet-sim: spawn failed: ${err.message}\n`);
    });
    c.stdin?.on('error', () => {});
    c.stdout?.on('error', () => {});
    c.stderr?.on('error', () => {});
    if (c.stdin) channel.pipe(c.stdin);
    c.stdout?.pipe(channel, { end: false });
    c.stderr?.pipe(channel.stderr, { end: false });
    c.on('exit', () => {
      runtime.children.delete(c);
    });
    c.on('close', (code, signal) => {
      runtime.children.delete(c);
      if (pid !== undefined) {
        try {
          process.kill(-pid, 0); // group still has members (backgrounded jobs): keep for stop()
        } catch {
          runtime.pgids.delete(pid);
        }
      }
      if (finished) return;
      if (holdChannel) {
        // Ran to the end, but the client never hears of it (hangAfterRunning).
        rec.exitCode = code;
        return;
      }
      if (c.stdin) channel.unpipe(c.stdin);
      drain();
      const status: number | string = code ?? (signal ? signal.replace(/^SIG/, '') : 255);
      void endChannel(channel, status).then(() => finish(typeof status === 'number' ? status : null));
    });
  };

  const destroySocket = (): void => {
    if (sock) {
      if (typeof sock.resetAndDestroy === 'function') sock.resetAndDestroy();
      else sock.destroy();
    } else {
      channel.close();
    }
  };

  const latency = (faults.raw.latencyMs ?? 0) + (faults.slow?.test(command) ? (faults.raw.slowMs ?? 0) : 0);
  if (latency > 0) timer = setTimeout(start, latency);
  else start();
}

/** Waits until everything queued on the channel (stdout and stderr) went out, then exit + close. */
function endChannel(channel: ServerChannel, status: number | string): Promise<void> {
  return new Promise<void>((resolve) => {
    let done = false;
    const finish = (): void => {
      if (done) return;
      done = true;
      channel.removeListener('close', finish);
      resolve();
    };
    channel.once('close', finish);
    let pending = 2;
    const flushed = (): void => {
      if (--pending > 0 || done) return;
      try {
        if (typeof status === 'number') channel.exit(status);
        else channel.exit(status, false, '');
      } catch {
        /* channel gone, or a signal name SSH does not know */
      }
      try {
        channel.end();
      } catch {
        /* channel already gone */
      }
      finish();
    };
    try {
      channel.write(Buffer.alloc(0), () => flushed());
      channel.stderr.write(Buffer.alloc(0), () => flushed());
    } catch {
      finish();
    }
  });
}
