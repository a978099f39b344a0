import { describe, expect, it } from 'vitest';
import { renderFrame } from '../../../cli/watch';
import {
  describeEta,
  describeTime,
  estimateRollout,
  makespanMs,
  perDeviceMs,
  type EtaInput,
  type PhaseTiming,
} from '../../../core/eta';
import { RolloutModel } from '../../../core/rollout/model';
import { PhaseTimings } from '../../../core/rollout/timing';
import { planRollout } from '../../../core/rollout/plan';
import type { DeviceSnapshot } from '../../../core/rollout-state';
import { parseRolloutSpec } from '../../../core/spec';

const T0 = Date.parse('2026-12-08T00:00:00.000Z');
const iso = (ms: number) => new Date(T0 + ms).toISOString();
const S = 1_000;

/**
 * A synthetic phase run on `slots` slots: devices of the given durations (ms) started in order on the slot that
 * frees first, as the device queue starts them. Returns each device's start and end, and the phase's end.
 */
function schedule(durations: number[], slots: number): { starts: number[]; ends: number[]; end: number } {
  const free = Array<number>(slots).fill(0);
  const starts: number[] = [];
  const ends: number[] = [];
  for (const d of durations) {
    let k = 0;
    for (let j = 1; j < slots; j++) if (free[j]! < free[k]!) k = j;
    starts.push(free[k]!);
    ends.push(free[k]! + d);
    free[k] = free[k]! + d;
  }
  return { starts, ends, end: Math.max(...ends) };
}

/** What the status shows of that phase at `now` (ms after T0): its timing and its devices' states. */
function phaseAt(
  run: { starts: number[]; ends: number[] },
  durations: number[],
  now: number,
  slots: number,
  over: Partial<EtaInput['phases'][number]> = {},
): { phase: EtaInput['phases'][number]; devices: EtaInput['devices'] } {
  const ids = durations.map((_, i) => i);
  const done = ids.filter((i) => run.ends[i]! <= now).sort((a, b) => run.ends[a]! - run.ends[b]!);
  const timing: PhaseTiming = {
    inFlight: slots,
    startedAt: iso(0),
    finished: done.length,
    durationsMs: done.map((i) => durations[i]!),
    runningSince: ids.filter((i) => run.starts[i]! <= now && run.ends[i]! > now).map((i) => iso(run.starts[i]!)),
  };
  const devices = ids.map((i) => ({
    phase: 0,
    state: run.starts[i]! > now ? 'pending' : run.ends[i]! <= now ? 'applied' : 'applying',
  }));
  return {
    phase: { index: 0, name: 'bulk', devices: durations.length, gate: 0, stage: 'applying', timing, ...over },
    devices,
  };
}

function endOf(input: EtaInput, now: number, phase = 0): number {
  const eta = estimateRollout(input, T0 + now).phases[phase]!.eta;
  if (eta.kind !== 'at') throw new Error(`expected a time, got ${JSON.stringify(eta)}`);
  return Date.parse(eta.at) - T0;
}

describe('core/eta: the per-device time', () => {
  it('is a mean, so a slow quarter counts for what it costs (a median would say 1 s)', () => {
    const each = perDeviceMs([1, 1, 1, 3, 1, 1, 1, 3].map((x) => x * S))!;
    expect(Math.abs(each - 1.5 * S)).toBeLessThan(0.05 * S);
  });
  it('caps a hung device at ten times the median', () => {
    const each = perDeviceMs([...Array(9).fill(S), 600 * S]);
    expect(each).toBeLessThan(2 * S);
  });
  it('weighs the recent more: devices that became slower move it past the plain mean', () => {
    const durations = [...Array(40).fill(S), ...Array(40).fill(2 * S)];
    expect(perDeviceMs(durations)!).toBeGreaterThan(1.6 * S);
  });
  it('counts a device still applying far longer than any finished one (a slower kind) as half again its time so far', () => {
    expect(Math.abs(perDeviceMs([S, S, S], [3 * S])! - (3 * S + 4.5 * S) / 4)).toBeLessThan(0.05 * S);
    // Within the spread of the finished ones it says nothing new.
    expect(perDeviceMs([S, S, S], [1.1 * S])).toBe(S);
  });
  it('is unknown before any device finished', () => {
    expect(perDeviceMs([], [5 * S])).toBeUndefined();
  });
  it('schedules the devices left on the slots that free first', () => {
    expect(makespanMs([], 8, S, 4)).toBe(2 * S);
    expect(makespanMs([3 * S], 3, S, 2)).toBe(3 * S);
    expect(makespanMs([], 0, S, 4)).toBe(0);
  });
});

