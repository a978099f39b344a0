import { WorkflowFailedError, WorkflowUpdateFailedError } from '@temporalio/client';
import { describe, expect, it } from 'vitest';
import { renderFrame } from '../../cli/watch';
import { summarizeCounts } from '../../core/rollout-state';
import {
  abortUpdate,
  approveUpdate,
  overrideAuditUpdate,
  pauseUpdate,
  resumeSignal,
  resumeUpdate,
  type RolloutStatus,
} from '../../contracts/rollout';
import { recordHistory } from '../support/histories';
import { mockDevices, type Scenario } from '../support/mock-activities';
import { waitForStatus } from '../support/rollout-helpers';
import { mockedRolloutWorker } from '../support/mocked-worker';

/**
 * The rollout workflow's decision paths with mocked activities (no SSH, no files): fast, and beside the
 * real-SSH tests in rollout-controls, never instead of them. Every control path is here: pause, resume,
 * abort with and without rollback, approve, cancel, an inconclusive gate, the failure gate.
 */
/** A phase that applied and passed its gates, as the trail tells it. */
const PHASE_PASSED = ['phase.started', 'phase.applied', 'gate.passed'];
/** A two-phase rollout that completed (the floor raised with each apply, recorded at the end). */
const TWO_PHASES_COMPLETED = [
  'rollout.started',
  ...PHASE_PASSED,
  ...PHASE_PASSED,
  'floor.confirmed',
  'rollout.completed',
];

