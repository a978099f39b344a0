import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { readAuditFile } from '../../audit/file';
import { executionTreeShapes, HISTORY_EVENT_LIMIT, PENDING_LIMIT } from '../support/history-bounds';
import { demoDevices, type Fleet, type SimDeviceSpec } from '../../sim';
import { recordHistory } from '../support/histories';
import { realRollouts } from '../support/real-rollouts';
import { APPLY_COMMAND } from '../support/rollout-helpers';

/**
 * Issue 12's hot path end to end: real activities over SSH to the fleet simulator on a real Temporal
 * dev server. Overlapping slices keep every pool at its budget across slice boundaries and never above
 * it (read from the simulator's own connection counters); a slow device is applied, never called
 * offline; a stopped one is skipped as offline at its apply.
 */
describe('hot path over real SSH', () => {
  const real = realRollouts('hot-path-ssh');
  const { auditDir } = real;
  const setup = (rollout: Record<string, unknown>, devices: SimDeviceSpec[], budgets?: Record<string, number>) =>
    real.rollout(rollout, devices, budgets);
  const marker = (fleet: Fleet, id: string) =>
    readFileSync(join(fleet.device(id).sandbox, '.wavegate/profiles/demo/revision'), 'utf8').trim();

  it('overlapping slices of 5: each pool stays at or under its budget across every boundary, and in-flight goes past one slice', async () => {
    const DEVICES = 60;
    // Two pools of 30 at 10%: 3 in flight each, 6 in all, more than one slice of 5 can hold by itself.
    const { fleet, input } = await setup(
      { gate: '0s', phases: [{ canary: '1 device' }, { bulk: 'remainder' }] },
      demoDevices(DEVICES),
      { 'pool-a': 0.1, 'pool-b': 0.1 },
    );
    // Every command a little slow, so devices of neighbouring slices are in flight together.
    await Promise.all(fleet.devices.map((d) => fleet.setFaults(d.id, { latencyMs: 150 })));
    fleet.resetCounters();
    const handle = await real.start({ ...input, sliceSize: 5 });
    const result = await handle.result();
    await recordHistory(handle, 'hot-path-overlapping-slices');

    expect(result.state).toBe('completed');
    expect(result.counts.applied).toBe(DEVICES);
    for (const d of fleet.devices) expect(marker(fleet, d.id), d.id).toBe('2');
    // The applies only: the floor is raised over SSH too once the rollout completes, outside any budget.
    const lastApplied = readAuditFile(auditDir, input.rolloutId)
      .filter((r) => r.event === 'phase.applied')
      .at(-1)!;
    const until = Date.parse(lastApplied.at);
    const pool = (name: string) => fleet.devices.filter((d) => d.spec.pool === name).map((d) => d.id);
    const peakA = fleet.peakConnections(pool('pool-a'), until);
    const peakB = fleet.peakConnections(pool('pool-b'), until);
    const peakAll = fleet.peakConnections(
      fleet.devices.map((d) => d.id),
      until,
    );
    console.log(`peak connections: pool-a ${peakA}, pool-b ${peakB}, all ${peakAll}`);
    // Never above a pool's limit, though up to three slices were alive at once.
    expect(peakA).toBeLessThanOrEqual(3);
    expect(peakB).toBeLessThanOrEqual(3);
    // More devices in flight than one slice holds: slices overlapped, and the budget was reached.
    expect(peakAll).toBeGreaterThan(5);
    expect(peakAll).toBe(6);

    const shapes = await executionTreeShapes(real.env.client, input.rolloutId);
    const [parent, ...children] = shapes;
    expect(children).toHaveLength(Math.ceil((DEVICES - 1) / 5));
    expect(parent!.childrenInitiated).toBe(children.length);
    for (const shape of shapes) {
      expect(shape.events, shape.workflowId).toBeLessThan(HISTORY_EVENT_LIMIT);
      expect(shape.maxPendingActivities, shape.workflowId).toBeLessThanOrEqual(PENDING_LIMIT);
      expect(shape.maxPendingChildren, shape.workflowId).toBeLessThanOrEqual(PENDING_LIMIT);
    }
    // Slices were alive side by side; a slice stays alive only while a device of its own or of one before it
    // runs, so at most in-flight (6) + 2 of them.
    expect(parent!.maxPendingChildren).toBeGreaterThanOrEqual(2);
    expect(parent!.maxPendingChildren).toBeLessThanOrEqual(6 + 2);
    const child = real.env.client.workflow.getHandle(children[3]!.workflowId);
    await recordHistory(child, 'hot-path-overlapping-slice-child');
  }, 300_000);

  it('a slow but alive device is applied, never reported offline; a stopped device is skipped as offline at its apply, not counted', async () => {
    const { fleet, input } = await setup(
      { gate: '0s', maxFailureRatio: 0, offline: 'skip', phases: [{ bulk: 'remainder' }] },
      demoDevices(5),
    );
    // edge-02: every command 1 s late, and its marker read 12 s late (longer than the old snapshot's 10 s read).
    await fleet.setFaults('edge-02', {
      latencyMs: 1_000,
      slowCommand: '^cat "\\$HOME/\\.wavegate/profiles/demo/revision"',
      slowMs: 12_000,
    });
    await fleet.setFaults('edge-03', { offline: true });
    const handle = await real.start(input);
    const result = await handle.result();
    await recordHistory(handle, 'hot-path-slow-and-stopped');

    expect(result.state).toBe('completed'); // maxFailureRatio 0: a counted failure would have tripped it
    expect(result.devices.find((d) => d.id === 'edge-02')).toMatchObject({ state: 'applied' });
    expect(marker(fleet, 'edge-02')).toBe('2');
    expect(fleet.count('edge-02', APPLY_COMMAND)).toBeGreaterThan(0);
    expect(result.devices.find((d) => d.id === 'edge-03')).toMatchObject({
      state: 'skipped',
      reason: expect.stringMatching(/^offline at apply: edge-03/),
    });
    expect(fleet.commands('edge-03')).toEqual([]);
    expect(result.counts).toMatchObject({ applied: 4, skipped: 1, failed: 0 });
    // The trail names the offline device with its outcome, as it named one offline at snapshot.
    const applied = readAuditFile(auditDir, input.rolloutId).filter(
      (r) => r.event === 'devices.outcome' && (r.evidence as { mode: string }).mode === 'apply',
    );
    expect(
      applied
        .flatMap((r) => (r.evidence as { devices: Array<{ id: string }> }).devices)
        .find((d) => d.id === 'edge-03'),
    ).toMatchObject({ state: 'skipped', reason: expect.stringMatching(/^offline at apply/) });
  }, 300_000);

  it('a device ahead of the rollout (marker above the target) is learned at its apply: not-for-me, nothing run, not counted', async () => {
    const { fleet, input } = await setup(
      { gate: '0s', maxFailureRatio: 0, phases: [{ bulk: 'remainder' }] },
      demoDevices(4),
    );
    // The snapshot reads no marker any more: edge-03 is at r3 (a later rollout reached it), above the target r2.
    mkdirSync(join(fleet.device('edge-03').sandbox, '.wavegate/profiles/demo'), { recursive: true });
    writeFileSync(join(fleet.device('edge-03').sandbox, '.wavegate/profiles/demo/revision'), '3\n');
    const handle = await real.start(input);
    const result = await handle.result();
    await recordHistory(handle, 'hot-path-ahead-at-apply');

    expect(result.state).toBe('completed');
    expect(result.devices.find((d) => d.id === 'edge-03')).toMatchObject({
      state: 'not-for-me',
      reason: 'ahead: the device is at revision 3, above r2',
    });
    expect(marker(fleet, 'edge-03')).toBe('3');
    // One script ran and stopped before the lock: no lock was taken, no apply launched.
    expect(fleet.commands('edge-03')).toHaveLength(1);
    expect(existsSync(join(fleet.device('edge-03').sandbox, '.wavegate/profiles/demo/last-apply'))).toBe(false);
    expect(result.counts).toMatchObject({ applied: 3, failed: 0 });
    for (const id of ['edge-01', 'edge-02', 'edge-04']) expect(marker(fleet, id)).toBe('2');
  }, 300_000);
});
