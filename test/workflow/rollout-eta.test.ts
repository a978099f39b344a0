import { describe, expect, it } from 'vitest';
import { statusQuery, type RolloutStatus } from '../../contracts/rollout';
import { estimateRollout } from '../../core/eta';
import { prng, seedFrom, shuffled } from '../../core/random';
import type { SimDeviceSpec } from '../../sim';
import type { CliRun } from '../support/cli';
import { realRollouts } from '../support/real-rollouts';

/**
 * The ETA (core/eta.ts) against a real rollout: a real Temporal dev server and worker, 40 simulated devices over
 * real SSH, a quarter of them 3x slower, 4 in flight. What it shows: once the first 10% of the phase's devices
 * finished, every estimate of the phase's end is within 20% of when it really ended. The devices' time is the
 * simulator's sleep in their apply command (1 s or 3 s), not CPU: a loaded machine adds a little to each, alike.
 */
describe('rollout ETA on a simulated fleet of mixed speeds', () => {
  const real = realRollouts('eta');
  const DEVICES = 40;
  const FAST_MS = 1_000;
  // Spread evenly: every fourth device in the order the plan starts them (its shuffle, seeded by the rollout id, of
  // the devices sorted by id; asserted below), so the slow kind is among the first to start. An estimate sees a
  // slow kind only once one of it has started: docs/operations.md ("When will it be done") on bunched fleets.
  const devices: SimDeviceSpec[] = Array.from({ length: DEVICES }, (_, k) => ({
    id: `eta-${String(k + 1).padStart(2, '0')}`,
    pool: 'web',
    class: 'server',
    os: 'linux',
    updateClass: 'required',
  }));

  it('after the first 10% finished, the estimate is within 20% of the actual end; status shows it', async () => {
    const { fleet, input } = await real.rollout({ gate: '0s', phases: [{ bulk: 'remainder' }] }, devices, { web: 0.1 });
    const order = shuffled(
      devices.map((d) => d.id),
      prng(seedFrom(input.rolloutId)),
    );
    const slowIds = new Set(order.filter((_, k) => k % 4 === 1));
    for (const id of order)
      await fleet.setFaults(id, { slowCommand: 'install -m 0644', slowMs: slowIds.has(id) ? 3 * FAST_MS : FAST_MS });
    const handle = await real.start(input);

    const samples: Array<{ now: number; finished: number; end?: number }> = [];
    let cli: Promise<[CliRun, CliRun]> | undefined;
    let status: RolloutStatus;
    for (;;) {
      status = await handle.query(statusQuery);
      const now = Date.now();
      const timing = status.phases[0]?.timing;
      if (status.state !== 'running' || timing?.endedAt) break;
      if (timing && timing.finished >= DEVICES / 10) {
        const eta = estimateRollout(status, now).phases[0]!.eta;
        samples.push({ now, finished: timing.finished, ...(eta.kind === 'at' ? { end: Date.parse(eta.at) } : {}) });
        // What an operator reads, once, while it runs: the rollout's and the phase's estimated end, zone named.
        // Late in the phase: two commands starting take the machine's CPU for a moment, and the devices' times
        // with it, which is not what the estimate is measured against.
        if (timing.finished >= (DEVICES * 7) / 10)
          cli ??= Promise.all([real.cli(['status', input.rolloutId]), real.cli(['status', input.rolloutId, '--json'])]);
      }
      await new Promise((r) => setTimeout(r, 250));
    }
    const final = await handle.result();
    const timing = final.phases[0]!.timing!;
    expect(final.state).toBe('completed');
    expect(timing.inFlight).toBe(4);

    // The scenario is the one described: the plan started the devices in that order.
    expect(final.devices.filter((d) => d.phase === 0).map((d) => d.id)).toEqual(order);

    const start = Date.parse(timing.startedAt!);
    const end = Date.parse(timing.endedAt!);
    expect(samples.length).toBeGreaterThan(5);
    const errors = samples.map((s) => ({
      finished: s.finished,
      error: s.end === undefined ? Number.POSITIVE_INFINITY : Math.abs(s.end - end) / (end - start),
    }));
    const worst = errors.reduce((a, b) => (b.error > a.error ? b : a));
    console.log(
      `eta: phase ran ${((end - start) / 1000).toFixed(1)} s; error after 10%: first ${errors[0]!.error.toFixed(3)}, worst ${worst.error.toFixed(3)} (${worst.finished} finished) over ${errors.length} estimates`,
    );
    for (const e of errors) expect(e.error, `estimate with ${e.finished} finished`).toBeLessThanOrEqual(0.2);

    const [text, json] = await cli!;
    expect(text.stdout).toMatch(/^ {2}eta: ~\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \S+ \(in (\d+m )?\d+s\)$/m);
    expect(text.stdout).toMatch(/^ {2}phase 0 bulk remainder: 40 devices, applying, ends ~/m);
    expect(JSON.parse(json.stdout).eta.rollout).toMatchObject({ kind: 'at' });
  });
});
