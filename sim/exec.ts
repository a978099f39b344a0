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
import { execFault, type CompiledFaults } from './faults';
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
  const exec = new SimExec(st, channel, command, live, sock, runtime);
  live.add(exec);
  channel.on('error', () => {});
  channel.on('close', () => exec.kill());
  const { faults } = exec;
  const latency = (faults.raw.latencyMs ?? 0) + (faults.slow?.test(command) ? (faults.raw.slowMs ?? 0) : 0);
  if (latency > 0) exec.timer = setTimeout(() => exec.start(), latency);
  else exec.start();
}

/** What an exec fault does instead of running the command (a drop with dropAfterMs and a hang with hangAfterRunning run it: SimExec.start). */
const FAULTS: Record<NonNullable<ReturnType<typeof execFault>>, (exec: SimExec) => void> = {
  drop: (exec) => {
    exec.finish(null);
    exec.destroySocket();
  },
  fail: (exec) => {
    exec.drain();
    exec.channel.stderr.write('simulated failure\n');
    void endChannel(exec.channel, 1).then(() => exec.finish(1));
  },
  hang: (exec) => exec.drain(), // never finishes; kill() runs on channel/connection close
};

/** One exec, recorded from its arrival: started after its latency, faulted or run in the sandbox, finished once. */
class SimExec implements LiveExec {
  readonly rec: SimCommandRecord;
  /** The faults in force when the exec arrived, even if setFaults runs during its latency. */
  readonly faults: CompiledFaults;
  timer: NodeJS.Timeout | undefined;
  private finished = false;
  private child: ChildProcess | undefined;
  private holdChannel = false;

  constructor(
    private readonly st: DeviceState,
    readonly channel: ServerChannel,
    private readonly command: string,
    private readonly live: Set<LiveExec>,
    private readonly sock: net.Socket | undefined,
    private readonly runtime: FleetRuntime,
  ) {
    this.rec = { command, exitCode: null, startedAt: Date.now() };
    st.records.push(this.rec);
    this.faults = st.faults;
  }

  finish(code: number | null): void {
    if (this.finished) return;
    this.finished = true;
    this.rec.exitCode = code;
    this.rec.endedAt = Date.now();
    this.live.delete(this);
  }

  kill(): void {
    if (this.timer) clearTimeout(this.timer);
    this.killGroup();
    this.finish(null);
  }

  private killGroup(): void {
    const child = this.child;
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
  }

  /**
   * ssh2 emits a server channel's 'close' only once its readable side has been consumed, so any
   * path that does not pipe the channel into a child must drain it.
   */
  drain(): void {
    this.channel.resume();
  }

  /** The peer closing the channel makes ssh2 end() our writable side: nothing else ends it early. */
  private peerClosed(): boolean {
    return this.channel.writableEnded;
  }

  destroySocket(): void {
    if (this.sock) {
      if (typeof this.sock.resetAndDestroy === 'function') this.sock.resetAndDestroy();
      else this.sock.destroy();
    } else {
      this.channel.close();
    }
  }

  /** After the latency: the fault that hits the command instead of it, or the sandbox, then the command. */
  start(): void {
    this.timer = undefined;
    if (this.finished || this.runtime.isStopped()) return;
    if (this.peerClosed()) {
      this.drain();
      this.kill();
      return;
    }
    const fault = execFault(this.faults, this.command);
    if (fault === 'drop' && this.faults.raw.dropAfterMs !== undefined) {
      // Runs, and the connection dies under it later: whatever is still in the session dies with it.
      const drop = setTimeout(() => this.destroySocket(), this.faults.raw.dropAfterMs);
      drop.unref();
    } else if (fault === 'hang' && this.faults.raw.hangAfterRunning) {
      this.holdChannel = true;
    } else if (fault) {
      FAULTS[fault](this);
      return;
    }
    void ensureSandbox(this.st).then(
      (sandbox) => this.spawnCommand(sandbox),
      (err: unknown) => {
        this.drain();
        this.channel.stderr.write(`fleet-sim: cannot prepare sandbox: ${(err as Error).message}\n`);
        void endChannel(this.channel, 255).then(() => this.finish(255));
      },
    );
  }

  private spawnCommand(sandbox: string): void {
    if (this.finished || this.runtime.isStopped()) return;
    if (this.peerClosed()) {
      this.drain();
      this.kill();
      return;
    }
    const { channel, runtime } = this;
    const c = spawn('/bin/sh', ['-c', this.command], {
      cwd: sandbox,
      env: sandboxEnv(sandbox, this.st.dev.id),
      detached: true, // own process group, so we can kill the whole tree
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    this.child = c;
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
    c.on('close', (code, signal) => this.closed(c, pid, code, signal));
  }

  /** The command's process closed: its group let go once empty, and its status sent unless the exec is held. */
  private closed(c: ChildProcess, pid: number | undefined, code: number | null, signal: NodeJS.Signals | null): void {
    this.runtime.children.delete(c);
    if (pid !== undefined) {
      try {
        process.kill(-pid, 0); // group still has members (backgrounded jobs): keep for stop()
      } catch {
        this.runtime.pgids.delete(pid);
      }
    }
    if (this.finished) return;
    if (this.holdChannel) {
      // Ran to the end, but the client never hears of it (hangAfterRunning).
      this.rec.exitCode = code;
      return;
    }
    if (c.stdin) this.channel.unpipe(c.stdin);
    this.drain();
    const status: number | string = code ?? (signal ? signal.replace(/^SIG/, '') : 255);
    void endChannel(this.channel, status).then(() => this.finish(typeof status === 'number' ? status : null));
  }
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
