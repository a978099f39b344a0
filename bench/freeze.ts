/**
 * How fast a freeze holds a fleet's running rollouts (issue 46 item 1: 100 running rollouts all held within 5 s of
 * the command). On the simulated fleet (sim/), a Temporal dev server and one in-process worker: N rollouts of the
 * demo profile, one device each, all in a long canary gate (running), then the real `wavegate freeze` command
 * (a child process, run from dist/ when WAVEGATE_RUN_FROM=dist, else the sources through tsx). Measured from just
 * before the command is spawned: when the command returned, and when the last rollout recorded the freeze's pause
 * (the `at` of its pause control, the worker's clock: the machine's one clock); then the same for `unfreeze`
 * (the last resume recorded). Every rollout's status is checked: paused by the freeze, then running again.
 *
 *   npx tsx bench/freeze.ts [--rollouts 100] [--runs 1]
 *   WAVEGATE_RUN_FROM=dist npx tsx bench/freeze.ts     # the command as installed (npm run build first)
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { stringify } from 'yaml';
import { Client, Connection } from '@temporalio/client';
import { prepareRollout } from '../intake/prepare';
import type { RolloutInput } from '../core/rollout/input';
import { demoDevices, startFleet, writeFleetInventory } from '../sim';
import { startDevServerEnv } from '../workers/dev-server';
import { PROJECT_ROOT } from '../intake/package-layout';
import { createWorker } from '../workers/worker';
import { statusQuery, type RolloutStatus } from '../contracts/rollout';
import { rolloutWorkflow } from '../workflows/rollout';
import { wholeFlag } from './flags';

const { values: flags } = parseArgs({
  options: { rollouts: { type: 'string', default: '100' }, runs: { type: 'string', default: '1' } },
});
const ROLLOUTS = wholeFlag('rollouts', flags.rollouts, 1, 500);
const RUNS = wholeFlag('runs', flags.runs, 1, 10);

async function until(what: string, check: () => Promise<boolean>, timeoutMs = 300_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

/** The real command, as an operator runs it; resolves with its exit code and output. */
function wavegate(args: string[], address: string, taskQueue: string): Promise<{ code: number; out: string }> {
  return new Promise((resolve) => {
    const child = spawn(
      process.execPath,
      [join(PROJECT_ROOT, 'bin', 'wavegate.js'), ...args, '--address', address, '--task-queue', taskQueue],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let out = '';
    child.stdout.on('data', (b) => {
      out += b;
    });
    child.stderr.on('data', (b) => {
      out += b;
    });
    child.on('close', (code) => resolve({ code: code ?? 1, out }));
  });
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'wavegate-bench-freeze-'));
  const fleet = await startFleet({ devices: demoDevices(ROLLOUTS), dir: join(dir, 'fleet') });
  const inventoryPath = writeFleetInventory(fleet, join(dir, 'fleet.yaml'), { budgets: { 'pool-a': 1, 'pool-b': 1 } });
  const env = await startDevServerEnv();
  const taskQueue = 'wavegate-bench-freeze';
  const worker = await createWorker({
    connection: env.nativeConnection,
    namespace: env.namespace ?? 'default',
    taskQueue,
    deps: { auditDir: join(dir, 'audit'), inventoryRoots: [dir] },
  });
  const running = worker.run();
  const connection = await Connection.connect({ address: env.address });
  const client = new Client({ connection, namespace: env.namespace ?? 'default' });
  const rows: string[] = [];
  try {
    for (let run = 1; run <= RUNS; run++) {
      for (const d of fleet.devices) rmSync(join(d.sandbox, '.wavegate'), { recursive: true, force: true });
      for (const d of fleet.devices) rmSync(join(d.sandbox, 'etc'), { recursive: true, force: true });
      const specPath = join(dir, `spec-${run}.yaml`);
      writeFileSync(
        specPath,
        stringify({
          rollout: { profile: 'demo', fromRevision: 1, toRevision: 2, phases: [{ canary: '1 device', gate: '1h' }] },
        }),
      );
      const base = prepareRollout({
        specPath,
        inventoryPath,
        profilesRoot: join(PROJECT_ROOT, 'profiles'),
        startedBy: 'bench',
      });
      const ids = fleet.devices.map((d, i) => ({ id: `rollout:bench-freeze-${run}-${i + 1}`, device: d.id }));
      await Promise.all(
        ids.map(({ id, device }) => {
          const input: RolloutInput = { ...base, rolloutId: id, onlyDevices: [device] };
          return client.workflow.start(rolloutWorkflow, { workflowId: id, taskQueue, args: [input] });
        }),
      );
      const status = (id: string) => client.workflow.getHandle(id).query(statusQuery) as Promise<RolloutStatus>;
      const stages = async () => Promise.all(ids.map(async ({ id }) => (await status(id)).phases[0]?.stage));
      await until(`${ROLLOUTS} rollouts in their gate`, async () => (await stages()).every((s) => s === 'gate'));
      // Visibility lists them all before the command (the freeze's second sweep would catch a late one anyway).
      await until('visibility to list them', async () => {
        let n = 0;
        for await (const _ of client.workflow.list({
          query: "WorkflowType = 'rolloutWorkflow' AND ExecutionStatus = 'Running'",
        }))
          n++;
        return n >= ROLLOUTS;
      });

      const sent = Date.now();
      const frozen = await wavegate(['freeze', '--reason', `bench run ${run}`, '--json'], env.address, taskQueue);
      const returned = Date.now();
      if (frozen.code !== 0) throw new Error(`freeze exited ${frozen.code}: ${frozen.out}`);
      const { window, paused } = JSON.parse(frozen.out) as { window: { id: string }; paused: string[] };
      const held = await Promise.all(ids.map(({ id }) => status(id)));
      const byFreeze = held.filter(
        (s) => s.state === 'paused' && s.controls.at(-1)?.by === `freeze:${window.id}` && s.controls.at(-1)?.accepted,
      );
      const lastPause = Math.max(...byFreeze.map((s) => Date.parse(s.controls.at(-1)!.at)));

      const liftSent = Date.now();
      const lifted = await wavegate(['unfreeze', window.id, '--json'], env.address, taskQueue);
      const liftReturned = Date.now();
      if (lifted.code !== 0) throw new Error(`unfreeze exited ${lifted.code}: ${lifted.out}`);
      const resumed = (JSON.parse(lifted.out) as { resumed: string[] }).resumed;
      const after = await Promise.all(ids.map(({ id }) => status(id)));
      const lastResume = Math.max(...after.map((s) => Date.parse(s.controls.at(-1)!.at)));
      const row = `| ${run} | ${ROLLOUTS} | ${paused.length} | ${byFreeze.length} | ${returned - sent} ms | ${lastPause - sent} ms | ${resumed.length} | ${after.filter((s) => s.state === 'running').length} | ${liftReturned - liftSent} ms | ${lastResume - liftSent} ms |`;
      rows.push(row);
      console.log(row);
      await Promise.all(ids.map(({ id }) => client.workflow.getHandle(id).terminate('bench over')));
    }
    console.log(
      `\n## ${ROLLOUTS} running rollouts (one simulated device each, in a 1 h gate), the command from ${process.env.WAVEGATE_RUN_FROM === 'dist' ? 'dist/' : 'the sources (tsx)'}\n`,
    );
    console.log(
      '| run | rollouts | freeze says paused | paused by the freeze (status) | freeze returned | last pause recorded | unfreeze says resumed | running again | unfreeze returned | last resume recorded |',
    );
    console.log('|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
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
