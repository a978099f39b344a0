import { describe, expect, it } from 'vitest';
import { WavegateError } from '../../../core/errors';
import {
  addWindow,
  checkFreezeId,
  coveringFreeze,
  dueWork,
  FREEZE_RESWEEP_MS,
  FREEZE_SWEEP_EVERY_MS,
  FREEZE_WINDOWS_MAX,
  freezeRequestOf,
  freezeRequestProblem,
  frozenRefusal,
  isActive,
  nextDue,
  pausedByFreeze,
  windowsToLift,
  type FreezeState,
  type FreezeWindow,
} from '../../../core/freeze';
import type { ControlRecord } from '../../../core/rollout/status';
import { refusal } from '../../support/refusal';

/** core/freeze.ts: a freeze window's input, when it is in force, what it covers, and whose pause a rollout holds. */

const T0 = Date.parse('2027-01-01T00:00:00Z');
const H = 3_600_000;
const iso = (ms: number) => new Date(ms).toISOString();

function window(fields: Partial<FreezeWindow> = {}): FreezeWindow {
  return { id: 'freeze-1', reason: 'incident 42', scope: 'all', by: 'alice', createdAt: iso(T0), ...fields };
}

describe('freezeRequestOf (the CLI flags)', () => {
  it('takes a reason and a scope (none: all), and times as date-times or durations', () => {
    expect(freezeRequestOf({ reason: ' incident 42 ' }, 'alice', T0)).toEqual({
      reason: 'incident 42',
      scope: 'all',
      by: 'alice',
    });
    expect(freezeRequestOf({ reason: 'r', scopeWord: 'all' }, 'alice', T0).scope).toBe('all');
    expect(freezeRequestOf({ reason: 'r', profile: 'web' }, 'alice', T0).scope).toEqual({ profile: 'web' });
    expect(freezeRequestOf({ reason: 'r', pool: 'edge.eu' }, 'alice', T0).scope).toEqual({ pool: 'edge.eu' });
    // --until a duration counts from --from; --from a duration from now.
    expect(freezeRequestOf({ reason: 'r', from: '2h', until: '8h' }, 'alice', T0)).toMatchObject({
      from: iso(T0 + 2 * H),
      until: iso(T0 + 10 * H),
    });
    expect(
      freezeRequestOf({ reason: 'r', from: '2027-01-02T00:00:00+01:00', until: '2027-01-03T00:00:00Z' }, 'a', T0),
    ).toMatchObject({ from: '2027-01-01T23:00:00.000Z', until: '2027-01-03T00:00:00.000Z' });
  });

  it('refuses each bad input naming the field and the value', () => {
    const bad = (flags: Parameters<typeof freezeRequestOf>[0]) =>
      refusal(() => freezeRequestOf(flags, 'alice', T0), WavegateError);
    expect(bad({}).message).toContain('--reason "": a freeze needs a reason');
    expect(bad({ reason: '   ' }).code).toBe('INVALID_INPUT');
    expect(bad({ reason: 'x'.repeat(201) }).message).toBe('--reason: at most 200 characters (got 201)');
    expect(bad({ reason: 'a\nb' }).message).toContain('--reason "a\\nb": must be one line');
    expect(bad({ reason: 'r', scopeWord: 'everything' }).message).toContain('scope "everything": unknown scope');
    expect(bad({ reason: 'r', profile: 'web', all: true }).message).toContain('got --profile and --all');
    expect(bad({ reason: 'r', profile: 'Web!' }).message).toContain('--profile');
    expect(bad({ reason: 'r', pool: 'a b' }).message).toContain('--pool "a b"');
    expect(bad({ reason: 'r', from: 'tomorrow' }).message).toContain('--from "tomorrow": must be an ISO 8601');
    // A local time means another instant on another machine: a zone is required.
    expect(bad({ reason: 'r', from: '2027-01-02T00:00:00' }).message).toContain('--from');
    const before = bad({ reason: 'r', from: '2027-01-02T00:00:00Z', until: '2027-01-01T12:00:00Z' });
    expect(before.message).toBe('--until "2027-01-01T12:00:00Z": must be after --from (2027-01-02T00:00:00.000Z)');
    expect(before.details).toMatchObject({ field: '--until', value: '2027-01-01T12:00:00Z' });
    expect(bad({ reason: 'r', until: '2026-12-31T00:00:00Z' }).message).toContain('is in the past');
  });

  it('the entity checks a request again in full, and bounds the windows it holds', () => {
    const ok = { reason: 'r', scope: { profile: 'web' }, by: 'alice' };
    expect(freezeRequestProblem(ok, [], T0)).toBeNull();
    expect(freezeRequestProblem({ ...ok, scope: { region: 'eu' } }, [], T0)).toContain('scope: must be');
    expect(freezeRequestProblem({ ...ok, scope: { profile: 'web', pool: 'x' } }, [], T0)).toContain('scope');
    expect(freezeRequestProblem({ ...ok, by: '' }, [], T0)).toContain('by');
    expect(freezeRequestProblem({ ...ok, until: iso(T0 - 1) }, [], T0)).toContain('in the past');
    const full = Array.from({ length: FREEZE_WINDOWS_MAX }, (_, i) => window({ id: `freeze-${i + 1}` }));
    expect(freezeRequestProblem(ok, full, T0)).toContain(`at most ${FREEZE_WINDOWS_MAX} freeze windows`);
    expect(freezeRequestProblem(ok, full.slice(1), T0)).toBeNull();
  });

  it('a freeze id is freeze-<n>', () => {
    expect(checkFreezeId('freeze-12')).toBe('freeze-12');
    expect(refusal(() => checkFreezeId('freeze-0'), WavegateError).message).toContain('id "freeze-0"');
    expect(refusal(() => checkFreezeId('all'), WavegateError).code).toBe('INVALID_INPUT');
  });
});

