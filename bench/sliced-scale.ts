/**
 * The control plane at 100,000 devices (bench/README.md, "`sliced-scale.ts`"; issue 26). For each
 * --devices count, a generated fleet stored as the CLI stores it (membership volumes past 32 pages) and
 * one rollout over it with sliced records (`records: 'slices'`, the slice size `start` would choose),
 * every apply mocked (an activity that answers `applied` at once: what is measured is Temporal, the
 * workflows and the plan), on a Temporal dev server and a worker in a process of its own (bench/sliced-worker.ts;
 * before 2026-12-05 14:1x it ran in this process, and "the process" figures were worker and client together).
 * Reported per count: wall time of the rollout, the peak RSS of the worker process and of this one (the client,
 * which generated and uploaded the fleet), each execution's history (the parent, the largest slice, the
 * membership entities; events and bytes as the server describes them), and the control plane's CPU per device
 * (the worker, this process, the dev server).
 *
 *   ulimit -n 20000; NODE_OPTIONS=--expose-gc npx tsx bench/sliced-scale.ts --devices 1000,10000,100000 [--in-flight 250]
 *       [--events-cache-mb 64] [--slice N] [--worker-node-args='--max-old-space-size=1024']
 *
 * --in-flight is per pool (two pools) and the same at every size, so the counts compare the same work.
 */
import { parseArgs } from 'node:util';
import { fork } from 'node:child_process';
import { startDevServerEnv } from '../workers/dev-server';
import { rolloutWorkflow } from '../workflows/rollout';
import { generatedFleet, slicedRolloutInput } from '../test/support/sliced-fleet';
import type { SlicedWorkerReply, SlicedWorkerRequest } from './sliced-worker';
import { childPid, ownCpu, processCpu, vmRss } from './cpu-account';
import { wholeFlag } from './flags';
import { join } from 'node:path';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';

const { values: flags } = parseArgs({
  options: {
    devices: { type: 'string', default: '1000,10000,100000' },
    'in-flight': { type: 'string', default: '250' },
    /**
     * The dev server's shard events cache (`history.eventsCacheMaxSizeBytes`, Temporal's default 512 KiB), in MiB:
     * an activity's start reads its scheduled event from there, or from the store with its whole batch
     * (bench/README.md, "Where the server's CPU goes at 100,000").
     */
    'events-cache-mb': { type: 'string' },
    /**
     * Node options of the worker process: by default the shipped unit's heap limit
     * (examples/systemd/wavegate-worker.service); `--worker-node-args ''` runs it on Node's default, and more
     * flags profile it (`--cpu-prof --cpu-prof-dir=DIR`, `--heapsnapshot-signal=SIGUSR2`).
     */
    'worker-node-args': { type: 'string', default: '--max-old-space-size=1024' },
    /** Devices a slice (default: what `start` chooses, core/rollout/sliced-plan.ts slicedSliceSize). */
    slice: { type: 'string' },
  },
});
const EVENTS_CACHE_MB =
  flags['events-cache-mb'] === undefined ? undefined : wholeFlag('events-cache-mb', flags['events-cache-mb'], 1, 4096);
const SLICE = flags.slice === undefined ? undefined : wholeFlag('slice', flags.slice, 1, 100_000);
const COUNTS = flags.devices.split(',').map((n) => wholeFlag('devices', n, 100, 200_000));
/** Devices in flight per pool (two pools), the same at every fleet size: the budget is this over the pool's size. */
const IN_FLIGHT = wholeFlag('in-flight', flags['in-flight'], 1, 100_000);

/** The worker's peaks since the last reset: V8's heap in use and reserved, the memory outside it (bytes), workflows cached. */
const memory = { heap: 0, heapTotal: 0, external: 0, cached: 0 };
type MemoryPeak = keyof typeof memory;
const MEMORY_PEAKS = Object.keys(memory) as MemoryPeak[];

