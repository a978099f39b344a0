/**
 * The scale benchmark (bench/README.md): one rollout of N simulated SSH devices through Temporal
 * (dev server + one worker, phases run as slice children), against the naïve baseline — an ssh loop
 * over the same fleet with the same number of devices in flight, each device verify → apply → verify →
 * marker via device/steps.ts `applyToDevice`, no Temporal. Prints wall time, devices/s,
 * per-execution history sizes and peak pending activities, and the ratio of the two.
 *
 *   npx tsx bench/rollout-scale.ts --devices 10000 --slice 200 [--in-flight 100] [--shard-size 1000] [--only temporal|baseline]
 *       [--apply-ms 500] [--gate 1s] [--records parent|slices]
 *
 * With both runs it also prints the makespan ÷ ideal: ideal = Σ phases ⌈phase devices ÷ in-flight⌉ ×
 * per-device time + the gates, per pool (a phase lasts as long as its slowest pool's rounds), where the
 * per-device time is the median time one device takes in the baseline loop on the same fleet.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { Client, Connection } from '@temporalio/client';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { stringify } from 'yaml';
import { applyToDevice } from '../device/steps';
import { prepareRollout } from '../intake/prepare';
import { loadRolloutInventory } from '../intake/inventory';
import { storeMembership } from '../clients/membership';
import type { DeviceTarget } from '../core/rollout-state';
import type { RolloutInput } from '../core/rollout/input';
import { planRollout } from '../core/rollout/plan';
import { demoDevices, generateEd25519, writeFleetInventory, type SimDeviceSpec } from '../sim';
import { startDevServerEnv } from '../workers/dev-server';
import { PROJECT_ROOT } from '../intake/package-layout';
import { createWorker } from '../workers/worker';
import { rolloutWorkflow } from '../workflows/rollout';
import type { ShardDevice, ShardReply, ShardRequest } from './fleet-shard';
import {
  executionTreeShapes,
  HISTORY_EVENT_LIMIT,
  PENDING_LIMIT,
  type HistoryShape,
} from '../test/support/history-bounds';
import { wholeFlag } from './flags';
import { childPid, processCpu, startCpuSplit, type CpuSplit } from './cpu-account';

const { values: flags } = parseArgs({
  options: {
    devices: { type: 'string', default: '10000' },
    slice: { type: 'string', default: '200' },
    'in-flight': { type: 'string', default: '100' },
    'shard-size': { type: 'string', default: '1000' },
    only: { type: 'string' },
    'apply-ms': { type: 'string', default: '0' },
    gate: { type: 'string', default: '1s' },
    /** `slices`: the rollout keeps sliced records (core/rollout/sliced-plan.ts), its inventory stored as a membership, as `start` does from 5,000 devices. */
    records: { type: 'string', default: 'parent' },
  },
});
if (!['parent', 'slices'].includes(flags.records!))
  throw new Error(`--records: expected parent or slices, got ${JSON.stringify(flags.records)}`);
const DEVICES = wholeFlag('devices', flags.devices, 1);
const SLICE = wholeFlag('slice', flags.slice, 1);
const IN_FLIGHT = wholeFlag('in-flight', flags['in-flight'], 1);
const SHARD_SIZE = wholeFlag('shard-size', flags['shard-size'], 1);
const APPLY_MS = wholeFlag('apply-ms', flags['apply-ms'], 0, 60_000);
const GATE = flags.gate!;
if (!/^\d+(ms|s|m)$/.test(GATE))
  throw new Error(`--gate: expected a duration like 0s, 1s or 500ms, got ${JSON.stringify(GATE)}`);
if (flags.only !== undefined && !['temporal', 'baseline'].includes(flags.only))
  throw new Error(`--only: expected temporal or baseline, got ${JSON.stringify(flags.only)}`);
const POOLS = ['pool-a', 'pool-b'] as const; // demoDevices alternates the two

// ---- the fleet: shards of the simulator in child processes ----

