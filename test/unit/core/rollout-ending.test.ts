import { describe, expect, it } from 'vitest';
import {
  ENDING_ORDER,
  type Ending,
  type EndingCause,
  endingOf,
  endingParts,
  stopCause,
} from '../../../core/rollout/ending';
import { stagesClosedBy } from '../../../core/rollout/policy';

/** Every cause a rollout can end by, one of each. */
const causes: Record<EndingCause['kind'], EndingCause> = {
  completed: { kind: 'completed' },
  abort: { kind: 'abort', abort: { rollback: true, reason: 'wrong revision', by: 'alice' } },
  'deadline-rollback': {
    kind: 'deadline-rollback',
    deadline: 'progressDeadline',
    reason: 'progressDeadline of 1h passed',
  },
  'failure-rollback': {
    kind: 'failure-rollback',
    trigger: 'failure-gate',
    evidence: '3 of 4 devices failed in bulk',
    phaseName: 'bulk',
  },
  cancel: { kind: 'cancel' },
  'watch-revert': { kind: 'watch-revert', reason: 'watch check 2 of 10 at +6m failed: error-rate < 0.01: fail' },
  'canary-verdict': { kind: 'canary-verdict', verdict: 'fail', keep: false },
  'canary-nothing-to-test': { kind: 'canary-nothing-to-test' },
  error: { kind: 'error', message: 'activity failed' },
};

describe('endingOf: one decision per cause', () => {
  // What each stopping cause closes, whom it names not started, what it puts back (and by whom), how it ends.
  // biome-ignore format: a table, one row per cause
  const stopping: Array<[string, EndingCause, Partial<Ending>]> = [
    ['an abort with rollback: compensated by who aborted, ends aborted', causes.abort, { closes: stagesClosedBy('abort'), skips: { reason: 'not started: aborted by alice' }, compensation: { trigger: 'abort: wrong revision', by: 'alice' }, state: 'aborted', event: 'rollout.ended', reason: 'wrong revision', failed: false }],
    ['a deadline rollback: compensated by wavegate, ends rolled-back', causes['deadline-rollback'], { closes: stagesClosedBy('abort'), skips: { reason: 'not started: progressDeadline passed (rolled back)' }, compensation: { trigger: 'progressDeadline of 1h passed', by: 'wavegate' }, state: 'rolled-back', event: 'rollout.failed', reason: 'progressDeadline of 1h passed' }],
    ['a failure-gate rollback: compensated by wavegate, ends rolled-back', causes['failure-rollback'], { closes: stagesClosedBy('abort'), skips: { reason: 'not started: rolled back after failure-gate' }, compensation: { trigger: 'failure-gate: 3 of 4 devices failed in bulk', by: 'wavegate' }, state: 'rolled-back', event: 'rollout.failed', reason: 'failure gate: 3 of 4 devices failed in bulk' }],
    ['a failed health gate rollback: the reason names the phase', { kind: 'failure-rollback', trigger: 'healthGate-fail', evidence: 'error-rate 0.2 >= 0.01', phaseName: 'canary' }, { skips: { reason: 'not started: rolled back after healthGate-fail' }, compensation: { trigger: 'healthGate-fail: error-rate 0.2 >= 0.01', by: 'wavegate' }, reason: 'health gate failed after canary' }],
    ['a failed watch under onFail revert: compensated by wavegate, ends rolled-back naming the check', causes['watch-revert'], { compensation: { trigger: 'watch failed: watch check 2 of 10 at +6m failed: error-rate < 0.01: fail', by: 'wavegate' }, state: 'rolled-back', event: 'rollout.failed', reason: 'watch failed: watch check 2 of 10 at +6m failed: error-rate < 0.01: fail' }],
    ['a cancel: also closes the applying phase, temporal-cancel in its last record', causes.cancel, { closes: stagesClosedBy('cancel'), skips: { reason: 'not started: rollout cancelled' }, compensation: { trigger: 'cancelled', by: 'temporal-cancel' }, state: 'cancelled', event: 'rollout.cancelled', by: 'temporal-cancel' }],
  ];
  it.each(stopping)('%s', (_name, cause, expected) => {
    expect(endingOf(cause)).toMatchObject(expected);
  });

  it('an abort without rollback (an operator, or a deadline under onDeadline: abort) compensates nothing', () => {
    const ending = endingOf({
      kind: 'abort',
      abort: { rollback: false, reason: 'progressDeadline passed', by: 'wavegate' },
    });
    expect(ending.compensation).toBeNull();
    expect(ending.skips).toEqual({ reason: 'not started: aborted by wavegate' });
    expect(endingParts(ending, true)).toEqual(['close', 'skip', 'finish']);
  });

  it('a canary verdict puts the canary back unless kept; nothing to test touches nothing', () => {
    expect(endingOf(causes['canary-verdict'])).toMatchObject({
      compensation: { trigger: 'canary verdict fail: put the canary back' },
      state: 'completed',
      reason: 'canary verdict: fail',
    });
    expect(endingOf({ kind: 'canary-verdict', verdict: 'pass', keep: true }).compensation).toBeNull();
    expect(endingOf(causes['canary-nothing-to-test'])).toMatchObject({
      closes: null,
      skips: null,
      compensation: null,
      state: 'completed',
      reason: 'canary: nothing to test',
    });
  });

  it('an unexpected error compensates nothing and fails where it was', () => {
    expect(endingOf(causes.error)).toMatchObject({
      closes: null,
      skips: null,
      compensation: null,
      state: 'failed',
      event: 'rollout.failed',
      reason: 'activity failed',
      failed: true,
    });
  });

  it('a deadline rollback request on the model is a deadline rollback; any other abort request is an abort', () => {
    expect(
      stopCause({ rollback: true, reason: 'phaseDeadline passed', by: 'wavegate', deadline: 'phaseDeadline' }),
    ).toEqual({ kind: 'deadline-rollback', deadline: 'phaseDeadline', reason: 'phaseDeadline passed' });
    const abort = { rollback: true, reason: 'x', by: 'bob' };
    expect(stopCause(abort)).toEqual({ kind: 'abort', abort });
  });
});

