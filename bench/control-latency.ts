/**
 * Control latency during a running rollout (issue 12's last target), on the simulated fleet (sim/)
 * with a Temporal dev server and one in-process worker, devices a little slow so a phase is mid-way
 * with its slices overlapping when the controls arrive:
 *   - pause: how long the update takes to return, and whether any device apply is scheduled after
 *     it returned (read from the parent's and every slice's history: there must be none);
 *   - abort (with rollback): how long after the update returned the first rollback apply is scheduled
 *     and started (ActivityTaskScheduled / ActivityTaskStarted of an apply of the spec's fromRevision,
 *     the compensation putting a changed device back).
 * Times are the machine's one clock (the server's event times and this process's Date.now()).
 *
 *   npx tsx bench/control-latency.ts [--devices 200] [--in-flight 50] [--slice 50] [--latency-ms 300] [--runs 3]
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { stringify } from 'yaml';
import { Client, Connection, type WorkflowHandle } from '@temporalio/client';
import { temporal } from '@temporalio/proto';
import { prepareRollout } from '../intake/prepare';
import type { RolloutInput } from '../core/rollout/input';
import { demoDevices, startFleet, writeFleetInventory } from '../sim';
import { startDevServerEnv } from '../workers/dev-server';
import { PROJECT_ROOT } from '../intake/package-layout';
import { createWorker } from '../workers/worker';
import { abortUpdate, pauseUpdate, resumeUpdate, statusQuery, type RolloutStatus } from '../contracts/rollout';
import { rolloutWorkflow } from '../workflows/rollout';
import { activityRuns, childWorkflowIds } from '../test/support/history-bounds';
import { wholeFlag } from './flags';

const { values: flags } = parseArgs({
  options: {
    devices: { type: 'string', default: '200' },
    'in-flight': { type: 'string', default: '50' },
    slice: { type: 'string', default: '50' },
    'latency-ms': { type: 'string', default: '300' },
    runs: { type: 'string', default: '3' },
  },
});
const DEVICES = wholeFlag('devices', flags.devices, 20, 5000);
const IN_FLIGHT = wholeFlag('in-flight', flags['in-flight'], 2, 1000);
const SLICE = wholeFlag('slice', flags.slice, 5, 1000);
const LATENCY_MS = wholeFlag('latency-ms', flags['latency-ms'], 0, 10_000);
const RUNS = wholeFlag('runs', flags.runs, 1, 20);
const E = temporal.api.enums.v1.EventType;
const FROM_REVISION = 1;

const ms = (t: temporal.api.history.v1.IHistoryEvent['eventTime']): number =>
  Number(t?.seconds ?? 0) * 1000 + Math.floor((t?.nanos ?? 0) / 1e6);

/** Every apply of the rollout (parent and slices): when scheduled, when started, whether a rollback. */
async function applies(
  client: Client,
  workflowId: string,
): Promise<Array<{ scheduledAt: number; startedAt?: number; rollback: boolean }>> {
  const out: Array<{ scheduledAt: number; startedAt?: number; rollback: boolean }> = [];
  const queue = [workflowId];
  while (queue.length) {
    const id = queue.shift()!;
    const history = await client.workflow.getHandle(id).fetchHistory();
    queue.push(...childWorkflowIds(history));
    const at = new Map<number, { scheduledAt: number; startedAt?: number }>();
    for (const e of history.events ?? []) {
      if (e.eventType === E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)
        at.set(Number(e.eventId), { scheduledAt: ms(e.eventTime) });
      if (e.eventType === E.EVENT_TYPE_ACTIVITY_TASK_STARTED) {
        const row = at.get(Number(e.activityTaskStartedEventAttributes!.scheduledEventId));
        if (row) row.startedAt = ms(e.eventTime);
      }
    }
    for (const run of activityRuns(history)) {
      if (run.activityType !== 'applyRevision') continue;
      const steps = (run.input[0] as { steps?: { revision?: number } } | undefined)?.steps;
      out.push({ ...at.get(run.scheduledEventId)!, rollback: steps?.revision === FROM_REVISION });
    }
  }
  return out;
}

