import { afterEach, describe, expect, it, vi } from 'vitest';
import type { ControlName } from '../../../core/controls';
import type { Plan } from '../../../core/planner';
import { RolloutModel } from '../../../core/rollout/model';
import { planRollout } from '../../../core/rollout/plan';
import { stagesClosedBy } from '../../../core/rollout/policy';
import type { PhaseStage } from '../../../core/rollout/status';
import type { DeviceSnapshot, DeviceState, RolloutState } from '../../../core/rollout-state';
import { parseRolloutSpec, type RolloutSpec } from '../../../core/spec';

// ---- fixtures: a snapshot built by hand, a plan from the real planner ----

function device(id: string, over: Partial<DeviceSnapshot> = {}): DeviceSnapshot {
  return {
    id,
    host: `${id}.example`,
    port: 22,
    user: 'ops',
    pool: 'web',
    class: 'server',
    ssh: {},
    current: 1,
    reachable: true,
    updateClass: 'required',
    os: 'debian-12',
    ...over,
  };
}

function specOf(
  extra: Record<string, unknown> = {},
  phases: unknown[] = [{ canary: '1 device' }, { bulk: 'remainder' }],
): RolloutSpec {
  return parseRolloutSpec({ rollout: { profile: 'demo', fromRevision: 1, toRevision: 2, phases, ...extra } }, 'test');
}

function setup(
  snapshot: DeviceSnapshot[],
  spec: RolloutSpec = specOf(),
  rolloutId = 'rollout:demo:1',
): { model: RolloutModel; plan: Plan } {
  const model = new RolloutModel({ rolloutId, ...spec });
  model.addSnapshot(snapshot);
  const plan = planRollout({ rolloutId, spec, poolBudgets: { web: 0.5 }, risk: 'risky' }, model.snapshotDevices());
  model.adoptPlan(plan);
  return { model, plan };
}

/** A node-down verdict's text as the planner (and the board) word it: core/node-down.ts verdictStanding. */
const NODE_DOWN = 'node-down since 2026-11-30T08:00:00Z, expires 2026-12-30T08:00:00Z: PSU failed, OPS-12';

/** A fleet with one device of every kind adoptPlan distinguishes. */
function mixedFleet(): DeviceSnapshot[] {
  return [
    device('s1'),
    device('s2'),
    device('s3'),
    device('s4', { class: 'desktop', pool: 'office', os: 'ubuntu-24.04' }),
    device('lb', { updateClass: 'left-behind' }),
    device('nd', { nodeDown: { holds: true, text: NODE_DOWN } }),
    device('at', { current: 2 }),
    device('off', { reachable: false, current: null, error: 'ssh: connect timeout' }),
    device('off2', { reachable: false, current: null }),
  ];
}

/** 1 + 2 + … + 7 = 28 devices in seven phases, enough for one phase per stage. */
function sevenPhases(): { model: RolloutModel; plan: Plan } {
  const phases = [
    { canary: '1 device' },
    ...[2, 3, 4, 5, 6].map((n) => ({ bulk: `${n} devices` })),
    { bulk: 'remainder' },
  ];
  const { model, plan } = setup(
    Array.from({ length: 28 }, (_, i) => device(`d${String(i).padStart(2, '0')}`)),
    specOf({}, phases),
  );
  expect(plan.phases.map((p) => p.devices.length)).toEqual([1, 2, 3, 4, 5, 6, 7]);
  return { model, plan };
}

function phaseOf(plan: Plan, id: string): number {
  return plan.phases.findIndex((p) => p.devices.includes(id));
}

// ---- adoptPlan ----

