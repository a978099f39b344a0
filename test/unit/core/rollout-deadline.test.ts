import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  ActiveClock,
  Deadline,
  deadlineAction,
  deadlineReason,
  deadlineSkipReason,
  hasDeadlines,
  MAX_NAMED_UNCONFIRMED,
  phaseDeadlineOf,
  phaseInProgress,
  unconfirmedDevices,
} from '../../../core/rollout/deadline';
import type { DeviceStatus } from '../../../core/rollout-state';
import { parseRolloutSpec } from '../../../core/spec';
import { WavegateError } from '../../../core/errors';
import { runCli } from '../../support/cli';
import { refusal } from '../../support/refusal';

const MIN = 60_000;

describe('ActiveClock: only active time counts', () => {
  it('adds the time between samples only when the earlier sample was active', () => {
    const clock = new ActiveClock(0, true);
    expect(clock.sample(10 * MIN, false)).toBe(10 * MIN); // paused at 10m
    expect(clock.sample(5 * 60 * MIN, true)).toBe(10 * MIN); // 5 hours paused: nothing counted
    expect(clock.elapsed(5 * 60 * MIN + 3 * MIN)).toBe(13 * MIN); // running again since
    expect(clock.sample(5 * 60 * MIN + 3 * MIN, true)).toBe(13 * MIN);
  });

  it('a clock started while paused counts nothing until the resume', () => {
    const clock = new ActiveClock(1_000, false);
    expect(clock.elapsed(99 * MIN)).toBe(0);
    clock.sample(100 * MIN, true);
    expect(clock.elapsed(101 * MIN)).toBe(MIN);
  });

  it('a sample earlier than the last one (never in workflow time) neither adds nor subtracts', () => {
    const clock = new ActiveClock(10 * MIN, true);
    expect(clock.sample(5 * MIN, true)).toBe(0);
    expect(clock.elapsed(11 * MIN)).toBe(MIN);
  });
});

describe('Deadline', () => {
  it('is due once the active time reaches the limit, and not while pauses pushed it out', () => {
    const d = new Deadline('phaseDeadline', 30 * MIN, 0, true, 1);
    d.sample(20 * MIN, false); // paused after 20 active minutes
    expect(d.due(10 * 60 * MIN)).toBe(false); // ten hours later, still paused
    expect(d.remaining(10 * 60 * MIN)).toBe(10 * MIN);
    d.sample(10 * 60 * MIN, true); // resumed
    expect(d.due(10 * 60 * MIN + 9 * MIN)).toBe(false);
    expect(d.due(10 * 60 * MIN + 10 * MIN)).toBe(true);
    expect(d.remaining(10 * 60 * MIN + 11 * MIN)).toBe(0);
    d.fired = true;
    expect(d.due(20 * 60 * MIN)).toBe(false); // passes once
  });
});

const body = (extra: Record<string, unknown>, phaseExtra: Record<string, unknown> = {}) => ({
  rollout: {
    profile: 'demo',
    fromRevision: 1,
    toRevision: 2,
    phases: [{ canary: '1 device', ...phaseExtra }, { bulk: 'remainder' }],
    ...extra,
  },
});

