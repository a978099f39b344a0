/**
 * What a cached twin costs the worker's memory (bench/README.md, "Worker memory per cached twin"): a worker in a
 * child process with its sticky cache larger than the fleet, N twins started (each by one `twinReport`, as a first
 * sync does), the workflow task queue drained, and the worker's RSS before and after, per twin. VARIANTS compares
 * workflow bundles: as shipped, and with given modules preloaded (shared by every workflow of the thread).
 *
 *   npx tsx bench/twin-memory.ts --twins 1000
 */
import { fork } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { Client } from '@temporalio/client';
import { temporal } from '@temporalio/proto';
import { bundleWorkflowCode, NativeConnection } from '@temporalio/worker';
import { mapLimit } from '../core/map-limit';
import { reportToTwin } from '../clients/twin';
import { startDevServerEnv } from '../workers/dev-server';
import { createWorker, WORKFLOWS_PATH } from '../workers/worker';
import { wholeFlag } from './flags';

const { values: flags, positionals } = parseArgs({
  options: {
    twins: { type: 'string', default: '1000' },
    variants: { type: 'string', default: 'shipped' },
  },
  allowPositionals: true,
});

interface ChildRequest {
  address: string;
  namespace: string;
  taskQueue: string;
  cache: number;
  variant: string;
}
const quiet = { log() {}, info() {}, warn() {}, error() {}, debug() {}, trace() {} };

async function child(): Promise<void> {
  process.once('message', async (req: ChildRequest) => {
    const preload = req.variant.startsWith('preload:') ? req.variant.slice('preload:'.length).split('+') : [];
    const alias = req.variant.startsWith('alias:') ? req.variant.slice('alias:'.length) : undefined;
    const workflowBundle = await bundleWorkflowCode({
      workflowsPath: WORKFLOWS_PATH,
      logger: quiet,
      ...(preload.length ? { preloadModules: preload } : {}),
      ...(alias
        ? {
            webpackConfigHook: (config) => ({
              ...config,
              resolve: { ...config.resolve, alias: { ...(config.resolve?.alias as object), zod: alias } },
            }),
          }
        : {}),
    });
    const connection = await NativeConnection.connect({ address: req.address });
    const worker = await createWorker({
      connection,
      namespace: req.namespace,
      taskQueue: req.taskQueue,
      workflowBundle,
      layout: { role: 'all', maxActivities: 10, maxWorkflowTasks: 40, maxCachedWorkflows: req.cache },
    });
    process.on('disconnect', () => worker.shutdown());
    process.send!({ ready: true, bundleBytes: workflowBundle.code.length });
    await worker.run();
    process.exit(0);
  });
}

function vmRss(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) * 1024 : 0;
}

async function parent(): Promise<void> {
  const twins = wholeFlag('twins', flags.twins!, 1, 100_000);
  const env = await startDevServerEnv();
  const namespace = env.namespace ?? 'default';
  const client = new Client({ connection: env.connection, namespace });
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
  const mib = (n: number) => (n / 1048576).toFixed(0);
  try {
    for (const variant of flags.variants!.split(',')) {
      const taskQueue = `twin-memory-${variant.replace(/[^a-z0-9]/gi, '-')}`;
      const worker = fork(__filename, ['child'], {
        execArgv: ['--require', 'tsx/cjs'],
        stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      });
      const ready = await new Promise<{ bundleBytes: number }>((resolve) => {
        worker.once('message', resolve);
        worker.send({ address: env.address, namespace, taskQueue, cache: twins + 200, variant } satisfies ChildRequest);
      });
      await sleep(3_000);
      const before = vmRss(worker.pid!);
      const t0 = Date.now();
      await mapLimit(
        Array.from({ length: twins }, (_, i) => `${taskQueue}-${i}`),
        32,
        (id) =>
          reportToTwin(client, taskQueue, id, {
            report: { profiles: {}, health: [{ name: 'motd', ok: true }], healthAt: null, agentVersion: 'bench' },
            knownVersion: 0,
          }),
      );
      // Until the workflow task queue has been empty for 3 s: every twin has run its first task and is cached.
      for (let empty = 0; empty < 3; ) {
        const stats = await client.workflowService.describeTaskQueue({
          namespace,
          taskQueue: { name: taskQueue },
          taskQueueType: temporal.api.enums.v1.TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
          reportStats: true,
        });
        empty = Number(stats.stats?.approximateBacklogCount ?? 0) === 0 ? empty + 1 : 0;
        await sleep(1_000);
      }
      const took = Date.now() - t0;
      await sleep(3_000);
      const after = vmRss(worker.pid!);
      console.log(
        `${variant}: bundle ${(ready.bundleBytes / 1048576).toFixed(2)} MiB; worker RSS ${mib(before)} → ${mib(after)} MiB with ${twins} twins cached: ${((after - before) / twins / 1024).toFixed(0)} KiB a twin; started and settled in ${(took / 1000).toFixed(1)} s`,
      );
      worker.kill('SIGTERM');
      await new Promise((r) => worker.once('exit', r));
    }
  } finally {
    await env.teardown();
  }
}

(positionals[0] === 'child' ? child() : parent()).catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