describe('RolloutModel.adoptPlan', () => {
  it('gives every device in scope a state: not-for-me (left-behind, node-down), at target applied, the rest pending in its phase', () => {
    const { model, plan } = setup(mixedFleet());
    const st = model.status();
    const byId = new Map(st.devices.map((d) => [d.id, d]));

    expect(byId.get('lb')).toEqual({
      id: 'lb',
      state: 'not-for-me',
      phase: -1,
      reason: 'left-behind: the device is excluded from updates (updateClass)',
    });
    // A holding node-down verdict: not-for-me with the verdict's own text, as `plan` and the board say it.
    expect(byId.get('nd')).toEqual({ id: 'nd', state: 'not-for-me', phase: -1, reason: NODE_DOWN });
    expect(byId.get('at')).toEqual({ id: 'at', state: 'applied', phase: -1, reason: 'already at target' });
    for (const id of ['s1', 's2', 's3', 's4']) {
      const phase = phaseOf(plan, id);
      expect(phase).toBeGreaterThanOrEqual(0);
      expect(byId.get(id)).toEqual({ id, state: 'pending', phase });
    }
    // default offline policy is skip
    expect(byId.get('off')).toEqual({
      id: 'off',
      state: 'skipped',
      phase: phaseOf(plan, 'off'),
      reason: 'offline at snapshot: ssh: connect timeout',
    });
    expect(byId.get('off2')).toEqual({
      id: 'off2',
      state: 'skipped',
      phase: phaseOf(plan, 'off2'),
      reason: 'offline at snapshot: unreachable',
    });
    expect(st.devices).toHaveLength(9);

    expect(st.phases).toEqual(
      plan.phases.map((p) => ({
        index: p.index,
        name: p.name,
        devices: p.devices.length,
        gate: p.gate,
        stage: 'pending',
      })),
    );
    expect(st.phases.map((p) => p.name)).toEqual(['canary 1 device', 'bulk remainder']);
    expect(model.plan).toBe(plan);
    expect(model.warnings).toEqual(plan.warnings);
    expect(model.warnings.length).toBeGreaterThan(0); // not-for-me, already applied, unreachable
  });

  it('computes counts from the device states', () => {
    const { model } = setup(mixedFleet());
    // Not-for-me devices are counted apart from the ones skipped as offline.
    expect(model.counts()).toMatchObject({
      total: 9,
      pending: 4,
      skipped: 2,
      'not-for-me': 2,
      'not-started': 0,
      applied: 1,
      failed: 0,
    });
    model.setDevice('s1', 'applying');
    model.setDevice('s2', 'failed', 'exit 1');
    expect(model.counts()).toMatchObject({
      total: 9,
      pending: 2,
      applying: 1,
      failed: 1,
      skipped: 2,
      'not-for-me': 2,
      applied: 1,
    });
    expect(model.status().counts).toEqual(model.counts());
  });

  it.each([
    ['skip', 'skipped'],
    ['fail', 'failed'],
  ] as const)('offline: %s → devices unreachable at snapshot are %s, with the reason', (offline, state) => {
    const { model, plan } = setup(mixedFleet(), specOf({ offline }));
    expect(model.deviceState('off')).toBe(state);
    expect(model.deviceState('off2')).toBe(state);
    const off = model.status().devices.find((d) => d.id === 'off')!;
    expect(off).toEqual({
      id: 'off',
      state,
      phase: phaseOf(plan, 'off'),
      reason: 'offline at snapshot: ssh: connect timeout',
    });
    expect(model.counts()[state]).toBe(2); // only the offline ones: the left-behind and node-down devices are not-for-me
  });

  it('offline: wait → devices unreachable at snapshot stay pending in their phase', () => {
    const { model, plan } = setup(mixedFleet(), specOf({ offline: 'wait' }));
    const off = model.status().devices.find((d) => d.id === 'off')!;
    expect(off).toEqual({ id: 'off', state: 'pending', phase: phaseOf(plan, 'off') });
    expect(model.deviceState('off2')).toBe('pending');
    expect(model.counts()).toMatchObject({ pending: 6, skipped: 0, 'not-for-me': 2, applied: 1, failed: 0 });
  });

  it('pendingIn and failedBeforeStart read a phase', () => {
    const { model, plan } = setup(mixedFleet(), specOf({ offline: 'fail' }));
    const bulk = plan.phases[1]!;
    const offlineInBulk = bulk.devices.filter((id) => id.startsWith('off')).length;
    expect(offlineInBulk).toBe(2);
    expect(model.failedBeforeStart(bulk)).toBe(2);
    const pending = model.pendingIn(bulk);
    expect(pending.map((d) => d.id)).toEqual(bulk.devices.filter((id) => !id.startsWith('off')));
    expect(pending[0]).toBe(model.snapshotDevices().find((d) => d.id === pending[0]!.id)); // the snapshot's object
  });

  it('starts running in the snapshot stage; status names the rollout', () => {
    const spec = specOf();
    const model = new RolloutModel({ rolloutId: 'r-1', ...spec });
    expect(model.status()).toMatchObject({
      rolloutId: 'r-1',
      profile: 'demo',
      fromRevision: 1,
      toRevision: 2,
      state: 'running',
      phase: 'snapshot',
      devices: [],
      phases: [],
      controls: [],
    });
    expect(model.status()).not.toHaveProperty('pausedReason');
    expect(model.status()).not.toHaveProperty('verdict');
    expect(model.status()).not.toHaveProperty('auditHead');
    model.recordVerdict('pass');
    model.recordAuditHead({ seq: 4, hash: 'abc' });
    expect(model.status()).toMatchObject({ verdict: 'pass', auditHead: { seq: 4, hash: 'abc' } });
  });
});

// ---- controls ----

