import { describe, expect, it } from 'vitest';
import { renderFrame } from '../../cli/watch';
import type { RolloutStatus } from '../../contracts/rollout';
import { countDevices, proofOf, summarizeProof } from '../../core/rollout-state';

/** Each device's state as proven (its receipt verified) or claimed (the control plane's word): issue 44. */
describe('proof in status and watch', () => {
  const devices: RolloutStatus['devices'] = [
    { id: 'web-01', state: 'applied', phase: 0, proven: true },
    { id: 'web-02', state: 'applied', phase: 0 },
    { id: 'web-03', state: 'failed', phase: 0, reason: 'NO_RECEIPT: the device sent no receipt' },
    { id: 'web-04', state: 'pending', phase: 1 },
  ];

  it('names each settled device proven or claimed, and counts the applied ones proven', () => {
    expect(devices.map(proofOf)).toEqual(['proven', 'claimed', '', '']);
    expect(summarizeProof(devices)).toBe('1 of 2 applied proven by receipts');
  });

  it('watch shows a PROOF column and the proven count', () => {
    const status: RolloutStatus = {
      rolloutId: 'rollout:web:1',
      profile: 'web',
      fromRevision: 1,
      toRevision: 2,
      state: 'running',
      phase: 'canary',
      phases: [{ index: 0, name: 'canary', devices: 3, gate: 0, stage: 'applying' }],
      devices,
      counts: countDevices(devices),
      controls: [],
      warnings: [],
    };
    const frame = renderFrame(status, { width: 140 });
    expect(frame).toContain('  1 of 2 applied proven by receipts');
    expect(frame.find((l) => l.includes('web-01'))).toMatch(/applied\s+proven\s/);
    expect(frame.find((l) => l.includes('web-02'))).toMatch(/applied\s+claimed\s/);
  });
});
