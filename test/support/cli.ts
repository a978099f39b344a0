import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { freePort } from '../../sim/ports';
import { PROJECT_ROOT } from '../../intake/package-layout';

export const WAVEGATE_BIN = join(PROJECT_ROOT, 'bin', 'wavegate.js');

export interface CliRun {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Run the real `wavegate` command to completion (in `cwd`, default the checkout). */
export function runCli(
  args: string[],
  opts: { env?: NodeJS.ProcessEnv; timeoutMs?: number; cwd?: string } = {},
): Promise<CliRun> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [WAVEGATE_BIN, ...args], {
      cwd: opts.cwd ?? PROJECT_ROOT,
      env: { ...process.env, ...opts.env },
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`wavegate ${args.join(' ')} timed out\n${stdout}\n${stderr}`));
    }, opts.timeoutMs ?? 120_000);
    child.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/**
 * The CLI against a test's own Temporal and task queue, blind to the user's Temporal settings
 * (address, profile, config file) and profiles root, so nothing outside the test answers it.
 */
export function runCliAgainst(
  target: { address: string; taskQueue: string; scratch: string },
  args: string[],
  timeoutMs = 180_000,
): Promise<CliRun> {
  return runCli([...args, '--address', target.address, '--task-queue', target.taskQueue], {
    timeoutMs,
    env: {
      TEMPORAL_ADDRESS: '',
      TEMPORAL_PROFILE: '',
      TEMPORAL_CONFIG_FILE: join(target.scratch, 'none.toml'),
      WAVEGATE_PROFILES: '',
    },
  });
}

/** Start `wavegate` in the background (in the checkout, or `cwd`) and resolve once its output matches `ready`. */
export function spawnCliUntil(
  args: string[],
  ready: RegExp,
  timeoutMs = 120_000,
  env?: NodeJS.ProcessEnv,
  cwd: string = PROJECT_ROOT,
): Promise<{ child: ChildProcess; output: () => string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [WAVEGATE_BIN, ...args], {
      cwd,
      ...(env ? { env: { ...process.env, ...env } } : {}),
    });
    let out = '';
    const timer = setTimeout(() => reject(new Error(`not ready in ${timeoutMs} ms:\n${out}`)), timeoutMs);
    const onData = (c: Buffer) => {
      out += c.toString();
      if (ready.test(out)) {
        clearTimeout(timer);
        resolve({ child, output: () => out });
      }
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    child.on('exit', (code) => reject(new Error(`exited ${code} before ready:\n${out}`)));
  });
}

/**
 * Stop a CLI child and wait until it is gone: SIGTERM for a graceful shutdown, SIGKILL if it has not exited
 * after `graceMs` (a worker whose server is already gone can wait for ever), so no test leaves a process.
 */
export async function stopChild(child: ChildProcess, graceMs = 10_000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
  await exited;
  clearTimeout(timer);
}

export interface DevDemo {
  address: string;
  uiUrl: string;
  /** The demo fleet's inventory file. */
  inventory: string;
  /** Everything `wavegate dev --demo` printed up to "Ctrl-C to stop". */
  output: string;
  /** Ctrl-C, as an operator would, and wait for the whole stack to exit. */
  stop(): Promise<void>;
}

/** `wavegate dev --demo` in a child process on a free port, for the e2e suites that drive it. */
export async function startDevDemo(stateDir: string): Promise<DevDemo> {
  const { child, output } = await spawnCliUntil(
    ['dev', '--demo', '--state-dir', stateDir, '--port', String(await freePort())],
    /Ctrl-C to stop/,
  );
  const text = output();
  const field = (re: RegExp) => re.exec(text)![1]!;
  return {
    address: field(/Temporal address: (127\.0\.0\.1:\d+)/),
    uiUrl: field(/Web UI: +(http:\/\/127\.0\.0\.1:\d+)/),
    inventory: field(/demo inventory: +(\S+)/),
    output: text,
    async stop() {
      if (child.exitCode !== null) return;
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGINT');
      await exited;
    },
  };
}