describe('RolloutModel controls', () => {
  const fresh = () => setup(mixedFleet()).model;

  it('pause is allowed while running and pauses with who and why', () => {
    const model = fresh();
    expect(model.refusal('pause')).toBeNull();
    const intent = model.applyControl('pause', { by: 'alice', reason: 'maintenance' });
    expect(intent).toEqual({ event: 'rollout.paused', by: 'alice', reason: 'maintenance' });
    expect(model.state).toBe('paused');
    expect(model.paused).toBe(true);
    expect(model.pausedReason).toBe('paused by alice: maintenance');
    expect(model.status().pausedReason).toBe('paused by alice: maintenance');
  });

  it('pause without by or reason names an unknown sender and a null reason', () => {
    const model = fresh();
    expect(model.applyControl('pause', {})).toEqual({ event: 'rollout.paused', by: undefined, reason: null });
    expect(model.pausedReason).toBe('paused by unknown');
  });

  it('pause while paused is refused', () => {
    const model = fresh();
    model.applyControl('pause', { by: 'a' });
    expect(model.refusal('pause')).toBe('rollout is paused; only a running rollout can be paused');
  });

  it('resume while running is refused; resume while paused runs again and clears the reason', () => {
    const model = fresh();
    expect(model.refusal('resume')).toBe('rollout is running; only a paused rollout can be resumed');
    model.applyControl('pause', { by: 'alice' });
    expect(model.refusal('resume', { by: 'bob' })).toBeNull();
    expect(model.applyControl('resume', { by: 'bob', reason: 'fixed' })).toEqual({
      event: 'rollout.resumed',
      by: 'bob',
      reason: 'fixed',
    });
    expect(model.state).toBe('running');
    expect(model.paused).toBe(false);
    expect(model.pausedReason).toBeUndefined();
    expect(model.status()).not.toHaveProperty('pausedReason');
  });

  it('abort defaults to rollback true, reason "aborted by operator", by unknown', () => {
    const model = fresh();
    expect(model.refusal('abort')).toBeNull();
    expect(model.stopped).toBe(false);
    const intent = model.applyControl('abort', {});
    expect(model.abort).toEqual({ rollback: true, reason: 'aborted by operator', by: 'unknown' });
    expect(intent).toEqual({ event: 'rollout.aborted', by: undefined, reason: null, evidence: { rollback: true } });
    expect(model.stopped).toBe(true);
  });

  it('abort keeps an explicit rollback false, reason and sender', () => {
    const model = fresh();
    const intent = model.applyControl('abort', { by: 'carol', reason: 'wrong build', rollback: false });
    expect(model.abort).toEqual({ rollback: false, reason: 'wrong build', by: 'carol' });
    expect(intent).toEqual({
      event: 'rollout.aborted',
      by: 'carol',
      reason: 'wrong build',
      evidence: { rollback: false },
    });
  });

  it('abort is allowed while paused', () => {
    const model = fresh();
    model.applyControl('pause', { by: 'a' });
    expect(model.refusal('abort')).toBeNull();
  });

  it('approve with nothing waiting is refused', () => {
    const model = fresh();
    expect(model.refusal('approve')).toBe('rollout is running and no phase is waiting for approval');
    expect(model.refusal('approve', { phase: 0 })).toBe('rollout is running and no phase is waiting for approval');
  });

  it('approve of the waiting phase (default, by index or by name) is allowed; of another phase refused', () => {
    const model = fresh();
    model.awaitApproval(1);
    expect(model.awaitingApproval).toEqual({ index: 1, name: 'bulk remainder' });
    expect(model.phase(1).stage).toBe('awaiting-approval');
    expect(model.refusal('approve')).toBeNull();
    expect(model.refusal('approve', { phase: 1 })).toBeNull();
    expect(model.refusal('approve', { phase: 'bulk remainder' })).toBeNull();
    expect(model.refusal('approve', { phase: 0 })).toBe('phase 0 is not the one waiting; phase 1 "bulk remainder" is');
    expect(model.refusal('approve', { phase: 'canary 1 device' })).toBe(
      'phase "canary 1 device" is not the one waiting; phase 1 "bulk remainder" is',
    );
    expect(model.refusal('approve', { phase: '1' })).not.toBeNull(); // a string index is not the index
  });

  it('an accepted approve approves the waiting phase; approvalDone ends the wait', () => {
    const model = fresh();
    model.awaitApproval(1);
    expect(model.isApproved(1)).toBe(false);
    expect(model.applyControl('approve', { by: 'dave', reason: 'looks good' })).toEqual({
      event: 'rollout.approved',
      by: 'dave',
      reason: 'looks good',
      phase: 'bulk remainder',
    });
    expect(model.isApproved(1)).toBe(true);
    expect(model.isApproved(0)).toBe(false);
    model.approvalDone();
    expect(model.awaitingApproval).toBeUndefined();
    expect(model.refusal('approve')).toBe('rollout is running and no phase is waiting for approval');
    expect(model.isApproved(1)).toBe(true); // the approval itself stays
  });

  it('after an abort every control is refused', () => {
    const model = fresh();
    model.awaitApproval(1);
    model.applyControl('abort', { by: 'x' });
    for (const name of ['pause', 'resume', 'abort', 'approve'] as ControlName[]) {
      expect(model.refusal(name)).toBe(`rollout is being aborted; ${name} is no longer possible`);
    }
  });

  it.each(['completed', 'rolled-back', 'aborted', 'cancelled', 'failed'] as RolloutState[])(
    'in the final state %s every control is refused',
    (final) => {
      const model = fresh();
      model.finish(final);
      for (const name of ['pause', 'resume', 'abort', 'approve'] as ControlName[]) {
        expect(model.refusal(name)).toBe(`rollout is ${final}; ${name} is no longer possible`);
      }
    },
  );

  it('controlContext reflects state, approval wait and abort', () => {
    const model = fresh();
    expect(model.controlContext()).toEqual({ state: 'running', awaitingApproval: undefined, aborting: false });
    model.awaitApproval(0);
    model.applyControl('pause', { by: 'a' });
    model.applyControl('abort', { by: 'a' });
    expect(model.controlContext()).toEqual({
      state: 'paused',
      awaitingApproval: { index: 0, name: 'canary 1 device' },
      aborting: true,
    });
  });

  it('recordControl keeps every control, accepted or not, in status().controls', () => {
    const model = fresh();
    model.recordControl('pause', { by: 'alice', reason: 'lunch' }, true, '2026-01-01T00:00:00.000Z');
    model.recordControl(
      'resume',
      {},
      false,
      '2026-01-01T00:01:00.000Z',
      'rollout is running; only a paused rollout can be resumed',
    );
    model.recordControl('cancel', { by: 'temporal-cancel' }, true, '2026-01-01T00:02:00.000Z');
    expect(model.status().controls).toEqual([
      { control: 'pause', by: 'alice', reason: 'lunch', at: '2026-01-01T00:00:00.000Z', accepted: true },
      {
        control: 'resume',
        by: 'unknown',
        at: '2026-01-01T00:01:00.000Z',
        accepted: false,
        note: 'rollout is running; only a paused rollout can be resumed',
      },
      { control: 'cancel', by: 'temporal-cancel', at: '2026-01-01T00:02:00.000Z', accepted: true },
    ]);
    expect(model.status().controls[1]).not.toHaveProperty('reason');
    expect(model.status().controls[0]).not.toHaveProperty('note');
  });

  it('clearWaits drops the pause reason and the approval wait', () => {
    const model = fresh();
    model.awaitApproval(1);
    model.pauseFor('operator', 'why');
    model.clearWaits();
    expect(model.pausedReason).toBeUndefined();
    expect(model.awaitingApproval).toBeUndefined();
  });
});