class Shard {
  private waiting: ((reply: ShardReply) => void) | undefined;
  constructor(readonly child: ChildProcess) {
    child.on('message', (reply: ShardReply) => {
      const resolve = this.waiting;
      this.waiting = undefined;
      resolve?.(reply);
    });
  }
  ask<R extends ShardReply>(request: ShardRequest): Promise<R> {
    return new Promise((resolve, reject) => {
      this.waiting = (reply) =>
        'error' in reply ? reject(new Error(`fleet shard: ${reply.error}`)) : resolve(reply as R);
      this.child.send(request);
    });
  }
}

async function startShards(
  dir: string,
  specs: SimDeviceSpec[],
  clientKeyPath: string,
): Promise<{ shards: Shard[]; devices: ShardDevice[] }> {
  const shards: Shard[] = [];
  const parts: Promise<{ ready: ShardDevice[] }>[] = [];
  for (let i = 0; i < specs.length; i += SHARD_SIZE) {
    const shard = new Shard(
      fork(join(__dirname, 'fleet-shard.ts'), [], {
        execArgv: ['--require', 'tsx/cjs'],
        stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      }),
    );
    shards.push(shard);
    parts.push(
      shard.ask({
        devices: specs.slice(i, i + SHARD_SIZE),
        dir: join(dir, 'fleet'),
        clientKeyPath,
        ...(APPLY_MS ? { applyMs: APPLY_MS } : {}),
      }),
    );
  }
  const devices = (await Promise.all(parts)).flatMap((p) => p.ready);
  return { shards, devices };
}

async function countApplied(shards: Shard[]) {
  const counts = await Promise.all(
    shards.map((s) => s.ask<{ counted: { marker2: number; content2: number; commands: number } }>({ count: true })),
  );
  return counts.reduce(
    (a, { counted: c }) => ({
      marker2: a.marker2 + c.marker2,
      content2: a.content2 + c.content2,
      commands: a.commands + c.commands,
    }),
    { marker2: 0, content2: 0, commands: 0 },
  );
}

function writeInventory(path: string, devices: ShardDevice[], clientKeyPath: string, budget: number): void {
  writeFleetInventory({ user: 'wavegate', clientKeyPath, devices }, path, {
    budgets: Object.fromEntries(POOLS.map((p) => [p, budget])),
  });
}

/** Writes a rollout spec of the demo profile, r1 → r2, and prepares it against the inventory as the CLI does. */
function rolloutInputFor(
  dir: string,
  rollout: Record<string, unknown>,
  inventoryPath: string,
  rolloutId: string,
): RolloutInput {
  const specPath = join(dir, `${rolloutId.replace(/[^A-Za-z0-9_-]/g, '_')}.yaml`);
  writeFileSync(specPath, stringify({ rollout: { profile: 'demo', fromRevision: 1, toRevision: 2, ...rollout } }));
  return {
    ...prepareRollout({ specPath, inventoryPath, profilesRoot: join(PROJECT_ROOT, 'profiles'), startedBy: 'bench' }),
    rolloutId,
  };
}

// ---- the two runs ----

interface RunResult {
  name: string;
  wallMs: number;
  applied: number;
  failed: number;
  commands: number;
  shapes?: HistoryShape[];
  /** The Temporal run: this process's peak RSS (the worker and the client; the fleet is in other processes). */
  peakRssMiB?: number;
  /** The baseline: the median time one device took (connect to marker written). */
  perDeviceMs?: number;
  cpu: CpuSplit;
}

