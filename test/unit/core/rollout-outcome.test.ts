import { describe, expect, it } from 'vitest';
import { describeControl, honestDevice, readStatus, rolloutOutcome } from '../../../core/rollout/outcome';
import type { RolloutStatus } from '../../../core/rollout/status';
import { countDevices, summarizeCounts, type DeviceState } from '../../../core/rollout-state';

function status(
  state: RolloutStatus['state'],
  devices: Array<[DeviceState, string?]>,
  verdict?: RolloutStatus['verdict'],
): RolloutStatus {
  const ds = devices.map(([s, reason], i) => ({ id: `d${i}`, state: s, phase: 0, ...(reason ? { reason } : {}) }));
  return {
    rolloutId: 'r',
    profile: 'demo',
    fromRevision: 1,
    toRevision: 2,
    state,
    phase: 'done',
    phases: [],
    devices: ds,
    counts: countDevices(ds),
    controls: [],
    warnings: [],
    ...(verdict ? { verdict } : {}),
  };
}

describe('rolloutOutcome: the exit code of start --wait / --watch and watch', () => {
  it('succeeds only when completed with every device the rollout was for at the target', () => {
    expect(
      rolloutOutcome(status('completed', [['applied'], ['claimed'], ['skipped', 'not-for-me: left-behind']])).code,
    ).toBe(0);
  });
  it('a completed rollout with a device skipped as offline is pending work: exit 1, naming it', () => {
    const o = rolloutOutcome(status('completed', [['applied'], ['skipped', 'offline at snapshot: unreachable']]));
    expect(o).toEqual({
      code: 1,
      summary: 'completed with pending work: 1 skipped (of 2 devices the rollout was for)',
    });
  });
  it('a completed rollout with a failed device (best-effort or refused at snapshot) is pending work', () => {
    expect(
      rolloutOutcome(status('completed', [['applied'], ['failed', 'refused at snapshot (host-key): changed']])).code,
    ).toBe(1);
  });
  it('a rollout whose every device was not-for-me completed all it was for: exit 0, as docs/cli.md and the board say', () => {
    expect(rolloutOutcome(status('completed', [['skipped', 'not-for-me: left-behind']]))).toEqual({
      code: 0,
      summary: 'completed: no device in scope needed this revision (1 not-for-me); nothing was applied',
    });
    expect(rolloutOutcome(status('completed', [])).code).toBe(0);
    // Not while it runs, and not when one device is pending beside them.
    expect(rolloutOutcome(status('running', [['skipped', 'not-for-me: left-behind']])).code).toBe(1);
    expect(rolloutOutcome(status('completed', [['not-for-me'], ['failed']])).code).toBe(1);
  });
  it('every state but completed is exit 1', () => {
    for (const s of ['running', 'paused', 'rolled-back', 'aborted', 'cancelled', 'failed'] as const)
      expect(rolloutOutcome(status(s, [['applied']])).code).toBe(1);
  });
  it('a canary run: pass or nothing-to-test is 0; fail or inconclusive is 1', () => {
    expect(rolloutOutcome(status('completed', [['rolled-back']], 'pass')).code).toBe(0);
    expect(rolloutOutcome(status('completed', [], 'nothing-to-test')).code).toBe(0);
    expect(rolloutOutcome(status('completed', [['rolled-back']], 'fail')).code).toBe(1);
    expect(rolloutOutcome(status('completed', [['rolled-back']], 'inconclusive')).code).toBe(1);
  });
});