// ---- touched devices and compensation ----

describe('RolloutModel touched devices and compensation order', () => {
  it('toUndo returns the started devices, last touched first, as snapshot objects', () => {
    const snap = ['a', 'b', 'c', 'd', 'e'].map((id) => device(id));
    const model = new RolloutModel({ rolloutId: 'r', ...specOf() });
    model.addSnapshot(snap);
    expect(model.toUndo()).toEqual([]);
    model.markTouched(['a', 'b']);
    model.forgetUnstarted([snap[0]!, snap[1]!], ['a', 'b']);
    model.markTouched(['c', 'd', 'e']);
    model.forgetUnstarted([snap[2]!, snap[3]!, snap[4]!], ['c', 'e']); // d never started
    const undo = model.toUndo();
    expect(undo.map((d) => d.id)).toEqual(['e', 'c', 'b', 'a']);
    expect(undo[0]).toBe(snap[4]);
    expect(undo.map((d) => d.id)).not.toContain('d');
  });

  it('a batch where nothing started leaves nothing to undo; earlier phases stay', () => {
    const snap = ['a', 'b', 'c'].map((id) => device(id));
    const model = new RolloutModel({ rolloutId: 'r', ...specOf() });
    model.addSnapshot(snap);
    model.markTouched(['a']);
    model.markTouched(['b', 'c']);
    model.forgetUnstarted([snap[1]!, snap[2]!], []);
    expect(model.toUndo().map((d) => d.id)).toEqual(['a']);
  });

  it('forgetUnstarted only forgets devices of the batch', () => {
    const snap = ['a', 'b', 'c'].map((id) => device(id));
    const model = new RolloutModel({ rolloutId: 'r', ...specOf() });
    model.addSnapshot(snap);
    model.markTouched(['a', 'b', 'c']);
    model.forgetUnstarted([snap[2]!], []); // a and b are not in this batch
    expect(model.toUndo().map((d) => d.id)).toEqual(['b', 'a']);
  });

  it('rollbackFailedOf names the devices whose rollback failed, in the given order', () => {
    const { model } = setup(mixedFleet());
    const snap = model.snapshotDevices();
    const pick = (id: string) => snap.find((d) => d.id === id)!;
    model.setDevice('s1', 'rolled-back');
    model.setDevice('s2', 'rollback-failed', 'exit 3');
    model.setDevice('s3', 'rollback-failed');
    expect(model.rollbackFailedOf([pick('s3'), pick('s1'), pick('s2')])).toEqual(['s3', 's2']);
    expect(model.rollbackFailedOf([pick('s1'), pick('s4')])).toEqual([]);
    expect(model.rollbackFailedOf([])).toEqual([]);
  });
});