async function runTemporal(dir: string, inventoryPath: string, shards: Shard[]): Promise<RunResult> {
  const env = await startDevServerEnv();
  const serverPid = childPid('start-dev');
  const serverCpu = () => (serverPid ? processCpu(serverPid).own : 0);
  const taskQueue = 'wavegate-bench';
  const worker = await createWorker({
    connection: env.nativeConnection,
    namespace: env.namespace ?? 'default',
    taskQueue,
    // The fleet's inventory is read on this worker (`--inventory-on-worker`) unless the records are sliced.
    deps: { auditDir: join(dir, 'audit'), inventoryRoots: [dir] },
  });
  const running = worker.run();
  try {
    const rolloutId = `rollout:bench-${DEVICES}`;
    const input: RolloutInput = {
      ...rolloutInputFor(dir, PHASED, inventoryPath, rolloutId),
      sliceSize: SLICE,
      ...(flags.records === 'slices'
        ? {
            membership: await storeMembership(
              env.client,
              taskQueue,
              loadRolloutInventory(inventoryPath),
              inventoryPath,
            ),
            records: 'slices' as const,
          }
        : {}),
    };
    // At 10,000 devices a page of the parent's history is over gRPC's default 4 MB receive limit.
    const connection = await Connection.connect({
      address: env.address,
      channelArgs: { 'grpc.max_receive_message_length': 64 * 1024 * 1024 },
    });
    const client = new Client({ connection, namespace: env.namespace ?? 'default' });
    let peak = 0;
    // memoryUsage.rss() alone: the full memoryUsage() walks every heap space, CPU this run would count.
    const sampler = setInterval(() => (peak = Math.max(peak, process.memoryUsage.rss())), 250);
    // CPU from the rollout's start to its end only: not the worker's bundling, nor the histories read after.
    const cpuSince = startCpuSplit(shards.map((s) => s.child.pid!));
    const serverBefore = serverCpu();
    const started = Date.now();
    const result = await client.workflow.execute(rolloutWorkflow, { workflowId: rolloutId, taskQueue, args: [input] });
    const wallMs = Date.now() - started;
    const cpu = cpuSince(serverCpu() - serverBefore);
    clearInterval(sampler);
    // Every execution's history kept for reading where the time went (npx tsx bench/history-timeline.ts <file>).
    const kept = join(tmpdir(), `wavegate-rollout-scale-${DEVICES}-histories`);
    rmSync(kept, { recursive: true, force: true });
    mkdirSync(kept, { recursive: true });
    const shapes = await executionTreeShapes(client, rolloutId, (id, history) =>
      writeFileSync(join(kept, `${id.replace(/[^A-Za-z0-9_.-]/g, '_')}.json`), JSON.stringify(history)),
    );
    console.log(`  histories: ${kept}`);
    await connection.close();
    const { commands } = await countApplied(shards);
    if (result.state !== 'completed')
      console.log(`temporal rollout ended ${result.state}: ${JSON.stringify(result.counts)}`);
    return {
      name: 'wavegate (Temporal)',
      wallMs,
      applied: result.counts.applied,
      failed: result.counts.failed,
      commands,
      shapes,
      peakRssMiB: Math.round(peak / 1024 / 1024),
      cpu,
    };
  } finally {
    worker.shutdown();
    await running;
    await env.teardown();
  }
}

async function runBaseline(
  input: RolloutInput,
  devices: ShardDevice[],
  clientKeyPath: string,
  shards: Shard[],
): Promise<RunResult> {
  const targets: DeviceTarget[] = devices.map((d) => ({
    id: d.id,
    host: d.host,
    port: d.port,
    user: 'wavegate',
    pool: d.spec.pool!,
    class: d.spec.class!,
    ssh: { hostKey: d.hostKeyFingerprint, key: clientKeyPath },
  }));
  let applied = 0;
  let failed = 0;
  let next = 0;
  const durations: number[] = [];
  const cpuSince = startCpuSplit(shards.map((s) => s.child.pid!));
  const started = Date.now();
  // The ssh loop: IN_FLIGHT workers take the next device; each connects, verifies, applies, verifies, writes the marker.
  await Promise.all(
    Array.from({ length: IN_FLIGHT }, async () => {
      while (next < targets.length) {
        const target = targets[next++]!;
        const deviceStarted = Date.now();
        try {
          await applyToDevice(target, input.steps, { commandTimeoutMs: 60_000 });
          durations.push(Date.now() - deviceStarted);
          applied++;
        } catch (err) {
          failed++;
          if (failed <= 5) console.log(`baseline: ${(err as Error).message}`);
        }
      }
    }),
  );
  const wallMs = Date.now() - started;
  const cpu = cpuSince();
  const { commands } = await countApplied(shards);
  durations.sort((a, b) => a - b);
  return {
    name: 'ssh loop (baseline)',
    wallMs,
    applied,
    failed,
    commands,
    perDeviceMs: durations[Math.floor(durations.length / 2)] ?? 0,
    cpu,
  };
}

