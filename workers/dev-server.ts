import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, statSync } from 'node:fs';
import { dirname } from 'node:path';
import { Connection } from '@temporalio/client';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { WavegateError } from '../core/errors';
import { WAVEGATE_SEARCH_ATTRIBUTES } from '../contracts/search-attributes';
import { cliTypeName } from '../core/search-attribute-check';
import { freePort, portFree } from '../sim/ports';
import { endWithThisProcess } from '../sim/reaper';
import { ensureTools } from './toolchain';
import { installQuietRuntime } from './worker';

export interface DevServer {
  address: string;
  uiUrl: string;
  namespace: string;
  process: ChildProcess;
  stop(): Promise<void>;
}

/** The preferred port when it is free, else any free one (a second dev stack must not fail to start). */
async function pickPort(preferred: number): Promise<number> {
  return (await portFree(preferred)) ? preferred : freePort();
}

/** The dev stack's shard events cache (`history.eventsCacheMaxSizeBytes`): 64 MiB, against Temporal's 512 KiB. */
export const DEV_EVENTS_CACHE_BYTES = 64 * 2 ** 20;

/** The `temporal server start-dev` arguments that size its shard events cache. */
function eventsCacheArgs(bytes: number): string[] {
  return ['--dynamic-config-value', `history.eventsCacheMaxSizeBytes=${bytes}`];
}

/**
 * Start `temporal server start-dev` with its state in a SQLite file and wavegate's search attributes
 * registered; resolve once it accepts connections. The server runs in its own process group so that
 * stop() (and Ctrl-C) takes down everything it started, and that group ends with this process whatever
 * ends it, SIGKILL and a fatal error included (sim/reaper.ts): no server is left holding the ports.
 */
export async function startDevServer(opts: {
  dbFile: string;
  logFile: string;
  port?: number;
  uiPort?: number;
  namespace?: string;
  log?: (line: string) => void;
}): Promise<DevServer> {
  const { temporal } = ensureTools(opts.log);
  let port = await pickPort(opts.port ?? 7233);
  let uiPort = await pickPort(opts.uiPort ?? (port === 7233 ? 8233 : port + 1000));
  const namespace = opts.namespace ?? 'default';
  mkdirSync(dirname(opts.dbFile), { recursive: true });
  // A port found free can be taken before the server binds it (another process's outgoing connection, on a
  // busy host): the server then exits at once, saying so in its log, and is started again on other ports.
  for (let attempt = 1; ; attempt++) {
    const logFrom = existsSync(opts.logFile) ? statSync(opts.logFile).size : 0;
    const started = await spawnDevServer(temporal, { ...opts, port, uiPort, namespace });
    if (started.ok) return started.server;
    const said = readFileSync(opts.logFile, 'utf8').slice(logFrom);
    if (attempt < 3 && /address already in use/i.test(said)) {
      opts.log?.(`temporal dev server: port ${port} or ${uiPort} was taken as it started; trying other ports`);
      port = await freePort();
      uiPort = await freePort();
      continue;
    }
    const first = said.split('\n').find((line) => /error|fatal|panic|unable/i.test(line));
    throw new WavegateError(
      'UNAVAILABLE',
      `temporal dev server exited during start-up${first ? ` (${first.trim().slice(0, 300)})` : ''}; see ${opts.logFile}`,
    );
  }
}

/** One start of the server; `ok: false` when it exited before it answered (its log says why). */
async function spawnDevServer(
  temporal: string,
  opts: { dbFile: string; logFile: string; port: number; uiPort: number; namespace: string },
): Promise<{ ok: true; server: DevServer } | { ok: false }> {
  const { port, uiPort, namespace } = opts;
  const logFd = openSync(opts.logFile, 'a');
  const args = [
    'server',
    'start-dev',
    '--ip',
    '127.0.0.1',
    '--port',
    String(port),
    '--ui-port',
    String(uiPort),
    '--db-filename',
    opts.dbFile,
    '--namespace',
    namespace,
    '--log-level',
    'warn',
    // An apply's start reads its scheduled event from the shard's events cache, or else from the store with the
    // whole batch it was written in: Temporal's 512 KiB default holds less than one slice of a large rollout,
    // which made the server's CPU per device grow with the fleet (docs/operations.md, "The server's events cache").
    ...eventsCacheArgs(DEV_EVENTS_CACHE_BYTES),
  ];
  // Registered by the server itself, before its frontend answers: the dev stack's in-process worker does
  // not run `wavegate worker`'s check (workers/search-attributes.ts), and no start can race a registration.
  for (const key of WAVEGATE_SEARCH_ATTRIBUTES) args.push('--search-attribute', `${key.name}=${cliTypeName(key.type)}`);
  const child = spawn(temporal, args, { stdio: ['ignore', logFd, logFd], detached: true });
  closeSync(logFd); // the server has its own copy
  endWithThisProcess(child);
  const address = `127.0.0.1:${port}`;
  let exited = false;
  child.once('exit', () => (exited = true));

  const deadline = Date.now() + 60_000;
  for (;;) {
    if (exited) return { ok: false };
    try {
      const conn = await Connection.connect({ address, connectTimeout: 1_000 });
      await conn.workflowService.getSystemInfo({});
      await conn.close();
      break;
    } catch (err) {
      if (Date.now() > deadline) {
        process.kill(-child.pid!, 'SIGKILL');
        throw new WavegateError(
          'UNAVAILABLE',
          `temporal dev server did not answer on ${address} within 60 s (${(err as Error).message}); see ${opts.logFile}`,
        );
      }
      await new Promise((r) => setTimeout(r, 250));
    }
  }

  return {
    ok: true,
    server: {
      address,
      uiUrl: `http://127.0.0.1:${uiPort}`,
      namespace,
      process: child,
      async stop() {
        if (exited) return;
        const done = new Promise<void>((resolve) => child.once('exit', () => resolve()));
        process.kill(-child.pid!, 'SIGTERM');
        const timer = setTimeout(() => !exited && process.kill(-child.pid!, 'SIGKILL'), 10_000);
        await done;
        clearTimeout(timer);
      },
    },
  };
}

/**
 * A throwaway dev server (in memory, ephemeral ports) managed by the SDK's test environment, with
 * wavegate's search attributes registered: for the tests and the benchmark, which tear it down
 * themselves. The SDK's testing package is loaded on first use, like the worker's (workers/worker.ts).
 */
export async function startDevServerEnv(
  opts: {
    extraArgs?: string[];
    /** The shard events cache in bytes (DEV_EVENTS_CACHE_BYTES: what `wavegate dev` runs); absent: Temporal's default. */
    eventsCacheBytes?: number;
  } = {},
): Promise<TestWorkflowEnvironment> {
  const extraArgs = [
    ...(opts.extraArgs ?? []),
    ...(opts.eventsCacheBytes ? eventsCacheArgs(opts.eventsCacheBytes) : []),
  ];
  const { temporal } = ensureTools();
  installQuietRuntime();
  const { TestWorkflowEnvironment } = require('@temporalio/testing') as typeof import('@temporalio/testing');
  return TestWorkflowEnvironment.createLocal({
    server: {
      executable: { type: 'existing-path', path: temporal },
      ip: '127.0.0.1',
      searchAttributes: WAVEGATE_SEARCH_ATTRIBUTES,
      ...(extraArgs.length ? { extraArgs } : {}),
    },
  });
}