describe('RolloutModel at 10,000 devices: no per-device linear scan', () => {
  afterEach(() => {
    vi.restoreAllMocks();
  });

  it('forgetUnstarted + toUndo are exact and call no Array find/findIndex/indexOf/lastIndexOf/includes/splice', () => {
    const N = 10_000;
    const snap = Array.from({ length: N }, (_, i) => device(`dev-${i}`));
    const model = new RolloutModel({ rolloutId: 'r', ...specOf() });
    model.addSnapshot(snap);
    model.markTouched(snap.map((d) => d.id));
    const started = snap.filter((_, i) => i % 2 === 0).map((d) => d.id); // half started, half never did

    const methods = ['find', 'findIndex', 'indexOf', 'lastIndexOf', 'includes', 'splice'] as const;
    const spies = methods.map((m) => vi.spyOn(Array.prototype, m));
    let undo: DeviceSnapshot[];
    let calls: number[];
    try {
      const before = spies.map((s) => s.mock.calls.length);
      model.forgetUnstarted(snap, started);
      undo = model.toUndo();
      calls = spies.map((s, i) => s.mock.calls.length - before[i]!);
    } finally {
      for (const s of spies) s.mockRestore();
    }
    expect(Object.fromEntries(methods.map((m, i) => [m, calls[i]]))).toEqual(
      Object.fromEntries(methods.map((m) => [m, 0])),
    );

    expect(undo).toHaveLength(N / 2);
    const expected = snap.filter((_, i) => i % 2 === 0).reverse();
    expect(undo.map((d) => d.id)).toEqual(expected.map((d) => d.id));
    undo.forEach((d, i) => {
      if (d !== expected[i]) throw new Error(`toUndo[${i}] is not the snapshot object of ${expected[i]!.id}`);
    });
  });
});

// ---- phases, pending devices, the rollout's own state ----

describe('RolloutModel skipPending', () => {
  it('makes every pending device not-started with what stopped it, leaving other states alone', () => {
    const { model, plan } = setup(mixedFleet());
    const canary = plan.phases[0]!.devices[0]!;
    model.setDevice(canary, 'applied');
    model.skipPending('not started: aborted by alice');
    const st = new Map(model.status().devices.map((d) => [d.id, d]));
    for (const id of ['s1', 's2', 's3', 's4'].filter((id) => id !== canary)) {
      expect(st.get(id)).toEqual({ id, state: 'not-started', phase: phaseOf(plan, id), reason: 'aborted by alice' });
    }
    expect(st.get(canary)!.state).toBe('applied');
    expect(st.get('lb')!.state).toBe('not-for-me');
    expect(st.get('nd')).toEqual({ id: 'nd', state: 'not-for-me', phase: -1, reason: NODE_DOWN });
    // Skipped as offline stays skipped, offline: apart from the devices the abort never started.
    expect(st.get('off')).toMatchObject({ state: 'skipped', reason: 'offline at snapshot: ssh: connect timeout' });
    expect(model.counts()).toMatchObject({ 'not-started': 3, skipped: 2, 'not-for-me': 2 });
    expect(st.get('at')).toEqual({ id: 'at', state: 'applied', phase: -1, reason: 'already at target' });
    expect(model.counts().pending).toBe(0);
  });

  it('with exceptPhase keeps that phase pending', () => {
    const { model, plan } = sevenPhases();
    model.skipPending('not in the canary phase', 0);
    const canary = plan.phases[0]!.devices[0]!;
    expect(model.deviceState(canary)).toBe('pending');
    for (const p of plan.phases.slice(1))
      for (const id of p.devices)
        expect(model.status().devices.find((d) => d.id === id)).toMatchObject({
          state: 'not-started',
          reason: 'not in the canary phase',
        });
    expect(model.counts()).toMatchObject({ pending: 1, 'not-started': 27, skipped: 0 });
    expect(model.pendingIn(plan.phases[0]!).map((d) => d.id)).toEqual([canary]);
    expect(model.pendingIn(plan.phases[3]!)).toEqual([]);
  });
});