// ---- the ideal makespan ----

const PHASED = { phases: [{ canary: '1 device' }, { bulk: '25%' }, { bulk: 'remainder' }], gate: GATE };

/**
 * The least time the phased rollout can take with this per-device time: each phase runs its devices in
 * rounds of each pool's in-flight limit (the slowest pool sets the phase's length), then its gate.
 */
function idealMakespan(
  dir: string,
  inventoryPath: string,
  devices: ShardDevice[],
  perDeviceMs: number,
): { ms: number; rounds: number[]; gatesMs: number } {
  const input = rolloutInputFor(dir, PHASED, inventoryPath, `rollout:bench-${DEVICES}`);
  const plan = planRollout(
    input,
    devices.map((d) => ({
      id: d.id,
      pool: d.spec.pool!,
      class: d.spec.class!,
      updateClass: 'required' as const,
      current: 1,
    })),
  );
  const poolOf = new Map(devices.map((d) => [d.id, d.spec.pool!]));
  const limit = new Map(plan.pools.map((p) => [p.pool, p.maxInFlight]));
  const rounds = plan.phases.map((phase) => {
    const perPool = new Map<string, number>();
    for (const id of phase.devices) perPool.set(poolOf.get(id)!, (perPool.get(poolOf.get(id)!) ?? 0) + 1);
    return Math.max(0, ...[...perPool].map(([pool, n]) => Math.ceil(n / limit.get(pool)!)));
  });
  const gatesMs = plan.phases.reduce((sum, p) => sum + (typeof p.gate === 'number' ? p.gate : 0), 0);
  return { ms: rounds.reduce((a, b) => a + b, 0) * perDeviceMs + gatesMs, rounds, gatesMs };
}

// ---- report ----