/** The worker in a process of its own (bench/sliced-worker.ts); stop() answers how many applies it mocked. */
function startWorker(request: SlicedWorkerRequest): Promise<{ pid: number; stop: () => Promise<number> }> {
  const extra = flags['worker-node-args']!.split(/\s+/).filter(Boolean);
  const child = fork(join(__dirname, 'sliced-worker.ts'), [], {
    execArgv: ['--require', 'tsx/cjs', ...extra],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  let applies = 0;
  child.on('message', (reply: SlicedWorkerReply) => {
    if ('heap' in reply) for (const key of MEMORY_PEAKS) memory[key] = Math.max(memory[key], reply[key]);
  });
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      const answered = new Promise<void>((resolve) =>
        child.on('message', (reply: SlicedWorkerReply) => {
          if ('applies' in reply) {
            applies = reply.applies;
            resolve();
          }
        }),
      );
      child.send({ stop: true });
      const killer = setTimeout(() => child.kill('SIGKILL'), 20_000);
      await Promise.race([answered.then(() => exited), exited]);
      clearTimeout(killer);
    }
    return applies;
  };
  return new Promise((resolve, reject) => {
    child.once('message', (reply: SlicedWorkerReply) =>
      'error' in reply ? reject(new Error(`worker process: ${reply.error}`)) : resolve({ pid: child.pid!, stop }),
    );
    child.once('exit', (code, signal) =>
      reject(new Error(`worker process exited ${code ?? signal} before it was ready`)),
    );
    child.send(request);
  });
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'wavegate-sliced-scale-'));
  const env = await startDevServerEnv(
    EVENTS_CACHE_MB === undefined ? {} : { eventsCacheBytes: EVENTS_CACHE_MB * 2 ** 20 },
  );
  const serverPid = childPid('start-dev');
  const serverCpu = () => (serverPid ? processCpu(serverPid).own : 0);
  const taskQueue = 'sliced-scale';
  const worker = await startWorker({
    address: env.address,
    namespace: env.namespace ?? 'default',
    taskQueue,
    auditDir: join(dir, 'audit'),
  });
  // The worker's RSS from /proc, sampled; this process (the client: the fleet generated and uploaded) apart.
  let peakRss = 0;
  let clientPeakRss = 0;
  const sampler = setInterval(() => {
    peakRss = Math.max(peakRss, vmRss(worker.pid));
    clientPeakRss = Math.max(clientPeakRss, process.memoryUsage.rss());
  }, 500);
  try {
    console.log(
      'devices | slice | wall | worker peak RSS (its own process; V8 heap in use / reserved, external) | client peak RSS | parent (events / MB) | largest slice (events / MB) | membership (entities, largest MB) | CPU ms/device worker + client + server',
    );
    for (const n of COUNTS) {
      const before = vmRss(worker.pid);
      const made = await slicedRolloutInput(
        env.client,
        taskQueue,
        generatedFleet(n, Math.min(1, IN_FLIGHT / Math.floor(n / 2))),
        `rollout:bench-sliced-${n}`,
      );
      const input = SLICE === undefined ? made : { ...made, sliceSize: SLICE };
      const membership = input.membership!;
      // What the sealed membership entities (cached by the worker that ran their uploads) hold before the rollout.
      console.error(
        `${n}: worker RSS ${(before / 2 ** 20).toFixed(0)} MiB before the upload, ${(vmRss(worker.pid) / 2 ** 20).toFixed(0)} MiB after`,
      );
      // The fleet generated and uploaded above is garbage now: collected (with --expose-gc) so the peak is the rollout's.
      (globalThis as { gc?: () => void }).gc?.();
      peakRss = vmRss(worker.pid);
      for (const key of MEMORY_PEAKS) memory[key] = 0;
      clientPeakRss = process.memoryUsage.rss();
      const cpu0 = { worker: processCpu(worker.pid).own, own: ownCpu(), server: serverCpu() };
      const t0 = Date.now();
      const handle = await env.client.workflow.start(rolloutWorkflow, {
        workflowId: input.rolloutId,
        taskQueue,
        args: [input],
      });
      const result = await handle.result();
      const wallS = (Date.now() - t0) / 1000;
      const cpu = {
        worker: processCpu(worker.pid).own - cpu0.worker,
        own: ownCpu() - cpu0.own,
        server: serverCpu() - cpu0.server,
      };
      if (result.state !== 'completed' || result.counts.applied !== n)
        throw new Error(`${n}: ${result.state}, ${JSON.stringify(result.counts)}`);
      const parent = await handle.describe();
      let largest = { events: 0, bytes: 0 };
      for (const s of result.slices ?? []) {
        const d = await env.client.workflow.getHandle(s.workflowId).describe();
        if ((d.historySize ?? 0) > largest.bytes) largest = { events: d.historyLength, bytes: d.historySize ?? 0 };
      }
      let entityMax = 0;
      for (const v of membership.volumes ?? [membership]) {
        const d = await env.client.workflow.getHandle(v.workflowId).describe();
        entityMax = Math.max(entityMax, d.historySize ?? 0);
      }
      const mb = (b: number) => (b / 1e6).toFixed(2);
      console.log(
        `${n} | ${input.sliceSize} | ${wallS.toFixed(1)} s | ${(peakRss / 2 ** 20).toFixed(0)} MiB (${(memory.heap / 2 ** 20).toFixed(0)} / ${(memory.heapTotal / 2 ** 20).toFixed(0)}, ${(memory.external / 2 ** 20).toFixed(0)}) | ${(clientPeakRss / 2 ** 20).toFixed(0)} MiB | ${parent.historyLength} / ${mb(parent.historySize ?? 0)} | ${largest.events} / ${mb(largest.bytes)} | ${membership.volumes?.length ?? 1}, ${mb(entityMax)} | ${((cpu.worker * 1000) / n).toFixed(2)} + ${((cpu.own * 1000) / n).toFixed(2)} + ${((cpu.server * 1000) / n).toFixed(2)}`,
      );
    }
    console.log(`applies: ${await worker.stop()}; most workflows cached at once: ${memory.cached}`);
  } finally {
    clearInterval(sampler);
    await worker.stop();
    await env.teardown();
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exitCode = 1;
});