describe('not-for-me and not-started: the exit code and older statuses', () => {
  const NODE_DOWN = 'node-down since 2026-11-30T08:00:00Z, expires 2026-12-30T08:00:00Z: PSU failed';
  it('a not-for-me device (a node-down verdict) is not a device the rollout was for: exit 0 with the rest applied', () => {
    expect(rolloutOutcome(status('completed', [['applied'], ['not-for-me', NODE_DOWN]]))).toEqual({
      code: 0,
      summary: 'completed: 1 of 1 devices at the target',
    });
    expect(rolloutOutcome(status('completed', [['not-for-me', NODE_DOWN]])).code).toBe(0);
  });
  it('a completed rollout with devices never started is pending work (exit 1), named apart from the offline ones', () => {
    const o = rolloutOutcome(
      status('completed', [
        ['applied'],
        ['not-started', 'aborted by wavegate'],
        ['skipped', 'offline at apply: x'],
        ['not-for-me', NODE_DOWN],
      ]),
    );
    expect(o).toEqual({
      code: 1,
      summary: 'completed with pending work: 1 not-started, 1 skipped (of 3 devices the rollout was for)',
    });
  });
  it('a status recorded before the states existed reads the same: skipped with a not-started reason is not-started', () => {
    const o = rolloutOutcome(
      status('completed', [
        ['applied'],
        ['skipped', 'not started: aborted by wavegate'],
        ['skipped', 'not-for-me: left-behind'],
      ]),
    );
    expect(o).toEqual({
      code: 1,
      summary: 'completed with pending work: 1 not-started (of 2 devices the rollout was for)',
    });
  });
  it('readStatus gives an older status its states, without the prefix in the reason, and counts them again', () => {
    const old = status('aborted', [
      ['applied'],
      ['skipped', `not-for-me: ${NODE_DOWN}`],
      ['skipped', 'not started: aborted by alice'],
      ['skipped', 'offline at snapshot: unreachable'],
      ['skipped', 'not in the canary phase'],
    ]);
    expect(old.counts).toMatchObject({ skipped: 4, 'not-for-me': 0 });
    const read = readStatus(old);
    expect(read.devices.map((d) => [d.state, d.reason])).toEqual([
      ['applied', undefined],
      ['not-for-me', NODE_DOWN],
      ['not-started', 'aborted by alice'],
      ['skipped', 'offline at snapshot: unreachable'],
      ['skipped', 'not in the canary phase'],
    ]);
    expect(read.counts).toMatchObject({ total: 5, applied: 1, skipped: 2, 'not-for-me': 1, 'not-started': 1 });
    expect(summarizeCounts(read.counts)).toBe('1/5 applied, 2 skipped, 1 not started, 1 not-for-me');
    // A status in the new form is read as it is.
    expect(readStatus(read)).toEqual(read);
  });
  it('honestDevice leaves every other state alone, even with a prefix-like reason', () => {
    expect(honestDevice({ state: 'failed' as const, reason: 'not started: x' })).toEqual({
      state: 'failed',
      reason: 'not started: x',
    });
    expect(honestDevice({ state: 'skipped' as const })).toEqual({ state: 'skipped' });
    expect(honestDevice({ state: 'skipped' as const, reason: 'not-for-me:' })).toEqual({ state: 'not-for-me' });
  });
});

describe('describeControl: an accepted control says what it does next', () => {
  const s = (over: Partial<RolloutStatus> = {}) => ({
    ...status('running', [['applied'], ['applying'], ['pending']]),
    phase: 'bulk 25%',
    changedDevices: 2,
    ...over,
  });
  it('abort says how many devices go back, or that they stay', () => {
    expect(describeControl('abort', s(), { rollback: true })).toBe(
      'abort accepted: no new device starts; rolling back the 2 devices this rollout changed',
    );
    expect(describeControl('abort', s({ changedDevices: 1 }), { rollback: false })).toBe(
      'abort accepted: no new device starts; the 1 device this rollout changed stay as they are',
    );
  });
  it('pause names what finishes and how to resume', () => {
    expect(describeControl('pause', s())).toBe(
      'pause accepted: no new device starts (1 device in flight finish), and the rollout holds before its next step; resume with: wavegate resume r',
    );
  });
  it('resume while still held by something else says so', () => {
    expect(describeControl('resume', s({ state: 'paused', pausedReason: 'audit trail not whole: x' }))).toBe(
      'resume accepted: audit trail not whole: x',
    );
    expect(describeControl('resume', s())).toBe('resume accepted: the rollout goes on (phase bulk 25%)');
  });
});
