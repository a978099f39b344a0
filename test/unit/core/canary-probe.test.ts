import { describe, expect, it } from 'vitest';
import { RolloutModel } from '../../../core/rollout/model';
import { canaryToProbe, planRollout } from '../../../core/rollout/plan';
import type { DeviceSnapshot } from '../../../core/rollout-state';
import { parseRolloutSpec } from '../../../core/spec';
import { peakOverlap } from '../../../sim/fleet';

const device = (id: string, extra: Partial<DeviceSnapshot> = {}): DeviceSnapshot => ({
  id,
  host: '127.0.0.1',
  port: 1,
  user: 'u',
  pool: 'p',
  class: 'edge',
  ssh: {},
  current: null,
  reachable: true,
  updateClass: 'required',
  os: 'linux',
  ...extra,
});
const input = (phases: unknown[]) => ({
  rolloutId: 'rollout:probe',
  spec: parseRolloutSpec({ rollout: { profile: 'demo', fromRevision: 1, toRevision: 2, phases } }, 'test'),
  poolBudgets: { p: 0.5 },
  risk: 'risky' as const,
});

describe('canary probe after a membership-only snapshot', () => {
  it('names the canary devices not yet probed; none without a canary phase', () => {
    const devices = Array.from({ length: 10 }, (_, i) => device(`d${i}`));
    const plan = planRollout(input([{ canary: '2 devices' }, { bulk: 'remainder' }]), devices);
    expect(canaryToProbe(plan, new Set())).toEqual(plan.phases[0]!.devices);
    expect(canaryToProbe(plan, new Set([plan.phases[0]!.devices[0]!]))).toEqual([plan.phases[0]!.devices[1]]);
    expect(canaryToProbe(planRollout(input([{ bulk: 'remainder' }]), devices), new Set())).toEqual([]);
  });

  it('a probed canary already at the target leaves the phases when the plan is made again', () => {
    const model = new RolloutModel({
      rolloutId: 'rollout:probe',
      profile: 'demo',
      fromRevision: 1,
      toRevision: 2,
      offline: 'skip',
    });
    model.addSnapshot(Array.from({ length: 10 }, (_, i) => device(`d${i}`)));
    const first = planRollout(input([{ canary: '1 device' }, { bulk: 'remainder' }]), model.snapshotDevices());
    const [canary] = canaryToProbe(first, new Set());
    model.updateSnapshot([{ ...model.snapshotOf(canary!)!, current: 2 }]);
    const again = planRollout(input([{ canary: '1 device' }, { bulk: 'remainder' }]), model.snapshotDevices());
    expect(again.alreadyApplied).toEqual([canary]);
    expect(again.phases[0]!.devices).not.toContain(canary);
    expect(model.snapshotDevices().find((d) => d.id === canary)!.current).toBe(2);
  });
});

describe('the plan seed (start gives each rollout its own id, plan seeds from rollout:<profile>)', () => {
  it('a rollout with planSeed picks as the plan of that id does, whatever its own id', () => {
    const devices = Array.from({ length: 40 }, (_, i) => device(`d${i}`));
    const phases = [{ canary: '3 devices' }, { bulk: 'remainder' }];
    const previewed = planRollout(input(phases), devices); // `wavegate plan`: id rollout:probe
    const started = planRollout(
      { ...input(phases), rolloutId: 'rollout:probe:20261202-180000', planSeed: 'rollout:probe' },
      devices,
    );
    expect(started.seed).toBe(previewed.seed);
    expect(started.phases[0]!.devices).toEqual(previewed.phases[0]!.devices);
    expect(started.rolloutId).toBe('rollout:probe:20261202-180000');
    // Without a seed (histories from before), the id seeds: another id, another pick.
    const unseeded = planRollout({ ...input(phases), rolloutId: 'rollout:probe:20261202-180000' }, devices);
    expect(unseeded.seed).not.toBe(previewed.seed);
    expect(unseeded.phases[0]!.devices).not.toEqual(previewed.phases[0]!.devices);
  });
});

describe('peakOverlap (the simulator’s concurrency high-water mark)', () => {
  it('counts spans open at once; one that closes as another opens does not overlap it; an open one counts', () => {
    expect(peakOverlap([])).toBe(0);
    expect(
      peakOverlap([
        { openedAt: 0, closedAt: 10 },
        { openedAt: 10, closedAt: 20 },
      ]),
    ).toBe(1);
    expect(
      peakOverlap([
        { openedAt: 0, closedAt: 10 },
        { openedAt: 5, closedAt: 20 },
        { openedAt: 6, closedAt: 7 },
      ]),
    ).toBe(3);
    expect(peakOverlap([{ openedAt: 0 }, { openedAt: 100, closedAt: 101 }])).toBe(2);
  });
});
