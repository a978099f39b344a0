import { describe, expect, it } from 'vitest';
import { renderFrame } from '../../cli/watch';
import type { RolloutStatus } from '../../contracts/rollout';
import { countDevices } from '../../core/rollout-state';

/** The watch frame of a sliced-records rollout (core/rollout/sliced-plan.ts): a sliced phase's progress comes from its slices. */
describe('watch over sliced records', () => {
  it("draws a sliced phase's progress from its slices' counts over the phase's size, and an inline phase from its devices", () => {
    const applied = (n: number) => countDevices(Array.from({ length: n }, () => ({ state: 'applied' as const })));
    const failed = countDevices([{ state: 'failed' }]);
    const status: RolloutStatus = {
      rolloutId: 'rollout:demo:1',
      profile: 'demo',
      fromRevision: 1,
      toRevision: 2,
      state: 'running',
      phase: 'bulk',
      phases: [
        { index: 0, name: 'canary', devices: 1, gate: 0, stage: 'passed' },
        { index: 1, name: 'bulk', devices: 10, gate: 0, stage: 'applying' },
      ],
      devices: [{ id: 'c-1', state: 'applied', phase: 0 }],
      counts: countDevices([]),
      controls: [],
      warnings: [],
      slices: [
        { workflowId: 's0', phase: 1, mode: 'apply', devices: 4, counts: applied(4), required: applied(4), started: 4 },
        {
          workflowId: 's1',
          phase: 1,
          mode: 'apply',
          devices: 4,
          counts: { ...applied(3), failed: 1, total: 4 },
          required: failed,
          started: 4,
        },
        { workflowId: 's2', phase: 1, mode: 'apply', devices: 2 },
      ],
    };
    const frame = renderFrame(status, { width: 140 });
    expect(frame.find((l) => l.includes('0 canary'))).toMatch(/\s1\/1\s+applied 1/);
    expect(frame.find((l) => l.includes('1 bulk'))).toMatch(/\s8\/10\s+applied 7/);
  });
});
