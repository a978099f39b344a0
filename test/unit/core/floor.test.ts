import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  DEVICE_WAY_BACK_MS,
  floorRefusal,
  formatFloor,
  MAX_WAY_BACK_MS,
  parseFloor,
  raisedFloor,
  stepDownFloor,
  wayBackOf,
  type DeviceFloor,
} from '../../../core/floor';

const floor: DeviceFloor = { revision: 3, from: 2, revertUntil: 10_000, rollout: 'rollout:demo' };

describe('device floor: no downgrade below what a completed rollout confirmed', () => {
  it('allows the floor revision and anything above it', () => {
    expect(floorRefusal(floor, 3, 0)).toBeNull();
    expect(floorRefusal(floor, 4, 99_999)).toBeNull();
    expect(floorRefusal(null, 1, 0)).toBeNull();
  });
  it('refuses an older revision (a downgrade sent as an apply), naming the floor and the way forward', () => {
    expect(floorRefusal(floor, 1, 0)).toMatch(
      /^r1 is below the device's floor r3, confirmed by rollout:demo: roll forward instead/,
    );
  });
  it("allows going back to the rollout's from revision only inside its revert window", () => {
    expect(floorRefusal(floor, 2, 9_999)).toBeNull();
    expect(floorRefusal(floor, 2, 10_000)).toMatch(/revert window closed at 1970-01-01T00:00:10.000Z/);
    expect(floorRefusal({ ...floor, revertUntil: 0 }, 2, 0)).toMatch(/confirmed with no revert window/);
  });
  it('round-trips through its file, and an unreadable file is no floor', () => {
    expect(parseFloor(formatFloor(floor))).toEqual(floor);
    expect(parseFloor('garbage')).toBeNull();
    expect(formatFloor({ ...floor, rollout: "x'; rm -rf /" })).toContain('rollout=x___rm_-rf_/');
  });
});

describe('a floor goes down at most one step, once, within the way back the device counts (issue 42)', () => {
  const DAY = 86_400_000;
  const at = Date.parse('2026-12-01T00:00:00Z');
  const raised: DeviceFloor = raisedFloor(
    { rollout: 'rollout:motd:4', run: 'run-4', raise: { from: 3, windowMs: DAY } },
    4,
    at,
    wayBackOf(undefined),
  );
  const compensation = { kind: 'compensation', rollout: 'rollout:motd:4', run: 'run-4' } as const;
  const revert = { kind: 'revert', rollout: 'rollout:motd:4', run: 'run-4', closedAt: at + 60_000 } as const;

  it('the way back is the signed wayBack, else the device maximum (a week); never more than 90 days', () => {
    expect(wayBackOf(undefined)).toBe(DEVICE_WAY_BACK_MS);
    expect(wayBackOf({})).toBe(DEVICE_WAY_BACK_MS);
    expect(wayBackOf({ wayBack: 3_600_000 })).toBe(3_600_000);
    expect(wayBackOf({ wayBack: 0 })).toBe(0);
    expect(wayBackOf({ wayBack: 10 * MAX_WAY_BACK_MS })).toBe(MAX_WAY_BACK_MS);
    expect(raised).toMatchObject({ revision: 4, from: 3, at, wayBack: DEVICE_WAY_BACK_MS, window: DAY });
  });

  it('compensation and revert go back to `from` only while the way back is open, counted from the confirmation', () => {
    expect(floorRefusal(raised, 3, at + 1_000, compensation)).toBeNull();
    expect(floorRefusal(raised, 3, at + DEVICE_WAY_BACK_MS - 1, compensation)).toBeNull();
    expect(floorRefusal(raised, 3, at + DEVICE_WAY_BACK_MS, compensation)).toMatch(
      /its way back closed at 2026-12-08T00:00:00.000Z, 7d after this device confirmed it/,
    );
    expect(floorRefusal(raised, 3, at + 2 * 60_000, revert)).toBeNull();
    // A revert whose closedAt says the rollout closed late cannot stretch the device's own bound.
    expect(
      floorRefusal({ ...raised, window: 30 * DAY }, 3, at + 8 * DAY, { ...revert, closedAt: at + 7 * DAY }),
    ).toMatch(/its way back closed/);
    // A revision that signs no way back has none, not even for its own compensation.
    expect(floorRefusal({ ...raised, wayBack: 0 }, 3, at + 1, compensation)).toMatch(/signs no way back/);
    // A run-tagged floor without the time of its confirmation cannot be counted from: refused.
    const { at: _at, ...untimed } = raised;
    expect(floorRefusal(untimed, 3, at + 1, compensation)).toMatch(/records no time of confirmation/);
  });

  it('the floor after going down has no way further back, whatever a request names', () => {
    const down = stepDownFloor(raised.rollout, raised.run!, 3, at + 1_000);
    expect(down).toMatchObject({ revision: 3, from: 3, wayBack: 0, window: 0 });
    expect(parseFloor(formatFloor(down))).toEqual(down);
    for (const below of [compensation, revert, { ...compensation, rollout: 'rollout:motd:3', run: 'run-3' }])
      for (const r of [1, 2]) expect(floorRefusal(down, r, at + 2_000, below), `r${r}`).not.toBeNull();
    expect(floorRefusal(down, 3, at + 2_000, compensation)).toBeNull();
  });

  it("a device driven by any sequence of forged requests never goes below the first floor's from, and its floor goes down at most once", () => {
    const names = ['rollout:a', 'rollout:b'];
    const runs = ['run-a', 'run-b'];
    const request = fc.record({
      revision: fc.integer({ min: 1, max: 6 }),
      kind: fc.constantFrom('compensation' as const, 'revert' as const, 'none' as const),
      rollout: fc.constantFrom(...names),
      run: fc.constantFrom(...runs),
      closedAt: fc.integer({ min: 0, max: 2 * DEVICE_WAY_BACK_MS }),
      after: fc.integer({ min: 0, max: DAY }),
    });
    fc.assert(
      fc.property(fc.array(request, { maxLength: 12 }), (requests) => {
        // The device: r5, its floor raised by rollout:a run-a from r4 (which itself replaced r3, r2, ...).
        let revision = 5;
        let floor: DeviceFloor = raisedFloor(
          { rollout: 'rollout:a', run: 'run-a', raise: { from: 4, windowMs: DAY } },
          5,
          0,
          DEVICE_WAY_BACK_MS,
        );
        let now = 1;
        let downs = 0;
        for (const q of requests) {
          now += q.after;
          const below =
            q.kind === 'none'
              ? undefined
              : q.kind === 'compensation'
                ? { kind: q.kind, rollout: q.rollout, run: q.run }
                : { kind: q.kind, rollout: q.rollout, run: q.run, closedAt: q.closedAt };
          if (floorRefusal(floor, q.revision, now, below) !== null) continue;
          const wasBelow = q.revision < floor.revision;
          if (wasBelow) downs++;
          revision = q.revision;
          // What the device writes: going below steps the floor down for good; at or above, a forged
          // request asks no raise (a raise would only lift the floor).
          if (wasBelow) floor = stepDownFloor(q.rollout, q.run, q.revision, now);
        }
        expect(revision).toBeGreaterThanOrEqual(4);
        expect(downs).toBeLessThanOrEqual(1);
      }),
      { numRuns: 2_000 },
    );
  });
});
