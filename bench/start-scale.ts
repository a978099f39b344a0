/**
 * `wavegate start` at fleet scale (bench/README.md, "`start-scale.ts`"; issue 26: the CLI's `start` within
 * 512 MiB at 100,000 devices). For each --devices count, the generated inventory of `plan-scale.ts`
 * (`scale-inventory.ts`) is started as the demo rollout by the CLI as a child process (`node
 * bin/wavegate.js start`, the tsx checkout flow) against a Temporal dev server and a worker of this
 * process: the whole intake (read, validate, signed revisions verified, registration gates), the
 * membership stored page by page (in volumes past 32 pages), the preflight and the start. Reported: the
 * child's wall time and peak RSS (`/usr/bin/time`), and each membership entity's history (events, bytes)
 * as the server describes it. The rollout itself is terminated at once: what is measured is `start`.
 *
 *   npx tsx bench/start-scale.ts --devices 1000,10000,100000 [--runs 1] [--source file|url]
 */
import { spawn } from 'node:child_process';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { stringify } from 'yaml';
import { PROJECT_ROOT } from '../intake/package-layout';
import { startDevServerEnv } from '../workers/dev-server';
import { createWorker } from '../workers/worker';
import { wholeFlag } from './flags';
import { scaleInventory } from './scale-inventory';

const { values: flags } = parseArgs({
  options: {
    devices: { type: 'string', default: '1000,10000,100000' },
    runs: { type: 'string', default: '1' },
    /** `url`: the inventory served as JSON pages of 1,000 devices by a loopback HTTP server here (`--inventory-url`). */
    source: { type: 'string', default: 'file' },
  },
});
if (flags.source !== 'file' && flags.source !== 'url')
  throw new Error(`--source: expected file or url, got ${JSON.stringify(flags.source)}`);
const COUNTS = flags.devices.split(',').map((n) => wholeFlag('devices', n, 1, 100_000));
const RUNS = wholeFlag('runs', flags.runs, 1, 10);
const TIME = '/usr/bin/time';
if (!existsSync(TIME)) throw new Error(`${TIME} is needed for the peak RSS of the child process`);

interface StartSample {
  wallMs: number;
  maxRssMiB: number;
  rolloutId: string;
}

/** Serves `doc` as `--inventory-url` pages of 1,000 devices (pools and defaults on the first) on 127.0.0.1. */
async function servePages(doc: ReturnType<typeof scaleInventory>): Promise<{ url: string; close(): Promise<void> }> {
  const PAGE = 1_000;
  const server = createServer((req, res) => {
    const page = Number(new URL(req.url ?? '/', 'http://x').searchParams.get('page') ?? '0');
    const devices = doc.devices.slice(page * PAGE, (page + 1) * PAGE);
    const last = (page + 1) * PAGE >= doc.devices.length;
    res.setHeader('content-type', 'application/json');
    res.end(
      JSON.stringify({
        ...(page === 0 ? { pools: doc.pools, defaults: doc.defaults } : {}),
        devices,
        next: last ? null : `/devices?page=${page + 1}`,
      }),
    );
  });
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/devices?page=0`,
    close: () => new Promise((done) => server.close(() => done())),
  };
}

/** `wavegate start --json` of the demo rollout over `inventory` (a file, or a URL): wall time, peak RSS, the rollout's id. */
function startChild(inventory: string, address: string, taskQueue: string): Promise<StartSample> {
  const argv = [
    TIME,
    '-f',
    '@@rss %M',
    process.execPath,
    join(PROJECT_ROOT, 'bin', 'wavegate.js'),
    'start',
    '-f',
    join(PROJECT_ROOT, 'examples', 'demo-rollout.yaml'),
    ...(/^https?:/.test(inventory)
      ? ['--inventory-url', inventory, '--inventory-deadline', '10m']
      : ['--inventory', inventory]),
    '--profiles',
    join(PROJECT_ROOT, 'profiles'),
    '--address',
    address,
    '--task-queue',
    taskQueue,
    '--json',
  ];
  const started = process.hrtime.bigint();
  return new Promise((done, fail) => {
    const child = spawn(argv[0]!, argv.slice(1), { cwd: PROJECT_ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    child.once('error', fail);
    child.once('exit', (code) => {
      const wallMs = Number(process.hrtime.bigint() - started) / 1e6;
      const rss = /@@rss (\d+)/.exec(stderr);
      if (code !== 0 || !rss) return fail(new Error(`wavegate start exited ${code}: ${stderr.slice(-2000)}`));
      const { rolloutId } = JSON.parse(stdout.trim().split('\n').at(-1)!) as { rolloutId: string };
      done({ wallMs, maxRssMiB: Number(rss[1]) / 1024, rolloutId });
    });
  });
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'wavegate-start-scale-'));
  const env = await startDevServerEnv();
  const taskQueue = 'start-scale';
  const worker = await createWorker({
    connection: env.nativeConnection,
    namespace: env.namespace ?? 'default',
    taskQueue,
    deps: { auditDir: join(dir, 'audit'), profilesRoot: join(PROJECT_ROOT, 'profiles') },
  });
  const running = worker.run();
  const client = env.client;
  const address = env.address;
  try {
    console.log('devices | run | start wall | peak RSS | load | membership entities (events, bytes each)');
    for (const n of COUNTS) {
      const doc = scaleInventory(n);
      const served = flags.source === 'url' ? await servePages(doc) : undefined;
      const inventory = served?.url ?? join(dir, `fleet-${n}.yaml`);
      if (!served) writeFileSync(inventory, stringify(doc));
      for (let run = 1; run <= RUNS; run++) {
        const load = loadavg()[0]!.toFixed(1);
        const sample = await startChild(inventory, address, taskQueue);
        const handle = client.workflow.getHandle(sample.rolloutId);
        // The rollout's input names its membership; the rollout itself is not what is measured.
        const described = await handle.describe();
        const history = await handle.fetchHistory();
        const started = history.events?.[0]?.workflowExecutionStartedEventAttributes;
        const input = started?.input?.payloads?.[0]?.data;
        const membership = input
          ? (
              JSON.parse(Buffer.from(input).toString()) as {
                membership?: { workflowId: string; volumes?: Array<{ workflowId: string }> };
              }
            ).membership
          : undefined;
        await handle.terminate('start-scale: only start is measured').catch(() => {});
        const entities = membership ? (membership.volumes?.map((v) => v.workflowId) ?? [membership.workflowId]) : [];
        const sizes: string[] = [];
        for (const id of entities) {
          const d = await client.workflow.getHandle(id).describe();
          sizes.push(`${d.historyLength} ev / ${((d.historySize ?? 0) / 1e6).toFixed(2)} MB`);
        }
        console.log(
          `${n} | ${run} | ${(sample.wallMs / 1000).toFixed(2)} s | ${sample.maxRssMiB.toFixed(0)} MiB | ${load} | ${entities.length}: ${sizes.join(', ')}` +
            (described.status.name === 'RUNNING' ? '' : ` (rollout ${described.status.name})`),
        );
      }
      await served?.close();
    }
  } finally {
    worker.shutdown();
    await running.catch(() => {});
    await env.teardown();
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exitCode = 1;
});
