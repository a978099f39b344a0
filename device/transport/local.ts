import { type ChildProcess, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { dirname, isAbsolute, join, relative, resolve } from 'node:path';
import type { Writable } from 'node:stream';
import { parseFloor } from '../../core/floor';
import { floorPath, markerPath } from '../../core/revision';
import { applyLockOps } from './apply-lock-ops';
import { StepFailed, TransportError } from './errors';
import type { DeviceSession, ExecOptions, ExecResult, StagedFile, StageOptions } from './types';

/**
 * The DeviceSession of the device the process runs on (the pull agent, `wavegate agent`): commands run
 * with `/bin/sh -c` with HOME set to the device home, payload files are copied and checked, and the
 * marker, floor and apply lock are the very files the SSH path keeps under `$HOME/.wavegate/` (the lock
 * protocol is the same shell, ./apply-lock.ts). So applyToDevice over this session has the same lock,
 * verify-first, reattach and floor semantics as over SSH: a restarted agent finds its own apply.
 *
 * Every command runs in a process group of its own: a timeout ends the whole group, and the detached
 * apply `launchApply` starts outlives the agent (a SIGKILLed agent's apply finishes and records its
 * outcome, which the restarted agent reattaches to).
 */
/**
 * How a local command runs: `$1` in the background with no stdin, and a watchdog reading the agent's
 * end of a pipe. When the agent dies (even by SIGKILL) the pipe closes and the watchdog hangs up the
 * command's process group, as sshd does to a session whose connection dropped. So a killed agent
 * leaves exactly what a killed worker leaves over SSH: the detached apply (nohup, its own session)
 * runs on and records its outcome; the steps after it are for the restarted agent, which reattaches.
 */
const EXEC_WRAPPER = [
  // fd 0: the watchdog's pipe; fd 3: the command's input (ExecOptions.stdin). A background job's stdin
  // is /dev/null unless redirected, so each is handed on explicitly.
  'exec 4<&0',
  'sh -c "$1" <&3 3<&- 4<&- & c=$!',
  'exec 3<&-',
  '{ cat > /dev/null 2>&1; kill -HUP 0; } <&4 > /dev/null 2>&1 & w=$!',
  'exec 4<&-',
  'wait $c; rc=$?',
  'kill $w 2> /dev/null',
  'exit $rc',
].join('\n');

export function localDeviceSession(device: string, home: string): DeviceSession {
  const root = resolve(home);
  const commands = new LocalCommands(device, root);
  const exec = (command: string, opts?: ExecOptions): Promise<ExecResult> => commands.run(command, opts);

  return {
    exec,

    async stage(dir: string, files: readonly StagedFile[], { onStaged }: StageOptions): Promise<void> {
      if (files.length === 0) return;
      const target = under(device, root, dir);
      mkdirSync(target, { recursive: true });
      for (const file of files) {
        const data = file.read();
        const path = join(target, file.name);
        writeFileSync(`${path}.part`, data);
        chmodSync(`${path}.part`, 0o600);
        renameSync(`${path}.part`, path);
        onStaged?.(file.name);
      }
      checkLanded(device, target, files);
    },

    async readMarker(profile) {
      try {
        const value = Number.parseInt(readFileSync(join(root, markerPath(profile)), 'utf8').trim(), 10);
        return Number.isFinite(value) ? value : null;
      } catch {
        return null;
      }
    },

    async writeMarker(profile, revision) {
      try {
        writeAtomically(join(root, markerPath(profile)), `${revision}\n`);
      } catch (e) {
        throw failed(device, 'write marker', e);
      }
    },

    async readFloor(profile) {
      try {
        return parseFloor(readFileSync(join(root, floorPath(profile)), 'utf8'));
      } catch {
        return null;
      }
    },

    ...applyLockOps(device, exec),

    close: () => commands.close(),
  };
}

/**
 * The session's commands: each runs through EXEC_WRAPPER in a process group of its own, and `close()`
 * ends those in flight (they fail as `dropped`) and refuses any after.
 */
class LocalCommands {
  private closed = false;
  /** How to end each command in flight. */
  private readonly running = new Set<() => void>();

  constructor(
    private readonly device: string,
    private readonly root: string,
  ) {}

  run(
    command: string,
    { timeoutMs = 60_000, env, onProgress, progressIntervalMs = 5_000, stdin }: ExecOptions = {},
  ): Promise<ExecResult> {
    const { device, running } = this;
    return new Promise((resolvePromise, reject) => {
      if (this.closed) return reject(new TransportError('dropped', `${device}: the local session is closed`));
      const child = spawnInGroup(this.root, command, env, stdin);
      const out: Buffer[] = [];
      const err: Buffer[] = [];
      const started = Date.now();
      let done = false;
      const finish = (fn: () => void) => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        clearInterval(ticker);
        running.delete(abort);
        fn();
      };
      const abort = () => {
        killGroup(child);
        finish(() =>
          reject(new TransportError('dropped', `${device}: the local session was closed while a command ran`)),
        );
      };
      running.add(abort);
      const timer = setTimeout(() => {
        killGroup(child);
        finish(() =>
          reject(
            new TransportError(
              'timeout',
              `${device}: command timed out after ${timeoutMs} ms: ${command.slice(0, 80)}`,
            ),
          ),
        );
      }, timeoutMs);
      const ticker = setInterval(() => onProgress?.(Date.now() - started), progressIntervalMs);
      child.stdout!.on('data', (b: Buffer) => out.push(b));
      child.stderr!.on('data', (b: Buffer) => err.push(b));
      child.on('error', (e) =>
        finish(() => reject(new TransportError('config', `${device}: cannot run /bin/sh: ${e.message}`))),
      );
      child.on('exit', () => child.stdin!.end());
      child.on('close', (code) =>
        finish(() =>
          resolvePromise({
            code,
            stdout: Buffer.concat(out).toString('utf8'),
            stderr: Buffer.concat(err).toString('utf8'),
          }),
        ),
      );
    });
  }

  close(): void {
    this.closed = true;
    for (const abort of [...this.running]) abort();
  }
}