describe('RolloutModel: not-for-me and not-started as the workflow steps read them', () => {
  it('deviceState reads both as skipped (what recorded histories made commands from); the status has the state itself', () => {
    const { model, plan } = setup(mixedFleet());
    model.skipPending('not started: rollout cancelled');
    const bulk = plan.phases[1]!.devices.find((id) => id.startsWith('s'))!;
    for (const id of ['lb', 'nd', bulk]) expect(model.deviceState(id)).toBe('skipped');
    expect(model.status().devices.find((d) => d.id === bulk)).toMatchObject({
      state: 'not-started',
      reason: 'rollout cancelled',
    });
    expect(model.deviceState('at')).toBe('applied');
  });

  it("an apply that says not-for-me in a skipped device's reason (ahead at apply) makes it not-for-me", () => {
    const { model } = setup(mixedFleet());
    model.setDevice('s3', 'skipped', 'not-for-me: ahead: the device is at revision 3, above r2');
    expect(model.status().devices.find((d) => d.id === 's3')).toMatchObject({
      state: 'not-for-me',
      reason: 'ahead: the device is at revision 3, above r2',
    });
    model.setDevice('s4', 'skipped', 'offline at apply: s4: cannot connect');
    expect(model.status().devices.find((d) => d.id === 's4')).toMatchObject({
      state: 'skipped',
      reason: 'offline at apply: s4: cannot connect',
    });
  });
});

describe('RolloutModel setDevice', () => {
  it('keeps the device phase and drops an old reason unless a new one is given', () => {
    const { model, plan } = setup(mixedFleet());
    const phase = phaseOf(plan, 's2');
    model.setDevice('s2', 'failed', 'exit 1');
    expect(model.status().devices.find((d) => d.id === 's2')).toEqual({
      id: 's2',
      state: 'failed',
      phase,
      reason: 'exit 1',
    });
    model.setDevice('s2', 'rolled-back');
    expect(model.status().devices.find((d) => d.id === 's2')).toEqual({ id: 's2', state: 'rolled-back', phase });
    expect(model.deviceState('nope')).toBeUndefined();
  });
});

describe('RolloutModel closePhases', () => {
  const STAGES: PhaseStage[] = ['pending', 'applying', 'gate', 'awaiting-approval', 'passed', 'failed', 'inconclusive'];

  function staged(): RolloutModel {
    const { model } = sevenPhases();
    STAGES.forEach((s, i) => {
      model.setStage(i, s);
    });
    return model;
  }
  const stages = (m: RolloutModel) => m.status().phases.map((p) => p.stage);

  it('the abort set closes pending, gate and awaiting-approval, not applying or ended phases', () => {
    const model = staged();
    model.closePhases(stagesClosedBy('abort'));
    expect(stages(model)).toEqual(['stopped', 'applying', 'stopped', 'stopped', 'passed', 'failed', 'inconclusive']);
  });

  it('the cancel set also closes applying', () => {
    const model = staged();
    model.closePhases(stagesClosedBy('cancel'));
    expect(stages(model)).toEqual(['stopped', 'stopped', 'stopped', 'stopped', 'passed', 'failed', 'inconclusive']);
  });

  it("'all-after-first' closes every phase but the first, whatever its stage", () => {
    const model = staged();
    model.setStage(0, 'applying');
    model.closePhases('all-after-first');
    expect(stages(model)).toEqual(['applying', 'stopped', 'stopped', 'stopped', 'stopped', 'stopped', 'stopped']);
  });
});

