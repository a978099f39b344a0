/**
 * A real gateway HTTP server in its own process, for test/e2e/gateway-limits.test.ts and
 * bench/gateway-flood.ts: `node --expose-gc --import tsx gateway-child.ts <config json>` with an IPC
 * channel. Memory is measured here, in the gateway's own process, never the flooding client's.
 *
 * Config: { root?: checkout whose gateway/server.ts to run (default this one; the bench points it at a
 * worktree of the code before), devices: { id: base64 public key }, limits?: {...} }. The Temporal
 * client is a stand-in, so the limits under test are the gateway's own (unauthenticated requests never
 * reach it): every twin it is asked about exists and desires nothing (version 0), signals and
 * signal-with-starts (reports, presence marks) are taken, and the twin change feed lists no change. So a
 * long-poll is held in the gateway's memory until the request goes away or its wait ends, and a payload
 * asked for is not the device's to fetch (403). For a gateway of the code before the twin cache (--root),
 * a sync's update is held until the request is aborted, as it was then.
 *
 * IPC: it sends { ready, url }; it answers { cmd: 'mem' } with process.memoryUsage() after a full GC,
 * { cmd: 'stats' } with the gateway's counters (null for a gateway without them), { cmd: 'logs' } with
 * the log lines so far.
 */
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { newTwinState, viewOf } from '../../core/twin';

// The config as JSON, or `@<file>` holding it (thousands of pinned keys do not fit in an argument list).
const arg = process.argv[2] ?? '{}';
const config = JSON.parse(arg.startsWith('@') ? readFileSync(arg.slice(1), 'utf8') : arg) as {
  root?: string;
  devices?: Record<string, string>;
  limits?: Record<string, number>;
  acceptAgentsWithoutDigest?: boolean;
};
const root = resolve(config.root ?? join(__dirname, '..', '..'));
const keys = new Map(
  Object.entries(config.devices ?? {}).map(([id, b64]) => [id, Uint8Array.from(Buffer.from(b64, 'base64'))]),
);
const pins = {
  keyOf: (d: string) => keys.get(d),
  deviceOf: () => undefined,
  reload: () => {},
  get devices() {
    return keys.size;
  },
};
const aborted = (signal: AbortSignal | undefined) =>
  new Promise<never>((_, reject) => {
    if (signal?.aborted) return reject(new Error('aborted'));
    signal?.addEventListener('abort', () => reject(new Error('aborted')));
  });
let current: AbortSignal | undefined;
const client = {
  // The code before the twin cache: a sync was an update on the twin, held until the request was aborted.
  withAbortSignal: <T>(signal: AbortSignal, fn: () => Promise<T>): Promise<T> => {
    current = signal;
    return fn();
  },
  workflow: {
    getHandle: (workflowId: string) => {
      const signal = current;
      return {
        executeUpdate: () => aborted(signal),
        // clients/twin.ts readTwinRecord: the twin of `device:<id>`, as a twin that nothing was asked of answers.
        query: async () => viewOf(newTwinState(workflowId.replace(/^device:/, ''))),
        signal: async () => {},
      };
    },
    // Reports to twins (clients/twin.ts reportToTwin) and seen marks to presence shards (clients/presence.ts writeSeen).
    signalWithStart: async () => ({}),
    // The twin change feed (clients/twin-feed.ts): no twin ever changes.
    list: () => ({
      async *[Symbol.asyncIterator]() {},
    }),
  },
};
const logs: string[] = [];

void (async () => {
  const { startGateway } = (await import(join(root, 'gateway', 'server.ts'))) as typeof import('../../gateway/server');
  const gateway = await startGateway({
    client: client as never,
    taskQueue: 'flood',
    pins,
    profilesRoot: join(root, 'profiles'),
    ...(config.limits ? { limits: config.limits } : {}),
    ...(config.acceptAgentsWithoutDigest ? { acceptAgentsWithoutDigest: true } : {}),
    log: (line: string) => void logs.push(line),
    listen: { host: '127.0.0.1', port: 0 },
  });
  process.on('message', (m: { cmd: string }) => {
    if (m.cmd === 'mem') {
      (globalThis as { gc?: () => void }).gc?.();
      process.send!({ mem: process.memoryUsage() });
    } else if (m.cmd === 'stats') {
      process.send!({ stats: (gateway as { stats?: () => unknown }).stats?.() ?? null });
    } else if (m.cmd === 'logs') {
      process.send!({ logs });
    }
  });
  process.on('disconnect', () => void gateway.close().then(() => process.exit(0)));
  process.send!({ ready: true, url: gateway.url });
})();