describe('core/eta: a phase on a synthetic timeline', () => {
  it('mixed speeds on 4 slots: after 10% finished the end is within 20%, and closer later', () => {
    // 40 devices, every fourth 3x slower, started in that order: a representative first wave.
    const durations = Array.from({ length: 40 }, (_, i) => (i % 4 === 1 ? 3 : 1) * S * (1 + 0.03 * Math.sin(i)));
    const run = schedule(durations, 4);
    const ends = [...run.ends].sort((a, b) => a - b);
    for (const k of [4, 10, 20, 30, 38]) {
      const now = ends[k - 1]! + 1;
      const { phase, devices } = phaseAt(run, durations, now, 4);
      const error = Math.abs(endOf({ state: 'running', phases: [phase], devices }, now) - run.end) / run.end;
      expect(error, `after ${k} finished`).toBeLessThan(k >= 20 ? 0.1 : 0.2);
    }
  });

  it('scales by the in-flight limit: twice the slots, half the time left', () => {
    const durations = Array<number>(40).fill(S);
    const four = schedule(durations, 4);
    const eight = schedule(durations, 8);
    const a = phaseAt(four, durations, 1.5 * S, 4);
    const b = phaseAt(eight, durations, 1.5 * S, 8);
    const left4 = endOf({ state: 'running', phases: [a.phase], devices: a.devices }, 1.5 * S) - 1.5 * S;
    const left8 = endOf({ state: 'running', phases: [b.phase], devices: b.devices }, 1.5 * S) - 1.5 * S;
    expect(left4).toBeCloseTo(8.5 * S, -2);
    expect(left8).toBeCloseTo(3.5 * S, -2);
  });

  it('is unknown before the first device finished, never a made-up number', () => {
    const durations = Array<number>(8).fill(S);
    const { phase, devices } = phaseAt(schedule(durations, 4), durations, 0.5 * S, 4);
    const eta = estimateRollout({ state: 'running', phases: [phase], devices }, T0 + 0.5 * S);
    expect(eta.rollout).toEqual({ kind: 'unknown', reason: 'no device has finished yet' });
    expect(describeEta(eta.rollout)).toBe('unknown (no device has finished yet)');
  });
});