describe('which freeze is in force and what it covers', () => {
  it('is in force from `from` (or its creation) until `until`, exclusive', () => {
    const w = window({ from: iso(T0 + H), until: iso(T0 + 2 * H) });
    expect([T0, T0 + H - 1, T0 + H, T0 + 2 * H - 1, T0 + 2 * H].map((t) => isActive(w, t))).toEqual([
      false,
      false,
      true,
      true,
      false,
    ]);
    expect(isActive(window(), T0)).toBe(true);
    expect(isActive(window(), T0 + 1000 * H)).toBe(true);
  });

  it('covers by scope: all, its profile, a pool of the inventory (unknown pools: covered)', () => {
    const web = window({ id: 'freeze-1', scope: { profile: 'web' } });
    const edge = window({ id: 'freeze-2', scope: { pool: 'edge' } });
    expect(coveringFreeze([web, edge], { profile: 'web', pools: ['core'] }, T0)?.id).toBe('freeze-1');
    expect(coveringFreeze([web, edge], { profile: 'db', pools: ['core'] }, T0)).toBeUndefined();
    expect(coveringFreeze([web, edge], { profile: 'db', pools: ['core', 'edge'] }, T0)?.id).toBe('freeze-2');
    expect(coveringFreeze([web, edge], { profile: 'db' }, T0)?.id).toBe('freeze-2');
    expect(coveringFreeze([window()], { profile: 'db', pools: [] }, T0)?.id).toBe('freeze-1');
    // A window not in force yet, or ended, covers nothing.
    expect(coveringFreeze([window({ from: iso(T0 + H) })], { profile: 'db' }, T0)).toBeUndefined();
    expect(coveringFreeze([window({ until: iso(T0 + H) })], { profile: 'db' }, T0 + H)).toBeUndefined();
  });

  it('a refusal is CONFLICT naming the freeze, its reason, scope and end', () => {
    const err = frozenRefusal(window({ until: iso(T0 + H), scope: { profile: 'web' } }), 'converge', {
      profile: 'web',
    });
    expect(err.code).toBe('CONFLICT');
    expect(err.message).toBe(
      'converge of profile "web" refused: frozen by freeze-1 ("incident 42", profile web, until 2027-01-01T01:00:00.000Z); lift it with wavegate unfreeze freeze-1',
    );
  });
});