describe('deadline fields in the spec', () => {
  it('parses durations, the per-phase override and onDeadline; absent means no deadline and pause', () => {
    const spec = parseRolloutSpec(
      body({ progressDeadline: '2h', phaseDeadline: '30m', onDeadline: 'rollback' }, { phaseDeadline: '10m' }),
      'spec.yaml',
    );
    expect(spec.progressDeadline).toBe(120 * MIN);
    expect(spec.phaseDeadline).toBe(30 * MIN);
    expect(spec.phases[0]!.phaseDeadline).toBe(10 * MIN);
    expect(deadlineAction(spec)).toBe('rollback');
    expect(hasDeadlines(spec)).toBe(true);
    expect(phaseDeadlineOf(spec, { specIndex: 0 })).toBe(10 * MIN);
    expect(phaseDeadlineOf(spec, { specIndex: 1 })).toBe(30 * MIN);
    expect(phaseDeadlineOf(spec, { specIndex: -1 })).toBe(30 * MIN); // the implicit remainder takes the spec's

    const plain = parseRolloutSpec(body({}), 'spec.yaml');
    expect(hasDeadlines(plain)).toBe(false);
    expect(deadlineAction(plain)).toBe('pause');
    expect(phaseDeadlineOf(plain, { specIndex: 0 })).toBeUndefined();
    expect('onDeadline' in plain).toBe(false); // no default written into new inputs
    expect(hasDeadlines(parseRolloutSpec(body({}, { phaseDeadline: '5m' }), 'spec.yaml'))).toBe(true);
  });

  const refusals: Array<[string, Record<string, unknown>, Record<string, unknown>, string, string]> = [
    [
      'progressDeadline below 1 minute',
      { progressDeadline: '30s' },
      {},
      'rollout.progressDeadline',
      'between 1m and 30d (got "30s")',
    ],
    [
      'progressDeadline above 30 days',
      { progressDeadline: '31d' },
      {},
      'rollout.progressDeadline',
      'between 1m and 30d',
    ],
    ['phaseDeadline not a duration', { phaseDeadline: 'soon' }, {}, 'rollout.phaseDeadline', '(got "soon")'],
    [
      'a phase phaseDeadline of zero',
      {},
      { phaseDeadline: 0 },
      'rollout.phases[0].phaseDeadline',
      'between 1m and 30d (got 0)',
    ],
    ['onDeadline unknown', { onDeadline: 'ignore' }, {}, 'rollout.onDeadline', '"ignore"'],
    // Issue 22: accepted before, meaningless.
    [
      'onDeadline with no deadline to act on',
      { onDeadline: 'rollback' },
      {},
      'rollout.onDeadline',
      'no deadline is set: add progressDeadline or phaseDeadline (of the spec or of a phase), or remove onDeadline (got "rollback")',
    ],
    [
      'a spec phaseDeadline longer than the progressDeadline',
      { progressDeadline: '1h', phaseDeadline: '2h' },
      {},
      'rollout.phaseDeadline',
      'is 2h, longer than the progressDeadline of 1h',
    ],
    [
      "a phase's own phaseDeadline longer than the progressDeadline",
      { progressDeadline: '1h' },
      { phaseDeadline: '61m' },
      'rollout.phases[0].phaseDeadline',
      'is 61m, longer than the progressDeadline of 1h',
    ],
    [
      'a fractional-millisecond deadline in text',
      { progressDeadline: '2m0.5ms' },
      {},
      'rollout.progressDeadline',
      'must be a whole number of milliseconds',
    ],
    [
      'a fractional number of milliseconds',
      { phaseDeadline: 90_000.5 },
      {},
      'rollout.phaseDeadline',
      'must be a whole number of milliseconds (no fraction of a millisecond), between 1m and 30d (got 90000.5)',
    ],
    [
      'a fraction of a millisecond in any duration',
      { gate: '1.5ms' },
      {},
      'rollout.gate',
      'whole number of milliseconds',
    ],
  ];
  it.each(refusals)('%s is refused naming the field and the value', (_name, extra, phaseExtra, field, shows) => {
    const error = refusal(() => parseRolloutSpec(body(extra, phaseExtra), 'spec.yaml'));
    expect(error).toBeInstanceOf(WavegateError);
    expect(error.code).toBe('INVALID_INPUT');
    const line = error.message.split('\n').find((l) => l.trim().startsWith(`${field}:`));
    expect(line, error.message).toBeDefined();
    expect(line).toContain(shows);
  });
});

describe('deadline settings that hold together', () => {
  it('a phase deadline equal to the progress deadline, decimal durations that are whole milliseconds, and onDeadline with only a phase deadline are accepted', () => {
    const spec = parseRolloutSpec(
      body({ progressDeadline: '1.5h', phaseDeadline: '90m', onDeadline: 'abort' }, { phaseDeadline: '1.1m' }),
      'spec.yaml',
    );
    expect(spec.progressDeadline).toBe(90 * MIN);
    expect(spec.phaseDeadline).toBe(90 * MIN);
    expect(spec.phases[0]!.phaseDeadline).toBe(66_000); // 1.1 * 60000 is 66000.00000000001 in floating point: exact here
    expect(parseRolloutSpec(body({ onDeadline: 'pause' }, { phaseDeadline: '5m' }), 'spec.yaml').onDeadline).toBe(
      'pause',
    );
  });
});

