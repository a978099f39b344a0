import { describe, expect, it } from 'vitest';
import { emptyRelease, isEmptyRelease, mergeRelease, SharedBudget } from '../../../core/rollout/shared-budget';

describe('SharedBudget: one phase budget along a chain of overlapping slices', () => {
  const limits = { a: 2, b: 1 };

  it('the first slice holds the budget; a later one starts nothing until its handoff', () => {
    expect(new SharedBudget(limits, true).room('a')).toBe(true);
    const later = new SharedBudget(limits, false);
    expect(later.holds).toBe(false);
    expect(later.room('a')).toBe(false);
    later.receiveHandoff({ inFlight: {}, tally: { succeeded: 0, failed: 0 } });
    expect(later.room('a')).toBe(true);
  });

  it('slots still in use up the chain count against the limit until they are released', () => {
    const first = new SharedBudget(limits, true);
    first.started('a');
    first.started('a');
    first.started('b');
    expect(first.room('a')).toBe(false);
    const handoff = first.handoff({ succeeded: 3, failed: 1 });
    expect(handoff).toEqual({ inFlight: { a: 2, b: 1 }, tally: { succeeded: 3, failed: 1 } });

    const next = new SharedBudget(limits, false);
    next.receiveHandoff(handoff);
    expect(next.room('a')).toBe(false);
    expect(next.room('b')).toBe(false);
    expect(next.outstanding()).toBe(3);
    next.receiveRelease({ pools: { a: 1 }, tally: { succeeded: 1, failed: 0 } });
    expect(next.room('a')).toBe(true);
    next.started('a');
    expect(next.room('a')).toBe(false); // one inherited + one own: the limit, never doubled
    expect(next.earlierTally()).toEqual({ succeeded: 4, failed: 1 });
    // The slice hands on what it sees in use: its own plus what it still waits to hear freed.
    expect(next.handoff({ succeeded: 0, failed: 0 }).inFlight).toEqual({ a: 2, b: 1 });
  });

  it('a release that overtakes its handoff is counted all the same', () => {
    const next = new SharedBudget(limits, false);
    next.receiveRelease({ pools: { a: 1 }, tally: { succeeded: 1, failed: 0 } });
    expect(next.room('a')).toBe(false); // no handoff yet
    next.receiveHandoff({ inFlight: { a: 2 }, tally: { succeeded: 0, failed: 0 } });
    expect(next.inUse('a')).toBe(1);
    expect(next.outstanding()).toBe(1);
    next.receiveRelease({ pools: { a: 1 }, tally: { succeeded: 0, failed: 1 } });
    expect(next.outstanding()).toBe(0);
    expect(next.earlierTally()).toEqual({ succeeded: 1, failed: 1 });
  });

  it('an unlisted pool gets one slot; releases merge into one message', () => {
    const b = new SharedBudget({}, true);
    expect(b.room('x')).toBe(true);
    b.started('x');
    expect(b.room('x')).toBe(false);
    const pending = emptyRelease();
    expect(isEmptyRelease(pending)).toBe(true);
    mergeRelease(pending, { pools: { a: 1 }, tally: { succeeded: 1, failed: 0 } });
    mergeRelease(pending, { pools: { a: 1, b: 2 }, tally: { succeeded: 0, failed: 1 } });
    expect(pending).toEqual({ pools: { a: 2, b: 2 }, tally: { succeeded: 1, failed: 1 } });
    expect(isEmptyRelease(pending)).toBe(false);
  });
});