describe('endingParts: one order for every cause', () => {
  it('every cause takes its parts in the one order: close, skip, compensate, finish', () => {
    for (const cause of Object.values(causes)) {
      const parts = endingParts(endingOf(cause), true);
      expect(parts.at(-1)).toBe('finish');
      expect(parts).toEqual(ENDING_ORDER.filter((s) => parts.includes(s)));
    }
  });

  it('an abort with rollback and a deadline rollback take the same parts in the same order', () => {
    const abort = endingParts(endingOf(causes.abort), true);
    expect(abort).toEqual(['close', 'skip', 'compensate', 'finish']);
    expect(endingParts(endingOf(causes['deadline-rollback']), true)).toEqual(abort);
    expect(endingParts(endingOf(causes['failure-rollback']), true)).toEqual(abort);
    expect(endingParts(endingOf(causes.cancel), true)).toEqual(abort);
  });

  it("executions recorded before the one ending replay their cause's own order", () => {
    expect(endingParts(endingOf(causes.abort), false)).toEqual(['close', 'skip', 'compensate', 'finish']);
    expect(endingParts(endingOf(causes['deadline-rollback']), false)).toEqual([
      'close',
      'compensate',
      'skip',
      'finish',
    ]);
    // The failure policy never closed the later phases.
    expect(endingParts(endingOf(causes['failure-rollback']), false)).toEqual(['compensate', 'skip', 'finish']);
    expect(endingParts(endingOf(causes.cancel), false)).toEqual(['close', 'skip', 'compensate', 'finish']);
    expect(endingParts(endingOf(causes['canary-verdict']), false)).toEqual(['compensate', 'finish']);
    for (const kind of ['completed', 'canary-nothing-to-test', 'error'] as const)
      expect(endingParts(endingOf(causes[kind]), false)).toEqual(['finish']);
  });
});
