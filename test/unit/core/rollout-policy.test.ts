import { describe, expect, it } from 'vitest';
import {
  abortOutcome,
  canaryApplyVerdict,
  canaryStage,
  cancelOutcome,
  failurePauseReason,
  failureResponse,
  healthGateDecision,
  NOTHING_TO_TEST,
  phaseFailureGate,
  rolledBackSkipReason,
  stagesClosedBy,
  type FailureTrigger,
} from '../../../core/rollout/policy';
import { PHASE_STAGES } from '../../../core/rollout/status';
import type { RolloutSpec } from '../../../core/spec';

type RollbackOn = RolloutSpec['rollback']['on'];

describe('failureResponse: rollback.on × trigger', () => {
  const table: Array<[FailureTrigger, RollbackOn, 'rollback' | 'pause']> = [
    ['healthGate-fail', 'healthGate-fail', 'rollback'],
    ['healthGate-fail', 'failure-gate', 'pause'],
    ['healthGate-fail', 'both', 'rollback'],
    ['healthGate-fail', 'never', 'pause'],
    ['failure-gate', 'healthGate-fail', 'pause'],
    ['failure-gate', 'failure-gate', 'rollback'],
    ['failure-gate', 'both', 'rollback'],
    ['failure-gate', 'never', 'pause'],
  ];
  it.each(table)('trigger %s with rollback.on %s → %s', (trigger, on, expected) => {
    expect(failureResponse(trigger, on)).toBe(expected);
  });
});

describe('phaseFailureGate', () => {
  const policy = { maxFailureRatio: 0.25, minSample: 3 };

  it('is tripped when the batch already tripped it, even with no offline failures', () => {
    const v = phaseFailureGate('bulk 5 devices', { tally: { succeeded: 3, failed: 2 }, tripped: true }, 0, policy);
    expect(v.tripped).toBe(true);
    expect(v.tally).toEqual({ succeeded: 3, failed: 2 });
  });

  it('is not tripped with no offline failures when the batch did not trip it (the batch is not re-judged)', () => {
    // 1 of 2 failed is above 0.25, but without offline failures only the batch's own verdict counts.
    const v = phaseFailureGate('bulk', { tally: { succeeded: 1, failed: 1 }, tripped: false }, 0, policy);
    expect(v.tripped).toBe(false);
    expect(v.tally).toEqual({ succeeded: 1, failed: 1 });
  });

  it('adds offline failures to the tally and trips when the whole phase is above the ratio', () => {
    const v = phaseFailureGate('bulk', { tally: { succeeded: 8, failed: 1 }, tripped: false }, 2, policy);
    expect(v.tally).toEqual({ succeeded: 8, failed: 3 });
    expect(v.tripped).toBe(true); // 3/11 ≈ 0.27 > 0.25
  });

  it('judges a complete phase: offline failures trip it even below minSample', () => {
    const v = phaseFailureGate('canary 1 device', { tally: { succeeded: 0, failed: 0 }, tripped: false }, 1, policy);
    expect(v.tally).toEqual({ succeeded: 0, failed: 1 });
    expect(v.tripped).toBe(true);
  });

  it('adds offline failures but does not trip when at or below the ratio', () => {
    const below = phaseFailureGate('bulk', { tally: { succeeded: 9, failed: 0 }, tripped: false }, 1, policy);
    expect(below.tally).toEqual({ succeeded: 9, failed: 1 });
    expect(below.tripped).toBe(false); // 0.1 ≤ 0.25
    const equal = phaseFailureGate('bulk', { tally: { succeeded: 3, failed: 0 }, tripped: false }, 1, policy);
    expect(equal.tripped).toBe(false); // exactly 0.25 is not above
  });

  it('names the counts, the phase and the ratio in its evidence', () => {
    const v = phaseFailureGate('bulk 25%', { tally: { succeeded: 8, failed: 1 }, tripped: false }, 2, policy);
    expect(v.evidence).toBe('3 of 11 devices failed in bulk 25% (max ratio 0.25)');
  });

  it('does not mutate the batch tally', () => {
    const batch = { tally: { succeeded: 4, failed: 1 }, tripped: false };
    phaseFailureGate('bulk', batch, 3, policy);
    expect(batch.tally).toEqual({ succeeded: 4, failed: 1 });
  });
});