async function until(what: string, check: () => Promise<boolean>, timeoutMs = 120_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'wavegate-control-latency-'));
  const fleet = await startFleet({ devices: demoDevices(DEVICES), dir: join(dir, 'fleet') });
  const budget = Math.min(1, (IN_FLIGHT / 2 + 0.5) / (DEVICES / 2)); // two pools: IN_FLIGHT / 2 each
  const inventoryPath = writeFleetInventory(fleet, join(dir, 'fleet.yaml'), {
    budgets: { 'pool-a': budget, 'pool-b': budget },
  });
  await Promise.all(fleet.devices.map((d) => fleet.setFaults(d.id, { latencyMs: LATENCY_MS })));
  const env = await startDevServerEnv();
  const taskQueue = 'wavegate-control-latency';
  const worker = await createWorker({
    connection: env.nativeConnection,
    namespace: env.namespace ?? 'default',
    taskQueue,
    deps: { auditDir: join(dir, 'audit'), inventoryRoots: [dir] }, // the input names the fleet file in dir
  });
  const running = worker.run();
  const connection = await Connection.connect({ address: env.address });
  const client = new Client({ connection, namespace: env.namespace ?? 'default' });
  const rows: string[] = [];
  try {
    for (let run = 1; run <= RUNS; run++) {
      // Every device back at r1 (content, marker, floor, staging): the same start for each run.
      for (const d of fleet.devices) rmSync(join(d.sandbox, '.wavegate'), { recursive: true, force: true });
      for (const d of fleet.devices) rmSync(join(d.sandbox, 'etc'), { recursive: true, force: true });
      const specPath = join(dir, `spec-${run}.yaml`);
      writeFileSync(
        specPath,
        stringify({
          rollout: {
            profile: 'demo',
            fromRevision: FROM_REVISION,
            toRevision: 2,
            gate: '0s',
            phases: [{ canary: '1 device' }, { bulk: 'remainder' }],
          },
        }),
      );
      const rolloutId = `rollout:control-latency-${run}`;
      const input: RolloutInput = {
        ...prepareRollout({
          specPath,
          inventoryPath,
          profilesRoot: join(PROJECT_ROOT, 'profiles'),
          startedBy: 'bench',
        }),
        rolloutId,
        sliceSize: SLICE,
      };
      const handle: WorkflowHandle = await client.workflow.start(rolloutWorkflow, {
        workflowId: rolloutId,
        taskQueue,
        args: [input],
      });
      const status = () => handle.query(statusQuery) as Promise<RolloutStatus>;
      // Mid-way through the bulk phase, with more than one slice's worth done.
      await until('a quarter of the fleet applied', async () => (await status()).counts.applied >= DEVICES / 4);
      const pauseSent = Date.now();
      await handle.executeUpdate(pauseUpdate, { args: [{ by: 'bench' }] });
      const pauseReturned = Date.now();
      await new Promise((r) => setTimeout(r, 3_000)); // anything scheduled late would show by now
      const afterPause = (await applies(client, rolloutId)).filter((a) => a.scheduledAt > pauseReturned).length;
      await handle.executeUpdate(resumeUpdate, { args: [{ by: 'bench' }] });
      await until('half of the fleet applied', async () => (await status()).counts.applied >= DEVICES / 2);
      const abortSent = Date.now();
      await handle.executeUpdate(abortUpdate, { args: [{ by: 'bench', rollback: true }] });
      const abortReturned = Date.now();
      const final = (await handle.result()) as RolloutStatus;
      const rollbacks = (await applies(client, rolloutId))
        .filter((a) => a.rollback)
        .sort((a, b) => a.scheduledAt - b.scheduledAt);
      const first = rollbacks[0];
      const firstStarted = Math.min(...rollbacks.map((a) => a.startedAt ?? Infinity));
      const row = `| ${run} | ${pauseReturned - pauseSent} ms | ${afterPause} | ${abortReturned - abortSent} ms | ${first ? `${first.scheduledAt - abortReturned} ms` : 'none'} | ${Number.isFinite(firstStarted) ? `${firstStarted - abortReturned} ms` : 'none'} | ${rollbacks.length} | ${final.state} |`;
      rows.push(row);
      console.log(row);
    }
    console.log(
      `\n## ${DEVICES} simulated devices, ${IN_FLIGHT} in flight, slices of ${SLICE}, ${LATENCY_MS} ms per command\n`,
    );
    console.log(
      '| run | pause returned after | applies scheduled after pause returned | abort returned after | first rollback apply scheduled (after abort returned) | first rollback apply started | rollback applies | final state |',
    );
    console.log('|---|---:|---:|---:|---:|---:|---:|---|');
    for (const row of rows) console.log(row);
  } finally {
    await connection.close();
    worker.shutdown();
    await running;
    await env.teardown();
    await fleet.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

main().then(
  () => process.exit(0),
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
