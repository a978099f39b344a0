import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { readAuditFile } from '../../audit/file';
import { storeMembership } from '../../clients/membership';
import { sliceRecordsQuery } from '../../contracts/rollout';
import type { RolloutInput } from '../../core/rollout/input';
import { loadRolloutInventory } from '../../intake/inventory';
import { demoDevices, type Fleet } from '../../sim';
import { recordHistory } from '../support/histories';
import { realRollouts } from '../support/real-rollouts';

function marker(fleet: Fleet, id: string): string | undefined {
  try {
    return readFileSync(join(fleet.device(id).sandbox, '.wavegate/profiles/demo/revision'), 'utf8').trim();
  } catch {
    return undefined;
  }
}

/**
 * Sliced records (core/rollout/sliced-plan.ts, issue 26): over real simulated devices and a real worker,
 * a rollout whose input says `records: 'slices'` keeps no record of a sliced phase's device in its own
 * history — the plan's shape comes from an activity, each slice loads its devices from the membership,
 * keeps their records and its own audit trail, and answers with counts — and still completes, rolls
 * back and reports what every device did.
 */
describe('sliced records', () => {
  const real = realRollouts('sliced-records');

  async function slicedInput(
    rollout: Record<string, unknown>,
    devices: number,
    name: string,
  ): Promise<{ input: RolloutInput; fleet: Fleet; ids: string[] }> {
    const made = await real.rollout(rollout, demoDevices(devices), { 'pool-a': 0.25, 'pool-b': 0.25 });
    const inventory = loadRolloutInventory(made.inventoryPath);
    const membership = await storeMembership(real.env.client, real.worker.taskQueue, inventory, made.inventoryPath);
    const input: RolloutInput = {
      ...made.input,
      rolloutId: `rollout:${name}`,
      membership,
      records: 'slices',
      sliceSize: 4,
    };
    return { input, fleet: made.fleet, ids: inventory.devices.map((d) => d.id) };
  }

  it('completes: every device at r2, counts from the slices, no sliced device named in the parent history, every slice trail linked', async () => {
    const { input, fleet, ids } = await slicedInput(
      { gate: '0s', phases: [{ canary: '1 device', healthGate: ['all-runtimes-healthy'] }, { bulk: 'remainder' }] },
      18,
      'sliced-complete',
    );
    const handle = await real.start(input);
    const result = await handle.result();
    await recordHistory(handle, 'sliced-records-completed');

    expect(result.state).toBe('completed');
    for (const id of ids) expect(marker(fleet, id), id).toBe('2');
    expect(result.counts).toMatchObject({ applied: 18, total: 18, pending: 0, failed: 0 });
    // The canary (one device, inline) is the only device the parent names.
    expect(result.devices).toHaveLength(1);
    const canary = result.devices[0]!.id;
    expect(result.phases.map((p) => [p.name, p.devices, p.stage])).toEqual([
      ['canary 1 device', 1, 'passed'],
      ['bulk remainder', 17, 'passed'],
    ]);
    const slices = result.slices!;
    expect(slices.map((s) => [s.mode, s.devices])).toEqual([
      ['apply', 4],
      ['apply', 4],
      ['apply', 4],
      ['apply', 4],
      ['apply', 1],
    ]);
    // Each slice holds its devices' records (a closed slice answers the query).
    const fromSlices: string[] = [];
    for (const s of slices) {
      const records = await real.env.client.workflow.getHandle(s.workflowId).query(sliceRecordsQuery);
      expect(records.states.every(([, state]) => state === 'applied')).toBe(true);
      expect(records.started).toHaveLength(s.devices);
      fromSlices.push(...records.states.map(([id]) => id));
    }
    expect([...fromSlices, canary].sort()).toEqual([...ids].sort());

    // The CLI finds any device's record, in the status or in its slice.
    const one = await real.cli(['status', input.rolloutId, '--device', fromSlices[5]!]);
    expect(one.code).toBe(0);
    expect(one.stdout).toMatch(new RegExp(`^${fromSlices[5]} applied, phase 1`));
    const none = await real.cli(['status', input.rolloutId, '--device', 'no-such-device']);
    expect(none.code).toBe(2);
    expect(none.stderr).toMatch(/--device: no record of "no-such-device"/);
    const all = await real.cli(['status', input.rolloutId, '--devices', '--json']);
    expect(all.code).toBe(0);
    expect((JSON.parse(all.stdout) as { devices: unknown[] }).devices).toHaveLength(18);
    const summary = await real.cli(['status', input.rolloutId]);
    expect(summary.stdout).toMatch(/18\/18 applied/);
    expect(summary.stdout).toMatch(/5 slice\(s\) hold the sliced phases' device records/);

    // The parent's own history names no device of the sliced phase: not in a snapshot, a slice's input or result, an audit record.
    const history = JSON.stringify(await handle.fetchHistory());
    const decoded = Buffer.from(history).toString();
    for (const id of fromSlices) expect(decodedPayloads(decoded), id).not.toContain(`"${id}"`);
    expect(decodedPayloads(decoded)).toContain(`"${canary}"`);

    // The rollout's trail links each slice's own trail by its head.
    const trail = readAuditFile(real.auditDir, input.rolloutId);
    const links = trail.filter(
      (r) => r.event === 'devices.outcome' && (r.evidence as { trail?: string } | null)?.trail !== undefined,
    );
    expect(links.map((r) => (r.evidence as { trail: string }).trail).sort()).toEqual(
      slices.map((s) => s.workflowId).sort(),
    );
    for (const link of links) {
      const { trail: id, head } = link.evidence as { trail: string; head: { seq: number; hash: string } };
      const own = readAuditFile(real.auditDir, id);
      expect(own.at(-1)).toMatchObject({ seq: head.seq, hash: head.hash });
      const named = own.flatMap((r) => (r.evidence as { devices: Array<{ id: string; state: string }> }).devices);
      expect(named.length).toBe((link.evidence as { devices: number }).devices);
      expect(named.every((d) => d.state === 'applied')).toBe(true);
    }
  }, 180_000);

  it('a failure gate in a sliced phase rolls back every device the slices changed, from the slices’ own records', async () => {
    const { input, fleet, ids } = await slicedInput(
      {
        gate: '0s',
        maxFailureRatio: 0.2,
        minSample: 4,
        rollback: { on: 'failure-gate' },
        phases: [{ bulk: 'remainder' }],
      },
      14,
      'sliced-rollback',
    );
    // Every device's verify fails: the failure gate trips once the sample is reached.
    for (const id of ids) await fleet.setFaults(id, { failCommand: "grep -qx 'wavegate demo revision 2" });
    const handle = await real.start(input);
    const result = await handle.result();
    await recordHistory(handle, 'sliced-records-rolled-back');
    expect(result.state).toBe('rolled-back');
    for (const id of ids) expect(marker(fleet, id), id).not.toBe('2');
    const rollbacks = result.slices!.filter((s) => s.mode === 'rollback');
    expect(rollbacks.length).toBeGreaterThan(0);
    expect(result.counts.applied + result.counts.claimed).toBe(0);
    expect(result.counts['rollback-failed']).toBe(0);
  }, 180_000);
});

describe('sliced records: the health gate reads the sliced phase from its slices', () => {
  const real = realRollouts('sliced-health');

  it('one unhealthy device of a sliced phase fails its health gate, and the rollout puts back every device it changed', async () => {
    const made = await real.rollout(
      {
        gate: '0s',
        rollback: { on: 'healthGate-fail' },
        phases: [{ bulk: 'remainder', healthGate: ['all-runtimes-healthy'] }],
      },
      demoDevices(10),
      { 'pool-a': 0.5, 'pool-b': 0.5 },
    );
    const inventory = loadRolloutInventory(made.inventoryPath);
    const membership = await storeMembership(real.env.client, real.worker.taskQueue, inventory, made.inventoryPath);
    const ids = inventory.devices.map((d) => d.id);
    // Healthy at its apply, unhealthy when the gate asks: the gate runs only over devices the slices changed.
    await made.fleet.setFaults(ids[7]!, { unhealthyRuntimes: ['motd'] });
    const handle = await real.start({
      ...made.input,
      rolloutId: 'rollout:sliced-health',
      membership,
      records: 'slices',
      sliceSize: 4,
    });
    const result = await handle.result();
    expect(result.state).toBe('rolled-back');
    expect(result.phases[0]).toMatchObject({ stage: 'failed', gateOutcome: 'fail' });
    expect(result.phases[0]!.evidence!.join(' ')).toMatch(new RegExp(ids[7]!));
    // Every device was asked (the slices' devices, read from the slices), and every one is back.
    for (const id of ids) expect(made.fleet.count(id, 'sim-runtime-health motd'), id).toBeGreaterThanOrEqual(1);
    for (const id of ids) expect(marker(made.fleet, id), id).not.toBe('2');
    expect(result.counts).toMatchObject({ 'rolled-back': 10, applied: 0 });
  }, 180_000);
});

/** The history as text with every payload's data decoded (payloads are base64 JSON in the history JSON). */
function decodedPayloads(historyJson: string): string {
  return historyJson.replace(/"data":"([A-Za-z0-9+/=]+)"/g, (_, b64: string) => Buffer.from(b64, 'base64').toString());
}