describe('healthGateDecision', () => {
  it('pass → advance, passed, gate.passed (whatever onInconclusive)', () => {
    for (const on of ['pause', 'fail'] as const)
      expect(healthGateDecision('pass', on)).toEqual({ next: 'advance', stage: 'passed', event: 'gate.passed' });
  });
  it('fail → fail, failed, gate.failed (whatever onInconclusive)', () => {
    for (const on of ['pause', 'fail'] as const)
      expect(healthGateDecision('fail', on)).toEqual({ next: 'fail', stage: 'failed', event: 'gate.failed' });
  });
  it("inconclusive with onInconclusive 'pause' → hold, inconclusive, gate.inconclusive", () => {
    expect(healthGateDecision('inconclusive', 'pause')).toEqual({
      next: 'hold',
      stage: 'inconclusive',
      event: 'gate.inconclusive',
    });
  });
  it("inconclusive with onInconclusive 'fail' → fail, failed, gate.inconclusive", () => {
    expect(healthGateDecision('inconclusive', 'fail')).toEqual({
      next: 'fail',
      stage: 'failed',
      event: 'gate.inconclusive',
    });
  });
});

describe('canaryApplyVerdict and canaryStage', () => {
  it('fails with evidence when any canary device failed', () => {
    expect(canaryApplyVerdict({ succeeded: 1, failed: 1 })).toEqual({
      verdict: 'fail',
      evidence: ['1 of 2 canary devices failed to apply'],
    });
    expect(canaryApplyVerdict({ succeeded: 0, failed: 3 })).toEqual({
      verdict: 'fail',
      evidence: ['3 of 3 canary devices failed to apply'],
    });
  });
  it('fails an empty canary (nothing succeeded, nothing to measure)', () => {
    expect(canaryApplyVerdict({ succeeded: 0, failed: 0 })).toEqual({
      verdict: 'fail',
      evidence: ['0 of 0 canary devices failed to apply'],
    });
  });
  it('is null when every canary device applied: the gate decides', () => {
    expect(canaryApplyVerdict({ succeeded: 1, failed: 0 })).toBeNull();
    expect(canaryApplyVerdict({ succeeded: 2, failed: 0 })).toBeNull();
  });
  it.each([
    ['pass', 'passed'],
    ['fail', 'failed'],
    ['inconclusive', 'inconclusive'],
  ] as const)('canaryStage(%s) → %s', (verdict, stage) => {
    expect(canaryStage(verdict)).toBe(stage);
  });
  it('NOTHING_TO_TEST is the nothing-to-test verdict', () => {
    expect(NOTHING_TO_TEST).toBe('nothing-to-test');
  });
});

describe('stagesClosedBy', () => {
  it('abort closes the waiting stages but not applying', () => {
    expect([...stagesClosedBy('abort')].sort()).toEqual(['awaiting-approval', 'gate', 'pending']);
    expect(stagesClosedBy('abort').has('applying')).toBe(false);
  });
  it('cancel also closes applying', () => {
    expect([...stagesClosedBy('cancel')].sort()).toEqual(['applying', 'awaiting-approval', 'gate', 'pending']);
  });
  it('neither closes a phase that already ended (passed, failed, inconclusive, stopped)', () => {
    for (const stop of ['abort', 'cancel'] as const) {
      for (const done of ['passed', 'failed', 'inconclusive', 'stopped'] as const)
        expect(stagesClosedBy(stop).has(done)).toBe(false);
    }
  });
  it('only names real phase stages', () => {
    for (const stop of ['abort', 'cancel'] as const)
      for (const s of stagesClosedBy(stop)) expect(PHASE_STAGES).toContain(s);
  });
});

describe('abort, cancel and failure texts', () => {
  it('abortOutcome with rollback compensates', () => {
    expect(abortOutcome({ rollback: true, reason: 'bad build', by: 'alice' })).toEqual({
      compensate: true,
      trigger: 'abort: bad build',
      skipReason: 'not started: aborted by alice',
      event: 'rollout.ended',
    });
  });
  it('abortOutcome without rollback does not compensate', () => {
    expect(abortOutcome({ rollback: false, reason: 'stop here', by: 'web-ui' })).toEqual({
      compensate: false,
      trigger: 'abort: stop here',
      skipReason: 'not started: aborted by web-ui',
      event: 'rollout.ended',
    });
  });
  it('cancelOutcome always compensates, by temporal-cancel', () => {
    expect(cancelOutcome()).toEqual({
      compensate: true,
      trigger: 'cancelled',
      skipReason: 'not started: rollout cancelled',
      by: 'temporal-cancel',
      event: 'rollout.cancelled',
    });
  });
  it('failurePauseReason names the trigger and the evidence', () => {
    expect(failurePauseReason('failure-gate', '3 of 11 devices failed in bulk (max ratio 0.25)')).toBe(
      'failure-gate: 3 of 11 devices failed in bulk (max ratio 0.25) — resume to continue, or abort',
    );
    expect(failurePauseReason('healthGate-fail', 'error-rate 0.2')).toBe(
      'healthGate-fail: error-rate 0.2 — resume to continue, or abort',
    );
  });
  it('rolledBackSkipReason names the trigger', () => {
    expect(rolledBackSkipReason('failure-gate')).toBe('not started: rolled back after failure-gate');
    expect(rolledBackSkipReason('healthGate-fail')).toBe('not started: rolled back after healthGate-fail');
  });
});
