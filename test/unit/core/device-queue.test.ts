import { describe, expect, it } from 'vitest';
import type { DeviceOutcome } from '../../../core/rollout/device-outcome';
import { SharedBudget } from '../../../core/rollout/shared-budget';
import type { DeviceSnapshot } from '../../../core/rollout-state';
import { DeviceQueue } from '../../../workflows/device-queue';

const device = (id: string, pool: string): DeviceSnapshot =>
  ({ id, pool, current: 1, reachable: true, updateClass: 'required', os: 'linux' }) as DeviceSnapshot;
const ended = (more: Partial<DeviceOutcome>): DeviceOutcome => ({
  state: 'applied',
  touched: true,
  readsGate: true,
  ...more,
});

describe('DeviceQueue: the bookkeeping of one device run', () => {
  it('starts the first pending device whose pool has a slot, each pool within its own limit', () => {
    const q = new DeviceQueue([device('a1', 'a'), device('a2', 'a'), device('b1', 'b')], { a: 1, b: 1 });
    const first = q.takeNext();
    q.begin(first);
    expect(first.id).toBe('a1');
    expect(q.room(device('a2', 'a'))).toBe(false);
    expect(q.takeNext().id).toBe('b1');
    q.settle(first, ended({ counted: 'succeeded' }));
    expect(q.canStartOne()).toBe(true);
    expect(q.takeNext().id).toBe('a2');
    expect(q.hasPending()).toBe(false);
  });

  it('with several pools, the next device is always the earliest pending one whose pool has a slot', () => {
    const ids = ['a1', 'b1', 'a2', 'c1', 'b2', 'a3', 'c2'];
    const all = ids.map((id) => device(id, id[0]!));
    const q = new DeviceQueue(all, { a: 1, b: 1, c: 1 });
    const take = () => {
      const d = q.takeNext();
      q.begin(d);
      return d;
    };
    const a1 = take();
    const b1 = take();
    const c1 = take();
    expect([a1.id, b1.id, c1.id]).toEqual(['a1', 'b1', 'c1']);
    expect(q.canStartOne()).toBe(false);
    q.settle(c1, ended({}));
    q.settle(b1, ended({}));
    // b2 comes before c2 in the run, whichever slot freed first.
    expect(take().id).toBe('b2');
    expect(take().id).toBe('c2');
    expect(q.canStartOne()).toBe(false);
    expect(() => q.takeNext()).toThrow('takeNext: no pending device has a free slot');
    q.settle(a1, ended({}));
    expect(take().id).toBe('a2');
    expect(q.hasPending()).toBe(true);
    expect(q.drained()).toBe(false);
  });

  it('a pool with no limit of its own gets one slot', () => {
    const q = new DeviceQueue([device('x1', 'x'), device('x2', 'x')], {});
    q.begin(q.takeNext());
    expect(q.canStartOne()).toBe(false);
  });

  it("under a shared budget, room is the budget's", () => {
    const budget = new SharedBudget({ a: 2 }, false);
    const q = new DeviceQueue([device('a1', 'a')], { a: 2 }, budget);
    expect(q.canStartOne()).toBe(false);
  });

  it('forgets an untouched device from started, counts what the outcome counts', () => {
    const [a, b, c] = [device('a', 'p'), device('b', 'p'), device('c', 'p')];
    const q = new DeviceQueue([a, b, c], { p: 3 });
    for (let i = 0; i < 3; i++) q.begin(q.takeNext());
    q.settle(a, ended({ counted: 'succeeded' }));
    q.settle(b, ended({ state: 'skipped', touched: false }));
    q.settle(c, ended({ state: 'failed', counted: 'failed', touched: false }));
    expect(q.started()).toEqual(['a']);
    expect(q.tally).toEqual({ succeeded: 1, failed: 1 });
  });

  it('a device that waited and started again is in started once, where it started last', () => {
    const [a, b] = [device('a', 'p'), device('b', 'p')];
    const q = new DeviceQueue([a, b], { p: 2 });
    q.begin(q.takeNext());
    q.begin(q.takeNext());
    q.settle(a, ended({ state: 'waiting', touched: false, readsGate: false, retryAfterMs: 15_000 }));
    q.begin(a);
    expect(q.started()).toEqual(['b', 'a']);
  });

  it('is drained only once nothing is pending and no device waits to start again', () => {
    const a = device('a', 'p');
    const q = new DeviceQueue([a], { p: 1 });
    q.begin(q.takeNext());
    q.settle(a, ended({ state: 'waiting', touched: false, readsGate: false, retryAfterMs: 15_000 }));
    q.waitBegins();
    expect(q.drained()).toBe(false);
    q.waitEnds();
    expect(q.drained()).toBe(true);
  });
});