const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`;
const rate = (r: RunResult) => (r.applied / (r.wallMs / 1000)).toFixed(1);

function printShapes(shapes: HistoryShape[]): void {
  console.log(
    `\nper-execution history (limits: < ${HISTORY_EVENT_LIMIT} events, ≤ ${PENDING_LIMIT} pending activities/children)`,
  );
  console.log(
    '| execution | events | bytes | activities | max pending activities | max pending children | longest workflow task |',
  );
  console.log('|---|---:|---:|---:|---:|---:|---:|');
  for (const s of shapes)
    console.log(
      `| ${s.workflowId} | ${s.events} | ${s.bytes} | ${s.activitiesScheduled} | ${s.maxPendingActivities} | ${s.maxPendingChildren} | ${s.maxWorkflowTaskMs} ms |`,
    );
  const children = shapes.slice(1);
  if (children.length > 0) {
    const max = (f: (s: HistoryShape) => number) => Math.max(...children.map(f));
    console.log(
      `children: ${children.length}; largest history ${max((s) => s.events)} events, ${max((s) => s.bytes)} bytes; peak pending activities ${max((s) => s.maxPendingActivities)}`,
    );
  }
  const over = shapes.filter(
    (s) =>
      s.events >= HISTORY_EVENT_LIMIT || s.maxPendingActivities > PENDING_LIMIT || s.maxPendingChildren > PENDING_LIMIT,
  );
  console.log(
    over.length === 0
      ? 'every execution within the limits'
      : `OVER THE LIMITS: ${over.map((s) => s.workflowId).join(', ')}`,
  );
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'wavegate-bench-'));
  const clientKeyPath = join(dir, 'client_ed25519');
  writeFileSync(clientKeyPath, generateEd25519('wavegate-bench').private, { mode: 0o600 });
  console.log(
    `fleet: ${DEVICES} simulated SSH devices in ${Math.ceil(DEVICES / SHARD_SIZE)} processes; ${IN_FLIGHT} in flight; slices of ${SLICE}; apply ${APPLY_MS ? `+${APPLY_MS} ms` : 'as is'}; gates ${GATE}`,
  );
  const fleetStart = Date.now();
  const { shards, devices } = await startShards(dir, demoDevices(DEVICES), clientKeyPath);
  console.log(`fleet up in ${seconds(Date.now() - fleetStart)}`);
  const inventoryPath = join(dir, 'inventory.yaml');
  // Two pools of N/2: a budget of IN_FLIGHT/N lets IN_FLIGHT/2 devices of each pool run at once.
  writeInventory(inventoryPath, devices, clientKeyPath, IN_FLIGHT / DEVICES);
  const input = rolloutInputFor(
    dir,
    { phases: [{ canary: '1 device' }, { bulk: 'remainder' }] },
    inventoryPath,
    'rollout:bench-steps',
  );
  const results: RunResult[] = [];
  try {
    if (flags.only !== 'baseline') {
      console.log('\nrunning the rollout through Temporal...');
      results.push(await runTemporal(dir, inventoryPath, shards));
      console.log(`  ${results.at(-1)!.applied} applied in ${seconds(results.at(-1)!.wallMs)}`);
    }
    if (flags.only !== 'temporal') {
      // The baseline starts from the fleet as it was (with --only temporal the Temporal run's devices are counted below).
      if (results.length) await Promise.all(shards.map((s) => s.ask({ reset: true })));
      console.log('\nrunning the baseline ssh loop...');
      results.push(await runBaseline(input, devices, clientKeyPath, shards));
      console.log(`  ${results.at(-1)!.applied} applied in ${seconds(results.at(-1)!.wallMs)}`);
    }
    const onDisk = await countApplied(shards);

    console.log(`\n## ${DEVICES} devices, ${IN_FLIGHT} in flight, slices of ${SLICE}\n`);
    console.log('| run | wall time | devices/s | applied | failed | SSH commands |');
    console.log('|---|---:|---:|---:|---:|---:|');
    for (const r of results)
      console.log(`| ${r.name} | ${seconds(r.wallMs)} | ${rate(r)} | ${r.applied} | ${r.failed} | ${r.commands} |`);
    console.log('\nCPU seconds by component (the cores are shared: wall time follows CPU)');
    console.log(
      '| run | this process (worker + client, or the loop) | Temporal server | fleet shards (SSH servers) | device commands waited for | whole machine | machine per device |',
    );
    console.log('|---|---:|---:|---:|---:|---:|---:|');
    for (const r of results)
      console.log(
        `| ${r.name} | ${r.cpu.process.toFixed(1)} | ${r.cpu.server.toFixed(1)} | ${r.cpu.shards.toFixed(1)} | ${r.cpu.deviceCommands.toFixed(1)} | ${r.cpu.machine.toFixed(1)} | ${((r.cpu.machine / DEVICES) * 1000).toFixed(1)} ms |`,
      );
    if (results.length === 2)
      console.log(`\nwavegate / baseline wall time: ${(results[0]!.wallMs / results[1]!.wallMs).toFixed(2)}×`);
    console.log(
      `last run's devices at revision 2 on disk: marker ${onDisk.marker2}, content ${onDisk.content2} of ${DEVICES}`,
    );
    const temporal = results.find((r) => r.shapes);
    const baseline = results.find((r) => r.perDeviceMs !== undefined);
    if (temporal?.peakRssMiB)
      console.log(`wavegate process peak RSS during the rollout (worker + client): ${temporal.peakRssMiB} MiB`);
    if (temporal && baseline) {
      const ideal = idealMakespan(dir, inventoryPath, devices, baseline.perDeviceMs!);
      console.log(
        `ideal makespan: rounds per phase ${ideal.rounds.join(' + ')} × ${baseline.perDeviceMs} ms per device (the baseline's median) + gates ${ideal.gatesMs} ms = ${seconds(ideal.ms)}`,
      );
      console.log(
        `wavegate makespan ÷ ideal: **${(temporal.wallMs / ideal.ms).toFixed(2)}×** (${seconds(temporal.wallMs)} ÷ ${seconds(ideal.ms)})`,
      );
    }
    const shapes = temporal?.shapes;
    if (shapes) printShapes(shapes);
  } finally {
    await Promise.all(
      shards.map(
        (s) =>
          new Promise<void>((resolve) => {
            s.child.once('exit', () => resolve());
            s.child.send({ stop: true });
          }),
      ),
    );
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
