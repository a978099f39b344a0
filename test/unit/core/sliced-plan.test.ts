import { describe, expect, it } from 'vitest';
import type { Plan } from '../../../core/planner';
import type { DeviceSnapshot } from '../../../core/rollout-state';
import { sliceDevicesOf, snapshotIndex } from '../../../core/rollout/sliced-plan';

const device = (id: string, over: Partial<DeviceSnapshot> = {}): DeviceSnapshot =>
  ({
    id,
    host: `h-${id}`,
    port: 22,
    user: 'ops',
    pool: 'p',
    updateClass: 'edge',
    os: 'linux',
    current: null,
    reachable: true,
    ...over,
  }) as DeviceSnapshot;

describe('a slice of a sliced plan', () => {
  const snapshot = Array.from({ length: 10 }, (_, i) => device(`d-${i}`));
  const plan = {
    phases: [{ index: 0, name: 'rest', devices: ['d-9', 'd-3', 'd-5', 'd-0', 'd-7'] }],
  } as unknown as Plan;

  it('is the phase devices from k × size, in plan order, with a probed canary answer over its snapshot record', () => {
    const index = snapshotIndex(snapshot, [device('d-5', { current: 4 })]);
    expect(sliceDevicesOf(plan, index, 0, 0, 2).map((d) => d.id)).toEqual(['d-9', 'd-3']);
    const second = sliceDevicesOf(plan, index, 0, 1, 2);
    expect(second.map((d) => [d.id, d.current])).toEqual([
      ['d-5', 4],
      ['d-0', null],
    ]);
    expect(sliceDevicesOf(plan, index, 0, 2, 2).map((d) => d.id)).toEqual(['d-7']);
  });

  it('the index keeps the first record of an id; a slice past the phase or a phase past the plan is refused', () => {
    const index = snapshotIndex([...snapshot, device('d-3', { host: 'later' })], []);
    expect(index.get('d-3')!.host).toBe('h-d-3');
    expect(() => sliceDevicesOf(plan, index, 0, 3, 2)).toThrow('plan: phase rest has no slice 3');
    expect(() => sliceDevicesOf(plan, index, 1, 0, 2)).toThrow('plan: no phase 1 (the plan has 1)');
  });
});
