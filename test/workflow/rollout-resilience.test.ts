import { copyFileSync, existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { WorkflowHandle } from '@temporalio/client';
import { describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { auditFilePath, DEFAULT_AUDIT_DIR } from '../../audit/file';
import { activityRuns } from '../support/history-bounds';
import type { DeviceState } from '../../core/rollout-state';
import { demoDevices, fleetInventory, generateEd25519, type Fleet } from '../../sim';
import { approveUpdate, statusQuery, type RolloutStatus } from '../../contracts/rollout';
import { rolloutWorkflow } from '../../workflows/rollout';
import { spawnCliUntil, stopChild } from '../support/cli';
import { rolloutInputFor, startTestWorker } from '../support/harness';
import { realRollouts } from '../support/real-rollouts';
import { recordHistory } from '../support/histories';

const APPLY = /install -m 0644/;
/** How long the demo apply runs on a device in the worker-kill test (longer than a reattach takes). */
const APPLY_SECONDS = 12;
/** How often an apply ran on a simulated device, as the apply itself counted it there. */
const runs = (fleet: Fleet, id: string): number => {
  const file = join(fleet.device(id).sandbox, 'apply-runs');
  return existsSync(file) ? readFileSync(file, 'utf8').split('\n').filter(Boolean).length : 0;
};
const MOTD_R2 = 'wavegate demo revision 2 - rolled out in phases, gated and audited';

/** Poll the status query until `done` holds (the workflow answers queries only while a worker runs). */
async function waitForStatus(
  handle: WorkflowHandle,
  done: (s: RolloutStatus) => boolean,
  timeoutMs = 60_000,
): Promise<RolloutStatus> {
  const deadline = Date.now() + timeoutMs;
  let last: RolloutStatus | undefined;
  while (Date.now() < deadline) {
    try {
      last = await handle.query(statusQuery);
      if (done(last)) return last;
    } catch {
      // not answering yet (workflow task not run): poll again
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`status condition not reached in ${timeoutMs} ms; last: ${JSON.stringify(last?.devices)}`);
}

const stateOf = (s: RolloutStatus, id: string): DeviceState | undefined => s.devices.find((d) => d.id === id)?.state;

describe('rollout resilience on a real Temporal dev server over real SSH', () => {
  // Workers of each test's own: one is killed mid-apply, the other's audit trail is read.
  const real = realRollouts('resilience', { worker: false });

  it('a worker SIGKILLed mid-apply and replaced: its in-flight devices reattach to their running applies, each apply ran exactly once, the device records it', async () => {
    const { dir, fleet, inventoryPath } = await real.fleet(demoDevices(8), { 'pool-a': 0.5, 'pool-b': 0.5 });
    // Every exec waits this long before it starts, so a device's apply unit is in flight for seconds.
    const latencyMs = 1_500;
    await Promise.all(fleet.devices.map((d) => fleet.setFaults(d.id, { latencyMs })));
    // The demo apply's `install` counts its runs on the device and takes a while, so the worker dies while
    // applies are really running there (the count, not the worker, says how often each ran).
    for (const d of fleet.devices) {
      const sandbox = await fleet.ensureSandbox(d.id);
      writeFileSync(
        join(sandbox, '.sim/bin/install'),
        `#!/bin/sh\necho run >> "$HOME/apply-runs"\nsleep ${APPLY_SECONDS}\nexec /usr/bin/install "$@"\n`,
        { mode: 0o755 },
      );
    }
    const rolloutId = `rollout:resilience-crash-${Date.now()}`;
    const input = rolloutInputFor(
      dir,
      {
        phases: [
          { canary: '1 device', gate: '1s' },
          { bulk: 'remainder', gate: '1s' },
        ],
        gate: '1s',
      },
      inventoryPath,
      rolloutId,
    );
    const taskQueue = `crash-${process.pid}-${Date.now()}`;
    const workerArgs = [
      'worker',
      '--address',
      real.env.address,
      '--namespace',
      real.env.namespace ?? 'default',
      '--task-queue',
      taskQueue,
    ];

    const first = await spawnCliUntil(workerArgs, /^worker \S+ polling /m);
    let second: Awaited<ReturnType<typeof spawnCliUntil>> | undefined;
    try {
      const handle = await real.env.client.workflow.start(rolloutWorkflow, {
        workflowId: rolloutId,
        taskQueue,
        args: [input],
      });
      // Mid-phase: the bulk phase has devices applying and devices not yet started.
      await waitForStatus(
        handle,
        (s) => s.phases[1]?.stage === 'applying' && s.devices.filter((d) => d.state === 'applying').length >= 2,
        90_000,
      );
      // Until an apply of the bulk phase runs on a device (it counted itself there).
      const bulk = (s: RolloutStatus) => s.devices.filter((d) => d.phase === 1).map((d) => d.id);
      const status = await handle.query(statusQuery);
      const deadline = Date.now() + 60_000;
      while (!bulk(status).some((id) => runs(fleet, id) > 0) && Date.now() < deadline)
        await new Promise((r) => setTimeout(r, 100));
      const atKill = await handle.query(statusQuery);
      const exited = new Promise<void>((resolve) => first.child.once('exit', () => resolve()));
      first.child.kill('SIGKILL');
      await exited;
      const killedAt = Date.now();
      const inFlightAtKill = atKill.devices.filter((d) => d.state === 'applying').map((d) => d.id);
      const doneAtKill = atKill.devices.filter((d) => d.state === 'applied').map((d) => d.id);
      const runningAtKill = inFlightAtKill.filter((id) => runs(fleet, id) > 0);
      expect(inFlightAtKill.length).toBeGreaterThanOrEqual(2);
      expect(runningAtKill.length).toBeGreaterThanOrEqual(1);
      expect(doneAtKill.length).toBeGreaterThanOrEqual(1);
      expect(inFlightAtKill.length + doneAtKill.length).toBeLessThan(8); // mid-phase: some not started yet

      second = await spawnCliUntil(workerArgs, /^worker \S+ polling /m);
      const result = await handle.result();
      await recordHistory(handle, 'rollout-resilience-worker-killed');

      expect(result.state).toBe('completed');
      expect(result.counts.applied).toBe(8);
      const applyRuns = activityRuns(await handle.fetchHistory()).filter((r) => r.activityType === 'applyRevision');
      expect(applyRuns).toHaveLength(8);
      for (const r of applyRuns) expect(r.outcome).toBe('completed');
      const retried = applyRuns
        .filter((r) => (r.attempt ?? 0) >= 2)
        .map((r) => (r.input[0] as { device: { id: string } }).device.id);
      for (const id of runningAtKill) expect(retried, `${id} was running at the kill`).toContain(id);
      const resumeMs: string[] = [];
      for (const device of fleet.devices) {
        expect(readFileSync(join(device.sandbox, 'etc/motd'), 'utf8').trim()).toBe(MOTD_R2);
        expect(readFileSync(join(device.sandbox, '.wavegate/profiles/demo/revision'), 'utf8').trim()).toBe('2');
        // Exactly once, read from the device: the apply counted its own runs there.
        expect(runs(fleet, device.id), `${device.id}: apply runs on the device`).toBe(1);
        // The device's record of its apply unit: this rollout's activity, the attempt that finished it, exit 0.
        const last = join(device.sandbox, '.wavegate/profiles/demo/last-apply');
        const owner = readFileSync(join(last, 'owner'), 'utf8');
        expect(owner, device.id).toMatch(new RegExp(`^rollout=${rolloutId.replace(/[^A-Za-z0-9]/g, '.')}$`, 'm'));
        expect(readFileSync(join(last, 'exitcode'), 'utf8').trim(), device.id).toBe('0');
        expect(readFileSync(join(last, 'released'), 'utf8'), device.id).toMatch(
          /^apply of r2 done: verified, marker written$/m,
        );
        const attempt = Number(/^attempt=(\d+)$/m.exec(owner)?.[1]);
        if (runningAtKill.includes(device.id)) {
          expect(attempt, `${device.id} was reattached by a retry`).toBeGreaterThanOrEqual(2);
          resumeMs.push(`${device.id}=${Date.parse(/^attemptAt=(\S+)$/m.exec(owner)![1]!) - killedAt}ms`);
        }
      }
      console.log(
        `in flight at the kill: ${inFlightAtKill.join(', ')} (apply running on the device: ${runningAtKill.join(', ')}); retried: ${retried.join(', ')}; ` +
          `resumed (kill → retry holding the device's lock): ${resumeMs.join(' ')}; apply launches per device: ${fleet.devices.map((d) => `${d.id}=${fleet.count(d.id, APPLY)}`).join(' ')}`,
      );
    } finally {
      first.child.kill('SIGKILL');
      if (second) await stopChild(second.child);
      rmSync(auditFilePath(DEFAULT_AUDIT_DIR, rolloutId), { force: true });
    }
  }, 240_000);

  it('a changed host key and a refused login at apply time fail those devices at once with the reason, never retried, no command run', async () => {
    const { dir, fleet } = await real.fleet(demoDevices(6));
    // Every device logs in with its own copy of the fleet key, so one device's key can be swapped later.
    const inventory = fleetInventory(fleet, { budgets: { 'pool-a': 0.5, 'pool-b': 0.5 } });
    const keyPath = (id: string) => join(dir, `key-${id}`);
    for (const d of inventory.devices) {
      copyFileSync(fleet.clientKeyPath, keyPath(d.id));
      (d.ssh as { key?: string }).key = keyPath(d.id);
    }
    const inventoryPath = join(dir, 'inventory.yaml');
    writeFileSync(inventoryPath, stringify(inventory));
    const rolloutId = 'rollout:resilience-refusals';
    const input = rolloutInputFor(
      dir,
      {
        phases: [
          { canary: '1 device', gate: 'manual' },
          { bulk: 'remainder', gate: '1s' },
        ],
        gate: '1s',
        maxFailureRatio: 0.5,
        minSample: 5,
      },
      inventoryPath,
      rolloutId,
    );
    const worker = await startTestWorker(real.env, { auditDir: join(dir, 'audit') });
    try {
      // Two refusals in a phase of five stay under the failure gate (0.4 ≤ 0.5 once all five are in), so
      // the rollout runs on and the test sees each refusal on its own.
      const handle = await real.env.client.workflow.start(rolloutWorkflow, {
        workflowId: rolloutId,
        taskQueue: worker.taskQueue,
        args: [input],
      });
      const waiting = await waitForStatus(handle, (s) => s.phases[0]?.stage === 'awaiting-approval');
      const next = waiting.devices.filter((d) => d.phase === 1 && d.state === 'pending').map((d) => d.id);
      expect(next.length).toBe(5);
      const [hostKeyVictim, authVictim] = next as [string, string];

      const commandsAtSnapshot = {
        [hostKeyVictim]: fleet.commands(hostKeyVictim).length,
        [authVictim]: fleet.commands(authVictim).length,
      };
      expect(commandsAtSnapshot[hostKeyVictim]).toBe(0); // the snapshot contacts no device (the membership only)
      fleet.rotateHostKey(hostKeyVictim);
      writeFileSync(keyPath(authVictim), generateEd25519('not-the-fleet-key').private, { mode: 0o600 });

      await handle.executeUpdate(approveUpdate, { args: [{ by: 'test' }] });
      const result = await handle.result();
      await recordHistory(handle, 'rollout-resilience-ssh-refusals');
      await recordHistory(handle, 'ssh-refusals-untouched');

      expect(result.state).toBe('completed');
      expect(result.devices.find((d) => d.id === hostKeyVictim)).toMatchObject({
        state: 'failed',
        reason: expect.stringMatching(
          new RegExp(
            `^${hostKeyVictim}: host key SHA256:\\S+ at 127\\.0\\.0\\.1:\\d+ does not match the pinned SHA256:\\S+; refusing to connect\\. .*then pin it: wavegate fleet repin ${hostKeyVictim} --inventory <fleet\\.yaml> --accept SHA256:\\S+$`,
          ),
        ),
      });
      expect(result.devices.find((d) => d.id === authVictim)).toMatchObject({
        state: 'failed',
        reason: expect.stringMatching(
          new RegExp(`^${authVictim}: authentication as wavegate at 127\\.0\\.0\\.1:\\d+ failed`),
        ),
      });
      for (const id of next.slice(2)) expect(stateOf(result, id), id).toBe('applied');

      // Neither device ran a single command after the snapshot: the refusal came before any exec.
      expect(fleet.commands(hostKeyVictim)).toHaveLength(commandsAtSnapshot[hostKeyVictim]!);
      expect(fleet.commands(authVictim)).toHaveLength(commandsAtSnapshot[authVictim]!);

      // One apply activity each, started once (attempt 1), failed as non-retryable: no retries spent.
      const runs = activityRuns(await handle.fetchHistory()).filter((r) => r.activityType === 'applyRevision');
      for (const [id, type] of [
        [hostKeyVictim, 'Transport.host-key'],
        [authVictim, 'Transport.auth'],
      ] as const) {
        const mine = runs.filter((r) => (r.input[0] as { device: { id: string } }).device.id === id);
        expect(mine, id).toHaveLength(1);
        expect(mine[0]).toMatchObject({
          attempt: 1,
          startedEvents: 1,
          outcome: 'failed',
          failure: { type, nonRetryable: true, retryState: 'RETRY_STATE_NON_RETRYABLE_FAILURE' },
        });
        expect(mine[0]!.summary).toBe(`apply r2 → ${id} (${waiting.phases[1]!.name})`);
      }
    } finally {
      await worker.stop();
    }
  }, 120_000);
});