describe('rollout decisions with mocked activities on a real Temporal server', () => {
  const worker = mockedRolloutWorker('decisions', { defaults: { gate: '100ms' } });
  const { mocks } = worker;
  const start = worker.start.bind(worker);
  /** The phase-level story of the trail (per-device records filtered out). */
  const events = (s: Scenario) => s.audit.map((r) => r.event).filter((e) => !e.startsWith('devices.'));
  const deviceRecords = (s: Scenario, mode?: string) =>
    s.audit
      .filter((r) => r.event === 'devices.outcome' && (!mode || (r.evidence as { mode: string }).mode === mode))
      .flatMap((r) => (r.evidence as { devices: Array<{ id: string; state: string; reason?: string }> }).devices);
  const stateOf = (st: RolloutStatus, id: string) => st.devices.find((d) => d.id === id)?.state;
  const phases2 = [{ canary: '1 device' }, { bulk: 'remainder' }];

  it('happy path: every phase applies, passes its gate, and the rollout completes', async () => {
    const { s, h } = await start({ phases: phases2 }, { devices: mockDevices(4) });
    const result = await h.result();
    expect(result.state).toBe('completed');
    expect(result.counts.applied).toBe(4);
    expect(s.log.filter((l) => l.startsWith('apply:'))).toHaveLength(4);
    expect(events(s)).toEqual(TWO_PHASES_COMPLETED);
    expect(s.audit.map((r) => r.seq)).toEqual(s.audit.map((_, i) => i + 1));
    // Every device's own outcome is in the trail, not only the phases'.
    expect(
      deviceRecords(s, 'apply')
        .map((d) => d.state)
        .sort(),
    ).toEqual(['applied', 'applied', 'applied', 'applied']);
    expect(new Set(deviceRecords(s, 'apply').map((d) => d.id))).toEqual(new Set(result.devices.map((d) => d.id)));
    // Every device it changed raised its floor to the target with its own apply (no downgrade after); the completion records it.
    expect(s.floors!.map((f) => f.revision)).toEqual([2, 2, 2, 2]);
    expect(s.audit.find((r) => r.event === 'floor.confirmed')!.evidence).toMatchObject({
      revision: 2,
      from: 1,
      confirmed: 4,
      failed: [],
    });
  });

  it('failure gate with rollback.on failure-gate: the started devices are put back last-first, the rest not-started', async () => {
    const devices = mockDevices(6);
    const { s, h } = await start(
      {
        phases: [{ canary: '1 device' }, { bulk: 'remainder' }],
        rollback: { on: 'failure-gate' },
        maxFailureRatio: 0.2,
        minSample: 1,
      },
      { devices, failApplyAfter: 1 }, // the canary applies; the first bulk device fails
      { poolBudgets: { default: 0.1 } }, // one device in flight: start order is the log's order
    );
    const result = await h.result();
    expect(result.state).toBe('rolled-back');
    expect(events(s)).toContain('gate.failed');
    const applied = s.log.filter((l) => l.startsWith('apply:')).map((l) => l.slice(6));
    const rolledBack = s.log.filter((l) => l.startsWith('rollback:')).map((l) => l.slice(9));
    // The gate trips at the first bulk failure, so nothing starts after it; every device that started
    // is undone, in reverse start order: the canary (first) goes back last.
    expect(applied).toHaveLength(2);
    expect(rolledBack).toEqual([...applied].reverse());
    expect(result.counts['not-started']).toBe(4);
    expect(result.counts.skipped).toBe(0);
    expect(rolledBack.at(-1)).toBe(result.devices.find((d) => d.phase === 0)!.id);
    expect(result.phases[1]!.stage).toBe('failed');
    // The one ending (core/rollout/ending.ts): the devices never started are named, then the rollback runs, then the end.
    const trail = s.audit.map((r) => r.event);
    expect(trail.slice(trail.indexOf('gate.failed'))).toEqual([
      'gate.failed',
      'devices.skipped',
      'rollback.started',
      'devices.outcome',
      'rollback.completed',
      'rollout.failed',
    ]);
  });

  it('failure gate with rollback.on healthGate-fail: pauses for an operator; resume continues to the end', async () => {
    const devices = mockDevices(4);
    const { s, h } = await start(
      { phases: [{ canary: '1 device' }, { bulk: 'remainder' }], maxFailureRatio: 0.1, minSample: 1 },
      { devices, failApply: new Set([devices[3]!.id]) },
    );
    const paused = await waitForStatus(h, (st) => st.state === 'paused');
    expect(paused.pausedReason).toMatch(/^failure-gate: 1 of \d devices failed/);
    expect(s.log.some((l) => l.startsWith('rollback:'))).toBe(false);
    await h.executeUpdate(resumeUpdate, { args: [{ by: 'alice' }] });
    const result = await h.result();
    expect(result.state).toBe('completed');
    expect(stateOf(result, devices[3]!.id)).toBe('failed');
    expect(events(s)).toEqual(
      expect.arrayContaining(['gate.failed', 'rollout.paused', 'rollout.resumed', 'rollout.completed']),
    );
  });

  it('health gate fail: only the devices changed so far are rolled back, later phases never start', async () => {
    const { s, h } = await start(
      { phases: [{ canary: '1 device', healthGate: ['all-runtimes-healthy'] }, { bulk: 'remainder' }] },
      { devices: mockDevices(4), health: ['fail'] },
    );
    const result = await h.result();
    expect(result.state).toBe('rolled-back');
    expect(s.log.filter((l) => l.startsWith('apply:'))).toHaveLength(1);
    expect(s.log.filter((l) => l.startsWith('rollback:'))).toHaveLength(1);
    expect(result.counts['not-started']).toBe(3);
    expect(result.phases[0]!.gateOutcome).toBe('fail');
  });

  it('inconclusive health gate: pauses, never advances by itself; after resume health is checked again at once', async () => {
    const { s, h } = await start(
      { phases: [{ canary: '1 device', healthGate: ['all-runtimes-healthy'] }, { bulk: 'remainder' }] },
      { devices: mockDevices(3), health: ['inconclusive', 'pass'] },
    );
    const paused = await waitForStatus(h, (st) => st.state === 'paused');
    expect(paused.phases[0]!.stage).toBe('inconclusive');
    expect(paused.pausedReason).toMatch(/health gate inconclusive/);
    expect(s.log).toHaveLength(1); // the bulk phase did not start
    await h.executeUpdate(resumeUpdate, { args: [{ by: 'bob' }] });
    const result = await h.result();
    expect(result.state).toBe('completed');
    expect(s.healthCalls).toBe(2);
    expect(result.phases[0]!.stage).toBe('passed');
  });

  it('onInconclusive fail: an inconclusive gate is a failed gate and rolls back', async () => {
    const { s, h } = await start(
      {
        onInconclusive: 'fail',
        phases: [{ canary: '1 device', healthGate: ['all-runtimes-healthy'] }, { bulk: 'remainder' }],
      },
      { devices: mockDevices(3), health: ['inconclusive'] },
    );
    const result = await h.result();
    expect(result.state).toBe('rolled-back');
    expect(events(s)).toContain('gate.inconclusive');
    expect(s.log).toContain(`rollback:${result.devices.find((d) => d.phase === 0)!.id}`);
  });

  it('pause mid-phase holds new starts (in-flight devices finish); resume carries on', async () => {
    const devices = mockDevices(4);
    const { s, input, h } = await start(
      { phases: [{ bulk: 'remainder' }] },
      { devices, holdApply: new Set(devices.map((d) => d.id)) },
      { poolBudgets: { default: 0.25 } },
    );
    const applying = await waitForStatus(h, (st) => st.counts.applying === 1);
    const first = applying.devices.find((d) => d.state === 'applying')!.id;
    const paused = await h.executeUpdate(pauseUpdate, { args: [{ by: 'carol', reason: 'look first' }] });
    expect(paused.state).toBe('paused');
    mocks.release(input.rolloutId, first);
    const held = await waitForStatus(h, (st) => st.counts.applied === 1);
    await new Promise((r) => setTimeout(r, 500));
    expect((await h.query<RolloutStatus>('status')).counts.applying).toBe(0); // nothing new started while paused
    expect(held.state).toBe('paused');
    for (const d of devices) mocks.release(input.rolloutId, d.id);
    await h.executeUpdate(resumeUpdate, { args: [{ by: 'carol' }] });
    const result = await h.result();
    expect(result.state).toBe('completed');
    expect(result.counts.applied).toBe(4);
    expect(s.log.indexOf(`apply:${first}`)).toBe(0);
  });

  it('a refused signal changes nothing and is recorded as refused; a refused update is rejected', async () => {
    const { h } = await start(
      { phases: [{ canary: '1 device', gate: 'manual' }, { bulk: 'remainder' }] },
      { devices: mockDevices(3) },
    );
    await waitForStatus(h, (st) => st.phases[0]?.stage === 'awaiting-approval');
    await h.signal(resumeSignal, { by: 'web-ui' });
    const st = await waitForStatus(h, (x) => x.controls.length > 0);
    expect(st.controls[0]).toMatchObject({ control: 'resume', by: 'web-ui', accepted: false });
    expect(st.state).toBe('running');
    await expect(h.executeUpdate(approveUpdate, { args: [{ by: 'dave', phase: 1 }] })).rejects.toBeInstanceOf(
      WorkflowUpdateFailedError,
    );
    await h.executeUpdate(abortUpdate, { args: [{ by: 'dave', rollback: false }] });
    expect((await h.result()).state).toBe('aborted');
  });

  it('approve: a manual gate waits for the operator, then the health gate runs and the rollout goes on', async () => {
    const { s, h } = await start(
      { phases: [{ canary: '1 device', gate: 'manual' }, { bulk: 'remainder' }] },
      { devices: mockDevices(3) },
    );
    const waiting = await waitForStatus(h, (st) => st.phases[0]?.stage === 'awaiting-approval');
    expect(waiting.counts.applied).toBe(1);
    await new Promise((r) => setTimeout(r, 300));
    expect(s.log).toHaveLength(1); // still waiting: no timer stands in for a person
    const approved = await h.executeUpdate(approveUpdate, { args: [{ by: 'erin', phase: 0 }] });
    expect(approved.controls.at(-1)).toMatchObject({ control: 'approve', by: 'erin', accepted: true });
    const result = await h.result();
    expect(result.state).toBe('completed');
    expect(events(s)).toContain('rollout.approved');
  });

  it('abort with rollback: the changed devices go back, the rest are not-started, the rollout ends aborted', async () => {
    const { s, h } = await start(
      { phases: [{ canary: '1 device', gate: 'manual' }, { bulk: 'remainder' }] },
      { devices: mockDevices(3) },
    );
    const waiting = await waitForStatus(h, (st) => st.phases[0]?.stage === 'awaiting-approval');
    const canary = waiting.devices.find((d) => d.phase === 0)!.id;
    await h.executeUpdate(abortUpdate, { args: [{ by: 'frank', reason: 'wrong window' }] });
    const result = await h.result();
    expect(result.state).toBe('aborted');
    expect(s.log).toEqual([`apply:${canary}`, `rollback:${canary}`]);
    expect(stateOf(result, canary)).toBe('rolled-back');
    expect(result.counts['not-started']).toBe(2);
    expect(result.phases.map((p) => p.stage)).toEqual(['stopped', 'stopped']);
    expect(events(s)).toEqual(
      expect.arrayContaining(['rollout.aborted', 'rollback.started', 'rollback.completed', 'rollout.ended']),
    );
    // The operator's abort is audited once; the end of the rollout is a record of its own.
    expect(events(s).filter((e) => e === 'rollout.aborted')).toHaveLength(1);
  });

  it('abort mid-phase: the devices it never started are not-started (one skipped as offline stays skipped), a node-down device is not-for-me: in the status query, the Web UI details, watch and the audit', async () => {
    // A holding verdict's text, as core/node-down.ts words it and the planner passes it on.
    const NODE_DOWN = 'node-down since 2026-11-30T08:00:00Z, expires 2026-12-30T08:00:00Z: PSU failed, OPS-12';
    // dev-05 is under the verdict; dev-06 is unreachable, alone in its pool so its apply starts at once and answers offline.
    const devices = mockDevices(6, (i) =>
      i === 4
        ? { nodeDown: { holds: true, text: NODE_DOWN } }
        : i === 5
          ? { pool: 'remote', reachable: false, error: 'connect refused' }
          : {},
    );
    const [down, offline] = [devices[4]!.id, devices[5]!.id];
    const held = devices.slice(0, 4).map((d) => d.id);
    const { s, input, h } = await start(
      { phases: [{ bulk: 'remainder' }] },
      { devices, holdApply: new Set(held) },
      { poolBudgets: { default: 0.25, remote: 1 } },
    );
    const mid = await waitForStatus(h, (st) => st.counts.applying === 1 && stateOf(st, offline) === 'skipped');
    const first = mid.devices.find((d) => d.state === 'applying')!.id;
    await h.executeUpdate(abortUpdate, { args: [{ by: 'henry', reason: 'wrong revision', rollback: false }] });
    mocks.release(input.rolloutId, first);
    expect((await h.result()).state).toBe('aborted');

    const status = await h.query<RolloutStatus>('status');
    const unstarted = held.filter((id) => id !== first);
    expect(stateOf(status, first)).toBe('applied');
    for (const id of unstarted)
      expect(status.devices.find((d) => d.id === id)).toEqual({
        id,
        state: 'not-started',
        phase: 0,
        reason: 'aborted by henry',
      });
    expect(status.devices.find((d) => d.id === offline)).toMatchObject({
      state: 'skipped',
      reason: 'offline at apply: connect refused',
    });
    expect(status.devices.find((d) => d.id === down)).toEqual({
      id: down,
      state: 'not-for-me',
      phase: -1,
      reason: NODE_DOWN,
    });
    expect(status.counts).toMatchObject({ total: 6, applied: 1, 'not-started': 3, skipped: 1, 'not-for-me': 1 });
    expect(summarizeCounts(status.counts)).toBe('1/6 applied, 1 skipped, 3 not started, 1 not-for-me');
    expect(s.log).not.toContain(`apply:${down}`);

    // The Web UI's details table (workflows/progress.ts), as the server serves it, and the watch frame.
    const details = (await h.query<{ currentDetails: string }>('__temporal_workflow_metadata')).currentDetails;
    expect(details).toContain(`| ${down} | not-for-me | ${NODE_DOWN} |`);
    for (const id of unstarted) expect(details).toContain(`| ${id} | not-started | aborted by henry |`);
    expect(details).toContain('1/6 applied, 1 skipped, 3 not started, 1 not-for-me');
    expect(renderFrame(status, { maxDevices: 10 }).find((l) => l.includes(down))).toMatch(
      new RegExp(`${down}\\s+-\\s+not-for-me\\s+node-down since`),
    );

    // The audit: the plan's record names the node-down device not-for-me with the verdict; the devices the
    // abort never started are one devices.skipped record, counted as not-started, apart from the offline one.
    expect(deviceRecords(s, 'plan')).toContainEqual({ id: down, state: 'not-for-me', reason: NODE_DOWN });
    expect(deviceRecords(s, 'apply')).toContainEqual({
      id: offline,
      state: 'skipped',
      reason: 'offline at apply: connect refused',
    });
    const skipped = s.audit.filter((r) => r.event === 'devices.skipped');
    expect(skipped.map((r) => r.reason)).toEqual(['not started: aborted by henry']);
    expect([...(skipped[0]!.evidence as { devices: string[] }).devices].sort()).toEqual([...unstarted].sort());
    expect(skipped[0]!.counts).toMatchObject({ 'not-started': 3, skipped: 1, 'not-for-me': 1, pending: 0 });
  });

  it('a device refused before any command ran (no pins, below the floor) is never rolled back or reported rollback-failed', async () => {
    const devices = mockDevices(4);
    const refused = devices[3]!.id;
    const { s, h } = await start(
      { phases: [{ bulk: 'remainder', gate: 'manual' }], maxFailureRatio: 0.5 },
      { devices, refuseApply: new Set([refused]) },
    );
    await waitForStatus(h, (st) => st.phases[0]?.stage === 'awaiting-approval');
    await h.executeUpdate(abortUpdate, { args: [{ by: 'kim', reason: 'changed my mind' }] });
    const result = await h.result();
    expect(result.state).toBe('aborted');
    expect(stateOf(result, refused)).toBe('failed');
    expect(result.devices.find((d) => d.id === refused)!.reason).toMatch(/NO_TRUST/);
    expect(s.log).not.toContain(`rollback:${refused}`);
    expect(s.log.filter((l) => l.startsWith('rollback:'))).toHaveLength(3); // the three it did change
  });

  it('abort without rollback: nothing is put back; the changed devices stay applied', async () => {
    const { s, h } = await start(
      { phases: [{ canary: '1 device', gate: 'manual' }, { bulk: 'remainder' }] },
      { devices: mockDevices(3) },
    );
    await waitForStatus(h, (st) => st.phases[0]?.stage === 'awaiting-approval');
    await h.executeUpdate(abortUpdate, { args: [{ by: 'grace', rollback: false }] });
    const result = await h.result();
    expect(result.state).toBe('aborted');
    expect(s.log.some((l) => l.startsWith('rollback:'))).toBe(false);
    expect(result.counts.applied).toBe(1);
    expect(events(s)).not.toContain('rollback.started');
  });

  it('cancel: every changed device is put back before the workflow closes as cancelled', async () => {
    const { s, h } = await start(
      { phases: [{ canary: '1 device', gate: 'manual' }, { bulk: 'remainder' }] },
      { devices: mockDevices(3) },
    );
    const waiting = await waitForStatus(h, (st) => st.phases[0]?.stage === 'awaiting-approval');
    const canary = waiting.devices.find((d) => d.phase === 0)!.id;
    await h.cancel();
    await expect(h.result()).rejects.toBeInstanceOf(WorkflowFailedError);
    expect(s.log).toEqual([`apply:${canary}`, `rollback:${canary}`]);
    expect(events(s).slice(-3)).toEqual(['rollback.started', 'rollback.completed', 'rollout.cancelled']);
    expect(s.audit.at(-1)!.by).toBe('temporal-cancel');
    expect(deviceRecords(s, 'rollback')).toEqual([{ id: canary, state: 'rolled-back' }]);
    const skipped = s.audit.filter((r) => r.event === 'devices.skipped');
    expect(skipped.map((r) => r.reason)).toEqual(['not started: rollout cancelled']);
    expect((skipped[0]!.evidence as { devices: string[] }).devices).toHaveLength(2);
  });

  it('canary mode: a cancel while the canary applies puts the canary back', async () => {
    const devices = mockDevices(3);
    const { s, h } = await start(
      { phases: [{ canary: '1 device' }, { bulk: 'remainder' }] },
      { devices, holdApply: new Set(devices.map((d) => d.id)) },
      { canary: { keep: true } },
    );
    const applying = await waitForStatus(h, (st) => st.counts.applying === 1);
    const canary = applying.devices.find((d) => d.state === 'applying')!.id;
    await h.cancel(); // the held apply is never released: the cancel reaches it through its heartbeat
    await expect(h.result()).rejects.toBeInstanceOf(WorkflowFailedError);
    expect(s.log).not.toContain(`apply:${canary}`);
    expect(s.log).toContain(`rollback:${canary}`);
    expect(events(s)).toEqual(expect.arrayContaining(['rollback.started', 'rollback.completed', 'rollout.cancelled']));
    expect(s.audit.find((r) => r.event === 'rollback.started')!.evidence).toEqual({ devices: 1 });
    await recordHistory(h, 'canary-cancel-mid-apply');
  });

  it('an audit record that cannot be written holds the rollout (no device starts, no end) until the trail is whole again', async () => {
    // Record 4 is the canary's phase.applied (after rollout.started, phase.started, devices.outcome).
    const { s, h } = await start({ phases: phases2 }, { devices: mockDevices(4), auditFailFrom: 4 });
    const held = await waitForStatus(h, (st) => st.pausedReason?.startsWith('audit trail not whole') ?? false);
    expect(held.state).toBe('paused');
    expect(held.pausedReason).toMatch(/record 4 \(phase.applied\) not written: .*not a JSON audit record/);
    await new Promise((r) => setTimeout(r, 1_500));
    expect(s.log).toHaveLength(1); // the canary only: nothing moves on unaudited
    expect((await h.query<RolloutStatus>('status')).state).toBe('paused');
    // A resume cannot carry the rollout past the trail: only the trail being whole (or an override) can.
    await expect(h.executeUpdate(resumeUpdate, { args: [{ by: 'ivan' }] })).rejects.toBeInstanceOf(
      WorkflowUpdateFailedError,
    );
    s.auditRepaired = true; // the operator repaired the file; the workflow asks the sink again
    const result = await h.result();
    expect(result.state).toBe('completed');
    expect(s.audit.map((r) => r.seq)).toEqual(s.audit.map((_, i) => i + 1)); // no gap: record 4 was written after all
    expect(events(s)).toEqual(TWO_PHASES_COMPLETED);
  });

  it('override-audit: refused without a reason; when held, it writes an audit.override from the last good record and the rollout goes on', async () => {
    const { s, h } = await start({ phases: phases2 }, { devices: mockDevices(3), auditFailFrom: 4 });
    await waitForStatus(h, (st) => st.pausedReason?.startsWith('audit trail not whole') ?? false);
    await expect(h.executeUpdate(overrideAuditUpdate, { args: [{ by: 'judy', reason: '' }] })).rejects.toBeInstanceOf(
      WorkflowUpdateFailedError,
    );
    const after = await h.executeUpdate(overrideAuditUpdate, {
      args: [{ by: 'judy', reason: 'disk replaced; old segment kept for forensics' }],
    });
    expect(after.controls.at(-1)).toMatchObject({ control: 'override-audit', by: 'judy', accepted: true });
    const result = await h.result();
    expect(result.state).toBe('completed');
    const override = s.audit.find((r) => r.event === 'audit.override')!;
    expect(override).toMatchObject({
      seq: 4,
      by: 'judy',
      reason: 'disk replaced; old segment kept for forensics',
      lastGood: { seq: 3 },
    });
    // The record that could not be written follows the override, and the chain goes on from there.
    expect(s.audit[s.audit.indexOf(override) + 1]).toMatchObject({ seq: 5, event: 'phase.applied' });
  });

  it('canary mode: the verdict is the gate outcome and the canary goes back unless kept', async () => {
    const { s, h } = await start(
      { phases: [{ canary: '1 device', healthGate: ['all-runtimes-healthy'] }, { bulk: 'remainder' }] },
      { devices: mockDevices(3), health: ['pass'] },
      { canary: { keep: false } },
    );
    const result = await h.result();
    expect(result.verdict).toBe('pass');
    expect(result.state).toBe('completed');
    expect(s.log.map((l) => l.split(':')[0])).toEqual(['apply', 'rollback']);
    expect(result.phases[1]!.stage).toBe('stopped');
  });
});