describe('core/eta: gates, later phases, approvals and pauses', () => {
  const durations = Array<number>(10).fill(2 * S);
  const run = schedule(durations, 2);
  const now = 4 * S + 1; // 4 finished, 2 running since 4 s, 4 to start
  const { phase, devices } = phaseAt(run, durations, now, 2, { gate: 60 * S });
  const later = (over: Partial<EtaInput['phases'][number]> = {}): EtaInput['phases'][number] => ({
    index: 1,
    name: 'rest',
    devices: 20,
    gate: 30 * S,
    stage: 'pending',
    timing: { inFlight: 5, finished: 0, durationsMs: [], runningSince: [] },
    ...over,
  });

  it('adds the gate, then a later phase at the observed time over its own limit, then its gate', () => {
    const eta = estimateRollout({ state: 'running', phases: [phase, later()], devices }, T0 + now);
    // This phase: its devices end at 10 s, then a 60 s gate. The next: 20 devices of 2 s on 5 slots, 30 s gate.
    expect(eta.phases[0]!.eta).toMatchObject({ kind: 'at', at: iso(70 * S) });
    expect(eta.rollout).toMatchObject({ kind: 'at', at: iso(70 * S + 8 * S + 30 * S) });
    expect(eta.perDeviceMs).toBe(2 * S);
  });

  it('in its gate: what is left of the gate', () => {
    const gated = { ...phase, stage: 'gate', timing: { ...phase.timing!, gateStartedAt: iso(10 * S) } };
    const all = devices.map((d) => ({ ...d, state: 'applied' }));
    const eta = estimateRollout({ state: 'running', phases: [gated], devices: all }, T0 + 40 * S);
    expect(eta.rollout).toMatchObject({ kind: 'at', at: iso(70 * S), inMs: 30 * S });
  });

  it('a manual gate makes the rest conditional: so long after the approval, not a time', () => {
    const manual = { ...phase, gate: 'manual' as const };
    const eta = estimateRollout({ state: 'running', phases: [manual, later()], devices }, T0 + now);
    expect(eta.phases[0]!.eta).toMatchObject({ kind: 'after', condition: 'approval', inMs: 0 });
    expect(eta.rollout).toEqual({
      kind: 'after',
      condition: 'approval',
      inMs: 38 * S,
      reason: 'phase bulk waits for an approval',
    });
    expect(describeEta(eta.rollout)).toBe('38s after approval');
  });

  it('a paused rollout: the time left after the resume', () => {
    const eta = estimateRollout(
      { state: 'paused', pausedReason: 'paused by alice', phases: [phase, later()], devices },
      T0 + now,
    );
    expect(eta.rollout).toMatchObject({ kind: 'after', condition: 'resume', inMs: 104 * S - 1 });
    expect(describeEta(eta.rollout)).toBe('1m 44s after resume (paused)');
  });

  it('an ended rollout is done, with when its last phase ended', () => {
    const ended = { ...phase, stage: 'passed', timing: { ...phase.timing!, endedAt: iso(80 * S) } };
    const eta = estimateRollout({ state: 'completed', phases: [ended], devices }, T0 + 90 * S);
    expect(eta.rollout).toEqual({ kind: 'done', at: iso(80 * S) });
  });

  it('watching after its last phase: it ends when the watch has run its time from the phase end', () => {
    const ended = { ...phase, stage: 'passed', timing: { ...phase.timing!, endedAt: iso(80 * S) } };
    const watch = { forMs: 1_800 * S, everyMs: 180 * S, checks: 2, planned: 10, outcome: 'watching' };
    const eta = estimateRollout({ state: 'watching', phases: [ended], devices, watch }, T0 + 500 * S);
    expect(eta.rollout).toEqual({ kind: 'at', at: iso(1_880 * S), inMs: 1_380 * S });
    expect(eta.phases[0]!.eta).toEqual({ kind: 'done', at: iso(80 * S) });
  });

  it('a phase run in slices (no device times): from its throughput since it started', () => {
    const sliced = later({
      stage: 'applying',
      devices: 1000,
      timing: { inFlight: 10, startedAt: iso(0), finished: 200, durationsMs: [], runningSince: [] },
    });
    const eta = estimateRollout({ state: 'running', phases: [sliced], devices: [] }, T0 + 100 * S);
    // 200 devices in 100 s on 10 slots: 5 s each; 800 left: 400 s more, then the 30 s gate.
    expect(eta.rollout).toMatchObject({ kind: 'at', at: iso(530 * S) });
  });

  it("a phase run in slices after a canary: its own throughput, not the canary's one device", () => {
    const canary = { ...phase, stage: 'passed', devices: 1, timing: { ...phase.timing!, durationsMs: [60 * S] } };
    const sliced = later({
      stage: 'applying',
      devices: 1000,
      timing: { inFlight: 10, startedAt: iso(0), finished: 200, durationsMs: [], runningSince: [] },
    });
    const eta = estimateRollout(
      { state: 'running', phases: [canary, { ...sliced, index: 1 }], devices: [] },
      T0 + 100 * S,
    );
    expect(eta.rollout).toMatchObject({ kind: 'at', at: iso(530 * S) });
    expect(eta.perDeviceMs).toBe(5 * S);
  });

  it('the model counts a sliced-records slice that ended as its phase devices finished', () => {
    const timings = new PhaseTimings();
    let clock = T0;
    timings.useClock(() => clock);
    timings.plan(
      { phases: [{ index: 0, name: 'bulk', devices: [], gate: 0 } as never], pools: [] },
      () => 'web',
      [1000],
    );
    timings.sliceStarted('r/1/0', 0, 'apply');
    timings.sliceStarted('r/1/undo', 0, 'rollback');
    clock += 50 * S;
    timings.sliceEnded('r/1/0', 200);
    timings.sliceEnded('r/1/undo', 200);
    expect(timings.of(0)).toMatchObject({ startedAt: iso(0), finished: 200 });
  });
});

