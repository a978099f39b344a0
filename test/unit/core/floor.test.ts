import { describe, expect, it } from 'vitest';
import { floorRefusal, formatFloor, parseFloor, type DeviceFloor } from '../../../core/floor';

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