describe('whose pause a rollout holds', () => {
  const c = (control: ControlRecord['control'], by: string, accepted = true): ControlRecord => ({
    control,
    by,
    accepted,
    at: iso(T0),
  });
  it('paused by the freeze: its last accepted pause or resume is the freeze pause', () => {
    expect(pausedByFreeze('paused', [c('pause', 'freeze:freeze-1')], 'freeze-1')).toBe(true);
    // A refused resume or an approval in between changes nothing.
    expect(
      pausedByFreeze(
        'paused',
        [c('pause', 'freeze:freeze-1'), c('resume', 'bob', false), c('approve', 'bob')],
        'freeze-1',
      ),
    ).toBe(true);
    expect(pausedByFreeze('paused', [c('pause', 'freeze:freeze-1')], 'freeze-2')).toBe(false);
    // An operator paused it first (the freeze's pause was refused), or resumed and paused it again since.
    expect(pausedByFreeze('paused', [c('pause', 'bob'), c('pause', 'freeze:freeze-1', false)], 'freeze-1')).toBe(false);
    expect(
      pausedByFreeze('paused', [c('pause', 'freeze:freeze-1'), c('resume', 'bob'), c('pause', 'bob')], 'freeze-1'),
    ).toBe(false);
    expect(pausedByFreeze('running', [c('pause', 'freeze:freeze-1')], 'freeze-1')).toBe(false);
    expect(pausedByFreeze('paused', [], 'freeze-1')).toBe(false);
  });
});

describe("the entity's state", () => {
  const fresh = (): FreezeState => ({ windows: [], next: 1 });
  it('numbers windows, holds at from, sweeps once more, then every minute, and ends at until', () => {
    const state = fresh();
    const now = addWindow(state, { reason: 'r', scope: 'all', by: 'a' }, T0);
    const later = addWindow(
      state,
      { reason: 'r', scope: 'all', by: 'a', from: iso(T0 + H), until: iso(T0 + 2 * H) },
      T0,
    );
    expect([now.id, later.id]).toEqual(['freeze-1', 'freeze-2']);
    expect(dueWork(state, T0)).toEqual({ hold: [now], end: [] });
    now.heldAt = iso(T0);
    now.resweep = true;
    expect(nextDue(state, T0)).toBe(T0 + FREEZE_RESWEEP_MS);
    expect(dueWork(state, T0 + FREEZE_RESWEEP_MS - 1)).toEqual({ hold: [], end: [] });
    expect(dueWork(state, T0 + FREEZE_RESWEEP_MS).hold).toEqual([now]);
    // Then a sweep every minute while in force (rollouts started by a path that does not ask the freeze).
    now.heldAt = iso(T0 + FREEZE_RESWEEP_MS);
    now.resweep = false;
    expect(nextDue(state, T0 + FREEZE_RESWEEP_MS)).toBe(T0 + FREEZE_RESWEEP_MS + FREEZE_SWEEP_EVERY_MS);
    expect(dueWork(state, T0 + FREEZE_RESWEEP_MS + FREEZE_SWEEP_EVERY_MS - 1).hold).toEqual([]);
    expect(dueWork(state, T0 + FREEZE_RESWEEP_MS + FREEZE_SWEEP_EVERY_MS).hold).toEqual([now]);
    now.heldAt = iso(T0 + H);
    expect(dueWork(state, T0 + H).hold).toEqual([later]);
    later.heldAt = iso(T0 + H);
    // The scheduled window's end comes before its next minute's sweep would.
    later.until = iso(T0 + H + 30_000);
    expect(nextDue(state, T0 + H)).toBe(T0 + H + 30_000);
    expect(dueWork(state, T0 + H + 30_000)).toEqual({ hold: [], end: [later] });
    // A window that ends before its first sweep is only ended.
    const brief = fresh();
    const b = addWindow(brief, { reason: 'r', scope: 'all', by: 'a', until: iso(T0 + 1) }, T0);
    expect(dueWork(brief, T0 + 5)).toEqual({ hold: [], end: [b] });
    expect(nextDue(fresh(), T0)).toBeUndefined();
  });

  it('a lift names one window, or all; an unknown id says which are held', () => {
    const state = fresh();
    addWindow(state, { reason: 'r', scope: 'all', by: 'a' }, T0);
    addWindow(state, { reason: 'r', scope: 'all', by: 'a' }, T0);
    expect((windowsToLift(state, { id: 'freeze-2' }) as FreezeWindow[]).map((w) => w.id)).toEqual(['freeze-2']);
    expect((windowsToLift(state, { all: true }) as FreezeWindow[]).length).toBe(2);
    expect(windowsToLift(state, { id: 'freeze-9' })).toBe('no freeze "freeze-9" is held (held: freeze-1, freeze-2)');
  });
});