describe('core/eta: times labelled with their zone', () => {
  it('says the zone it is in', () => {
    expect(describeTime('2026-12-08T01:02:03.000Z')).toBe('2026-12-08 01:02:03 UTC');
    expect(describeTime('2026-12-08T01:02:03.000Z', 'Europe/Berlin')).toBe('2026-12-08 02:02:03 GMT+1');
    expect(describeEta({ kind: 'at', at: '2026-12-08T01:02:03.000Z', inMs: 125_000 })).toBe(
      '~2026-12-08 01:02:03 UTC (in 2m 5s)',
    );
  });
});

describe('core/rollout/model: phase timings from the workflow clock', () => {
  const device = (id: string): DeviceSnapshot => ({
    id,
    host: `${id}.example`,
    port: 22,
    user: 'ops',
    pool: 'web',
    class: 'server',
    ssh: {},
    current: 1,
    reachable: true,
    updateClass: 'required',
    os: 'debian-12',
  });

  it('keeps each device apply time, the devices running, the in-flight limit and the gate start', () => {
    const spec = parseRolloutSpec(
      { rollout: { profile: 'demo', fromRevision: 1, toRevision: 2, phases: [{ bulk: 'remainder' }] } },
      'test',
    );
    const model = new RolloutModel({ rolloutId: 'r', ...spec });
    let clock = T0;
    model.useClock(() => clock);
    model.addSnapshot(['a', 'b', 'c', 'd'].map(device));
    model.adoptPlan(
      planRollout({ rolloutId: 'r', spec, poolBudgets: { web: 0.5 }, risk: 'risky' }, model.snapshotDevices()),
    );
    model.enterPhase(0);
    model.setDevice('a', 'applying');
    model.setDevice('b', 'applying');
    clock += 3 * S;
    model.setDevice('a', 'applied');
    const timing = model.status().phases[0]!.timing!;
    expect(timing).toEqual({
      inFlight: 2,
      startedAt: iso(0),
      finished: 1,
      durationsMs: [3 * S],
      runningSince: [iso(0)],
    });
    clock += S;
    model.setStage(0, 'gate');
    expect(model.status().phases[0]!.timing!.gateStartedAt).toBe(iso(4 * S));
  });

  it('keeps none without a clock: the status is what it was', () => {
    const spec = parseRolloutSpec(
      { rollout: { profile: 'demo', fromRevision: 1, toRevision: 2, phases: [{ bulk: 'remainder' }] } },
      'test',
    );
    const model = new RolloutModel({ rolloutId: 'r', ...spec });
    model.addSnapshot([device('a')]);
    model.adoptPlan(
      planRollout({ rolloutId: 'r', spec, poolBudgets: { web: 0.5 }, risk: 'risky' }, model.snapshotDevices()),
    );
    model.setDevice('a', 'applying');
    expect(model.status().phases[0]!.timing).toBeUndefined();
  });
});

describe('wavegate watch: the estimate in its frame', () => {
  it("shows the rollout's and each phase's estimated end, the zone named", () => {
    const durations = Array<number>(8).fill(2 * S);
    const run = schedule(durations, 2);
    const { phase, devices } = phaseAt(run, durations, 4 * S + 1, 2);
    const status = {
      rolloutId: 'r',
      profile: 'demo',
      fromRevision: 1,
      toRevision: 2,
      state: 'running',
      phase: 'bulk',
      phases: [{ ...phase, stage: 'applying' as const }],
      devices: devices.map((d, i) => ({ ...d, id: `d${i}`, state: d.state as 'applied' })),
      counts: { total: 8 } as never,
      controls: [],
      warnings: [],
    };
    const lines = renderFrame(status as never, { now: new Date(T0 + 4 * S + 1), width: 200 });
    expect(lines).toContainEqual(expect.stringMatching(/^ {2}eta: ~2026-12-0[78] \d\d:\d\d:\d\d \S+ \(in 4s\)$/));
    expect(lines).toContainEqual(expect.stringMatching(/^ {2}0 bulk .* applying {2}eta ~\d\d:\d\d:\d\d \S+$/));
  });
});