describe('RolloutModel phases and the rollout state', () => {
  it('enterPhase names the phase and sets its stage (applying by default); recordGate keeps the outcome', () => {
    const { model, plan } = sevenPhases();
    model.enterPhase(2);
    expect(model.phaseName).toBe(plan.phases[2]!.name);
    expect(model.status().phase).toBe(plan.phases[2]!.name);
    expect(model.phase(2).stage).toBe('applying');
    model.enterPhase(3, 'gate');
    expect(model.phase(3).stage).toBe('gate');
    model.recordGate(3, 'fail', ['error-rate: fail — 0.2'], 'failed');
    expect(model.phase(3)).toMatchObject({
      gateOutcome: 'fail',
      evidence: ['error-rate: fail — 0.2'],
      stage: 'failed',
    });
  });

  it('awaitApproval / isApproved / approvalDone', () => {
    const { model } = sevenPhases();
    model.awaitApproval(4);
    expect(model.phase(4).stage).toBe('awaiting-approval');
    expect(model.awaitingApproval).toEqual({ index: 4, name: model.phase(4).name });
    expect(model.isApproved(4)).toBe(false);
    model.applyControl('approve', { by: 'ops' });
    expect(model.isApproved(4)).toBe(true);
    expect(model.awaitingApproval).toEqual({ index: 4, name: model.phase(4).name });
    model.approvalDone();
    expect(model.awaitingApproval).toBeUndefined();
    expect(model.isApproved(4)).toBe(true);
  });

  it('pauseFor pauses with the reason; finish sets the final state, phase done, and clears the reason', () => {
    const { model } = sevenPhases();
    model.enterPhase(1);
    model.pauseFor('failure-policy', 'failure-gate: 2 of 2 failed — resume to continue, or abort');
    expect(model.state).toBe('paused');
    expect(model.status()).toMatchObject({
      state: 'paused',
      pausedReason: 'failure-gate: 2 of 2 failed — resume to continue, or abort',
    });
    model.enterRollback();
    expect(model.phaseName).toBe('rollback');
    model.finish('rolled-back');
    expect(model.state).toBe('rolled-back');
    expect(model.phaseName).toBe('done');
    expect(model.pausedReason).toBeUndefined();
    expect(model.status()).toMatchObject({ state: 'rolled-back', phase: 'done' });
    expect(model.status()).not.toHaveProperty('pausedReason');
  });
});

describe('RolloutModel.healthTargets', () => {
  it('is the applied or claimed devices that are not best-effort, in snapshot order', () => {
    // Snapshot order is deliberately not id order.
    const snap = [
      device('z-applied'),
      device('b-best-effort', { updateClass: 'best-effort' }),
      device('m-claimed'),
      device('a-failed'),
      device('y-pending'),
      device('c-applied'),
      device('x-rolled-back'),
      device('k-skipped'),
    ];
    const { model } = setup(snap, specOf({}, [{ canary: '1 device' }, { bulk: 'remainder' }]));
    const set: Array<[string, DeviceState]> = [
      ['z-applied', 'applied'],
      ['b-best-effort', 'applied'],
      ['m-claimed', 'claimed'],
      ['a-failed', 'failed'],
      ['c-applied', 'applied'],
      ['x-rolled-back', 'rolled-back'],
      ['k-skipped', 'skipped'],
    ];
    for (const [id, state] of set) model.setDevice(id, state);
    expect(model.deviceState('y-pending')).toBe('pending');
    const targets = model.healthTargets();
    expect(targets.map((d) => d.id)).toEqual(['z-applied', 'm-claimed', 'c-applied']);
    expect(targets[0]).toBe(snap[0]);
  });

  it('is empty before anything applied', () => {
    const { model } = setup(['p', 'q', 'r'].map((id) => device(id)));
    expect(model.healthTargets()).toEqual([]);
  });
});

describe('RolloutModel: an id read twice across snapshot pages', () => {
  it('keeps the first entry for every later step, and the planner sees both (so it warns)', () => {
    const spec = specOf({}, [{ bulk: 'remainder' }]);
    const model = new RolloutModel({ rolloutId: 'rollout:demo:dup', ...spec });
    model.addSnapshot([device('a'), device('b')]);
    model.addSnapshot([device('a', { reachable: false, host: 'other.example' }), device('c')]);
    const plan = planRollout(
      { rolloutId: 'rollout:demo:dup', spec, poolBudgets: {}, risk: 'risky' },
      model.snapshotDevices(),
    );
    model.adoptPlan(plan);
    expect(plan.warnings.join('\n')).toMatch(/\ba\b.*twice/);
    expect(model.deviceState('a')).toBe('pending');
    const pending = model.pendingIn(plan.phases[0]!);
    expect(pending.find((d) => d.id === 'a')!.host).toBe('a.example');
    model.markTouched(['a']);
    expect(model.toUndo().map((d) => d.host)).toEqual(['a.example']);
  });
});

describe('RolloutModel: a device that refused us at snapshot', () => {
  const refused = () => [
    device('s1'),
    device('s2'),
    device('hk', { reachable: false, current: null, refusal: 'host-key', error: 'hk: host key changed' }),
  ];
  it('fails with the kind named, whatever the offline policy, and counts as failed before its phase starts', () => {
    for (const offline of ['skip', 'wait', 'fail'] as const) {
      const { model, plan } = setup(refused(), specOf({ offline }, [{ bulk: 'remainder' }]));
      expect(model.status().devices.find((d) => d.id === 'hk')).toMatchObject({
        state: 'failed',
        reason: 'refused at snapshot (host-key): hk: host key changed',
      });
      expect(model.failedBeforeStart(plan.phases[0]!)).toBe(1);
      expect(model.pendingIn(plan.phases[0]!).map((d) => d.id)).not.toContain('hk');
    }
  });
});