/** Start `command` through EXEC_WRAPPER in a process group of its own, under HOME = `root`, its input given. */
function spawnInGroup(
  root: string,
  command: string,
  env: Record<string, string> | undefined,
  stdin: Buffer | undefined,
): ChildProcess {
  const child = spawn('/bin/sh', ['-c', EXEC_WRAPPER, 'wavegate-exec', command], {
    cwd: root,
    env: { ...process.env, ...env, HOME: root },
    stdio: ['pipe', 'pipe', 'pipe', 'pipe'],
    detached: true,
  });
  // fd 0 is never written to: it closes when this process ends, however it ends (see EXEC_WRAPPER).
  child.stdin!.on('error', () => {});
  const input = child.stdio[3] as Writable;
  input.on('error', () => {});
  input.end(stdin ?? Buffer.alloc(0));
  return child;
}

/** End a command's whole process group (the detached apply is in a session of its own and stays). */
function killGroup(child: ChildProcess): void {
  try {
    if (child.pid) process.kill(-child.pid, 'SIGKILL');
  } catch {
    /* already gone */
  }
}

/** A path under the home, from a relative one (the session's paths are all relative to $HOME). */
function under(device: string, root: string, rel: string): string {
  const path = resolve(root, rel);
  const r = relative(root, path);
  if (r === '' || r.startsWith('..') || isAbsolute(r))
    throw new StepFailed(
      'stage payload',
      { code: 1, stdout: '', stderr: `${rel} is not inside the device home ${root}` },
      device,
    );
  return path;
}

/** Read back what landed, as the SSH path has the device check it: a full disk or a swapped file shows here. */
function checkLanded(device: string, target: string, files: readonly StagedFile[]): void {
  for (const file of files) {
    const got = createHash('sha256')
      .update(readFileSync(join(target, file.name)))
      .digest('hex');
    if (got !== file.sha256)
      throw new StepFailed(
        'payload digest check',
        {
          code: 1,
          stdout: '',
          stderr: `${file.name}: FAILED (sha256 on the device is not the signed ${file.sha256})`,
        },
        device,
      );
  }
}

function writeAtomically(path: string, text: string): void {
  mkdirSync(dirname(path), { recursive: true });
  writeFileSync(`${path}.new`, text);
  renameSync(`${path}.new`, path);
}

function failed(device: string, step: string, e: unknown): StepFailed {
  return new StepFailed(step, { code: 1, stdout: '', stderr: (e as Error).message }, device);
}