describe('unconfirmedDevices', () => {
  const devices: DeviceStatus[] = [
    { id: 'canary', state: 'applied', phase: 0 },
    { id: 'b1', state: 'applied', phase: 1 },
    { id: 'b2', state: 'applying', phase: 1 },
    { id: 'b3', state: 'failed', phase: 1 },
    { id: 'b4', state: 'skipped', phase: 1, reason: 'offline at snapshot' },
    // Never started (an abort came first): skipped like b4, nobody waits for it.
    { id: 'b5', state: 'not-started', phase: 1, reason: 'aborted by alice' },
    { id: 'r1', state: 'pending', phase: 2 },
    {
      id: 'nfm',
      state: 'not-for-me',
      phase: -1,
      reason: 'left-behind: the device is excluded from updates (updateClass)',
    },
    { id: 'there', state: 'applied', phase: -1 },
  ];

  it('a phase: its devices not at the target, or at it but before its health gate passed; skipped ones are not waited for', () => {
    expect(unconfirmedDevices(devices, new Set([0]), 1)).toEqual({
      ids: ['b1', 'b2', 'b3'],
      count: 3,
      byState: { applied: 1, applying: 1, failed: 1 },
    });
    expect(unconfirmedDevices(devices, new Set([0, 1]), 1).ids).toEqual(['b2', 'b3']);
  });

  it('the whole rollout: every phase, devices outside the plan left out', () => {
    expect(unconfirmedDevices(devices, new Set([0])).ids).toEqual(['b1', 'b2', 'b3', 'r1']);
    expect(unconfirmedDevices(devices, new Set()).ids).toEqual(['canary', 'b1', 'b2', 'b3', 'r1']);
  });

  it(`names at most ${MAX_NAMED_UNCONFIRMED} devices and counts them all`, () => {
    const many: DeviceStatus[] = Array.from({ length: 250 }, (_, i) => ({ id: `d${i}`, state: 'pending', phase: 0 }));
    const u = unconfirmedDevices(many, new Set());
    expect(u.ids).toHaveLength(MAX_NAMED_UNCONFIRMED);
    expect(u.ids[0]).toBe('d0');
    expect(u.count).toBe(250);
  });
});

describe('deadline wording and phase stages', () => {
  it('the reason starts with "deadline:" and names which deadline, its length, the phase and the count', () => {
    expect(deadlineReason('phaseDeadline', 30 * MIN, 'canary 1 device', 1)).toBe(
      'deadline: phaseDeadline 30m of phase canary 1 device passed in active time with 1 required device(s) unconfirmed',
    );
    expect(deadlineReason('progressDeadline', 120 * MIN, 'bulk 25%', 11)).toBe(
      'deadline: progressDeadline 2h (in phase bulk 25%) passed in active time with 11 required device(s) unconfirmed',
    );
    expect(deadlineReason('progressDeadline', 120 * MIN, null, 0)).toMatch(/^deadline: progressDeadline 2h passed/);
    expect(deadlineSkipReason('phaseDeadline')).toBe('not started: phaseDeadline passed (rolled back)');
  });

  it('a phase deadline runs from applying through the gate, the approval and an inconclusive hold; passed and failed end it', () => {
    expect(['applying', 'gate', 'awaiting-approval', 'inconclusive'].every(phaseInProgress)).toBe(true);
    expect(['pending', 'passed', 'failed', 'stopped'].some(phaseInProgress)).toBe(false);
  });
});

describe('wavegate plan with a bad deadline', () => {
  it('exits 2 naming the field and the value, nothing planned', async () => {
    const corpus = 'test/corpus';
    const run = await runCli([
      'plan',
      '-f',
      join(corpus, 'specs/progress-deadline-30s.yaml'),
      '--inventory',
      join(corpus, 'valid/inventory.yaml'),
      '--profiles-dir',
      join(corpus, 'no-profiles'),
    ]);
    expect(run.code, run.stderr).toBe(2);
    expect(run.stderr).toContain('rollout.progressDeadline: must be between 1m and 30d (got "30s")');
    expect(run.stdout).toBe('');
  });
});