describe('RolloutModel: held by the audit trail', () => {
  it('holds new starts like a pause, shows as paused with the reason, and only an override (with a reason) is the way on', () => {
    const { model } = setup([device('s1'), device('s2')]);
    expect(model.refusal('override-audit', { reason: 'x' })).toBe(
      'the audit trail is whole; there is nothing to override',
    );
    model.holdForAudit('record 4 (phase.applied) not written: line 3 is not a record');
    expect(model.paused).toBe(true);
    expect(model.status()).toMatchObject({
      state: 'paused',
      pausedReason: 'audit trail not whole: record 4 (phase.applied) not written: line 3 is not a record',
    });
    expect(model.refusal('resume')).toMatch(/only a paused rollout can be resumed/);
    expect(model.refusal('override-audit', {})).toMatch(/needs a reason/);
    expect(model.refusal('override-audit', { reason: 'disk replaced' })).toBeNull();
    model.applyControl('abort', { by: 'ops' });
    expect(model.refusal('override-audit', { reason: 'let the rollback through' })).toBeNull(); // also while aborting
    model.holdForAudit(undefined);
    expect(model.paused).toBe(false);
  });
});

describe('RolloutModel: changedDevices', () => {
  it("counts the devices this rollout started changing, not a batch's devices still waiting to start", () => {
    const { model, plan } = setup([device('s1'), device('s2'), device('s3')], specOf({}, [{ bulk: 'remainder' }]));
    const batch = model.pendingIn(plan.phases[0]!);
    model.markTouched(batch.map((d) => d.id));
    expect(model.status().changedDevices).toBe(0);
    model.setDevice(batch[0]!.id, 'applying');
    model.setDevice(batch[1]!.id, 'applied');
    expect(model.status().changedDevices).toBe(2);
  });
});

describe('RolloutModel owns its writes', () => {
  it('pause reasons are kept per cause: the status shows the latest, one resume clears them all', () => {
    const { model } = sevenPhases();
    model.pauseFor('inconclusive-gate', 'health gate inconclusive after canary: error-rate: timed out');
    model.pauseFor('deadline', 'progressDeadline of 1h passed');
    expect(model.pauseCauses()).toEqual(['inconclusive-gate', 'deadline']);
    expect(model.status().pausedReason).toBe('progressDeadline of 1h passed');
    // The same cause again replaces its reason and becomes the latest.
    model.pauseFor('inconclusive-gate', 'health gate inconclusive after canary: still timed out');
    expect(model.pauseCauses()).toEqual(['deadline', 'inconclusive-gate']);
    expect(model.pausedReason).toBe('health gate inconclusive after canary: still timed out');
    model.applyControl('resume', { by: 'bob' });
    expect(model.pauseCauses()).toEqual([]);
    expect(model.state).toBe('running');
    expect(model.status()).not.toHaveProperty('pausedReason');
  });

  it('finish clears every pause cause', () => {
    const { model } = sevenPhases();
    model.applyControl('pause', { by: 'alice' });
    model.pauseFor('failure-policy', 'failure-gate: 2 of 2 failed');
    model.finish('aborted');
    expect(model.pauseCauses()).toEqual([]);
    expect(model.status()).not.toHaveProperty('pausedReason');
  });

  it('marks itself changed with every write, once per publish', () => {
    const { model } = sevenPhases();
    model.takeChanged();
    expect(model.takeChanged()).toBe(false);
    model.enterPhase(0);
    model.setDevice(model.plan!.phases[0]!.devices[0]!, 'applying');
    expect(model.takeChanged()).toBe(true);
    expect(model.takeChanged()).toBe(false);
    for (const write of [
      () => model.warn('a warning'),
      () => model.recordAuditHead({ seq: 1, hash: 'h' }),
      () => model.holdForAudit('record 2 not written'),
      () => model.recordVerdict('pass'),
      () => model.fail(),
    ]) {
      write();
      expect(model.takeChanged()).toBe(true);
    }
  });

  it('a deadline rollback is an abort request by wavegate that names its deadline; an unexpected error keeps the phase it failed in', () => {
    const { model } = sevenPhases();
    model.enterPhase(2);
    model.requestDeadlineRollback('phaseDeadline', 'phaseDeadline of 10m passed');
    expect(model.stopped).toBe(true);
    expect(model.abort).toEqual({
      rollback: true,
      reason: 'phaseDeadline of 10m passed',
      by: 'wavegate',
      deadline: 'phaseDeadline',
    });
    expect(model.refusal('abort')).toMatch(/abort/);
    model.fail();
    expect(model.status()).toMatchObject({ state: 'failed', phase: model.phase(2).name });
  });
});
