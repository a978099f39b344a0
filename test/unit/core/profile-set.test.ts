import { describe, expect, it } from 'vitest';
import { WavegateError } from '../../../core/errors';
import type { DeviceOutcome } from '../../../core/rollout/device-outcome';
import {
  alsoProblems,
  alsoScopeProblems,
  applyOrder,
  changedSoFar,
  compensationDevices,
  compensationPasses,
  MAX_ALSO_PROFILES,
  memberField,
  memberBusyReason,
  memberFloor,
  nextSetStep,
  parseAlso,
  revertMembers,
  setLabel,
  setLockIds,
  setMembers,
  setOutcome,
  undoPlan,
  type MemberOutcome,
  type SetEnd,
  type SetMember,
} from '../../../core/rollout/profile-set';
import { refusal } from '../../support/refusal';

/** Several profiles as one rollout: the `also` field, the order of applies, a device's way through the set, the undo, compensation, floors and locks. */

const main = { profile: 'pkg', fromRevision: 2, toRevision: 3 };
const spec = { ...main, also: [{ profile: 'motd', fromRevision: 6, toRevision: 7 }] };
const members: SetMember[] = setMembers(spec);
const order = applyOrder(members.length, false);

const applied: MemberOutcome = { state: 'applied', touched: true };
const inPlace: MemberOutcome = { state: 'applied', reason: 'already in place (verify only)', touched: false };
const failed = (reason: string, touched = true): MemberOutcome => ({ state: 'failed', reason, touched });
const rolledBack: MemberOutcome = { state: 'rolled-back', touched: true };

function invalid(fn: () => unknown): string {
  const err = refusal(fn, WavegateError);
  expect(err.code).toBe('INVALID_INPUT');
  return err.message;
}

describe('the `also` field', () => {
  it('accepts profiles beside the main one, in the declared order after it', () => {
    const also = parseAlso(
      [
        { profile: 'motd', fromRevision: 6, toRevision: 7 },
        { profile: 'inference', fromRevision: 0, toRevision: 1 },
      ],
      main,
      'spec.yaml',
    );
    expect(setMembers({ ...main, also }).map((m) => m.profile)).toEqual(['pkg', 'motd', 'inference']);
  });

  it('refuses a profile named twice, the main one among them, naming the field and the value', () => {
    const message = invalid(() =>
      parseAlso(
        [
          { profile: 'pkg', fromRevision: 1, toRevision: 2 },
          { profile: 'motd', fromRevision: 6, toRevision: 7 },
          { profile: 'motd', fromRevision: 6, toRevision: 8 },
        ],
        main,
        'spec.yaml',
      ),
    );
    expect(message).toContain(
      'rollout.also[0].profile: is the rollout\'s own profile (rollout.profile); name each profile once (got "pkg")',
    );
    expect(message).toContain(
      'rollout.also[2].profile: named twice (also[1] too); name each profile once (got "motd")',
    );
  });

  it('refuses a missing revision, and a way that does not go up', () => {
    expect(invalid(() => parseAlso([{ profile: 'motd', fromRevision: 6 }], main, 'spec.yaml'))).toMatch(
      /rollout\.also\[0\]\.toRevision: required/,
    );
    expect(invalid(() => parseAlso([{ profile: 'motd', toRevision: 7 }], main, 'spec.yaml'))).toMatch(
      /rollout\.also\[0\]\.fromRevision: required/,
    );
    expect(
      invalid(() => parseAlso([{ profile: 'motd', fromRevision: 7, toRevision: 7 }], main, 'spec.yaml')),
    ).toContain('rollout.also[0].toRevision: must be above fromRevision (7) (got 7)');
  });

  it('refuses more profiles than the bound, an empty list, and an unknown field', () => {
    const many = Array.from({ length: MAX_ALSO_PROFILES + 1 }, (_, i) => ({
      profile: `p${i}`,
      fromRevision: 1,
      toRevision: 2,
    }));
    expect(invalid(() => parseAlso(many, main, 'spec.yaml'))).toContain(
      `rollout.also: at most ${MAX_ALSO_PROFILES} profiles beside the main one`,
    );
    expect(invalid(() => parseAlso([], main, 'spec.yaml'))).toContain('rollout.also: name at least one profile');
    expect(
      invalid(() => parseAlso([{ profile: 'motd', fromRevision: 6, toRevision: 7, revision: 7 }], main, 'spec.yaml')),
    ).toContain('rollout.also[0].revision: unknown field');
  });

  it('refuses a profile both rolled out here and waited for in after', () => {
    expect(
      alsoProblems({
        ...spec,
        after: [
          { profile: 'driver', revision: 1 },
          { profile: 'motd', revision: 7 },
        ],
      }),
    ).toEqual([
      {
        path: ['also', 0, 'profile'],
        value: 'motd',
        message: 'is waited for in after[1] too: a profile is either rolled out with this one or waited for, not both',
      },
    ]);
    expect(alsoProblems(spec)).toEqual([]);
  });

  it("names each member's fields where the spec has them, so intake refuses an also profile as it does the main one", () => {
    expect(memberField(0, 'toRevision')).toBe('rollout.toRevision');
    expect(memberField(2, 'fromRevision')).toBe('rollout.also[1].fromRevision');
  });
});

describe('a device through the set', () => {
  it('applies the members in the declared order and ends applied, having changed both', () => {
    expect(nextSetStep(members, order, { applies: [], undos: [] })).toEqual({ kind: 'apply', member: 0 });
    expect(nextSetStep(members, order, { applies: [applied], undos: [] })).toEqual({ kind: 'apply', member: 1 });
    expect(nextSetStep(members, order, { applies: [applied, applied], undos: [] })).toEqual({
      kind: 'end',
      state: 'applied',
      changed: [0, 1],
    });
  });

  it('keeps a member found in place out of what the rollout changed, and is claimed when one member is', () => {
    expect(nextSetStep(members, order, { applies: [inPlace, applied], undos: [] })).toEqual({
      kind: 'end',
      state: 'applied',
      changed: [1],
    });
    expect(
      nextSetStep(members, order, { applies: [applied, { state: 'claimed', touched: true }], undos: [] }),
    ).toMatchObject({ kind: 'end', state: 'claimed' });
  });

  it("ends with the first member's own answer when the first one does not go in: the single-profile case", () => {
    const offline: MemberOutcome = { state: 'skipped', reason: 'offline at apply: refused', touched: false };
    expect(nextSetStep(members, order, { applies: [offline], undos: [] })).toEqual({
      kind: 'end',
      state: 'skipped',
      reason: 'offline at apply: refused',
      changed: [],
    });
    expect(nextSetStep(members, order, { applies: [failed('exit 1')], undos: [] })).toEqual({
      kind: 'end',
      state: 'failed',
      reason: 'exit 1',
      changed: [],
    });
  });

  it('a failure in the second member undoes it and then the first before the device is reported failed', () => {
    const applies = [applied, failed('apply exit 3')];
    expect(nextSetStep(members, order, { applies, undos: [] })).toEqual({ kind: 'undo', member: 1 });
    expect(nextSetStep(members, order, { applies, undos: [rolledBack] })).toEqual({ kind: 'undo', member: 0 });
    expect(nextSetStep(members, order, { applies, undos: [rolledBack, rolledBack] })).toEqual({
      kind: 'end',
      state: 'failed',
      reason: "motd r7 failed: apply exit 3; put back pkg r2: the device holds none of this rollout's profiles",
      changed: [],
    });
  });

  it('undoes nothing of a member that never ran, nor of one found in place', () => {
    const refused = failed('EnvelopeRejected: not signed', false);
    expect(undoPlan(order, [applied, refused], 1)).toEqual([0]);
    expect(undoPlan(order, [inPlace, failed('exit 1')], 1)).toEqual([1]);
    expect(nextSetStep(members, order, { applies: [inPlace, refused], undos: [] })).toEqual({
      kind: 'end',
      state: 'failed',
      reason:
        "motd r7 failed: EnvelopeRejected: not signed; nothing else was changed: the device holds none of this rollout's profiles",
      changed: [],
    });
  });

  it('an undo that fails ends the device rollback-failed, naming what it may still hold, and undoes nothing below it', () => {
    const applies = [applied, failed('apply exit 3')];
    const broken: MemberOutcome = { state: 'rollback-failed', reason: 'ssh: connection reset', touched: true };
    expect(nextSetStep(members, order, { applies, undos: [broken] })).toEqual({
      kind: 'end',
      state: 'rollback-failed',
      reason:
        'motd r7 failed: apply exit 3; putting motd back to r6 failed: ssh: connection reset; the device may still hold motd r7, pkg r3',
      changed: [0, 1],
    });
    expect(nextSetStep(members, order, { applies, undos: [rolledBack, broken] })).toEqual({
      kind: 'end',
      state: 'rollback-failed',
      reason:
        'motd r7 failed: apply exit 3; putting pkg back to r2 failed: ssh: connection reset; the device may still hold pkg r3',
      changed: [0],
    });
  });

  it('in a set of three, a failure in the third undoes the second, then the first', () => {
    const three = setMembers({ ...spec, also: [...spec.also, { profile: 'app', fromRevision: 1, toRevision: 2 }] });
    const o = applyOrder(3, false);
    const applies = [applied, applied, failed('exit 1')];
    const steps: number[] = [];
    const undos: MemberOutcome[] = [];
    for (let step = nextSetStep(three, o, { applies, undos }); step.kind === 'undo'; ) {
      steps.push(step.member);
      undos.push(rolledBack);
      step = nextSetStep(three, o, { applies, undos });
    }
    expect(steps).toEqual([2, 1, 0]);
  });
});

describe('revert, compensation, floors and locks of a set', () => {
  it("a revert swaps each member's revisions and applies them in the reverse order", () => {
    expect(revertMembers(members)).toEqual([
      { profile: 'pkg', fromRevision: 3, toRevision: 2 },
      { profile: 'motd', fromRevision: 7, toRevision: 6 },
    ]);
    const reverse = applyOrder(2, true);
    expect(reverse).toEqual([1, 0]);
    expect(setLabel(revertMembers(members), reverse)).toBe('motd r7 → r6, then pkg r3 → r2');
    expect(nextSetStep(revertMembers(members), reverse, { applies: [], undos: [] })).toEqual({
      kind: 'apply',
      member: 1,
    });
  });

  it('compensation puts back the last member first, each over the devices that hold it, and spares one whose undo failed', () => {
    const changed = new Map<string, number[]>([
      ['edge-01', [0, 1]],
      ['edge-02', [1]],
      ['edge-03', [0, 1]],
    ]);
    const passes = compensationPasses(order, changed);
    expect(passes).toEqual([
      { member: 1, devices: ['edge-01', 'edge-02', 'edge-03'] },
      { member: 0, devices: ['edge-01', 'edge-03'] },
    ]);
    expect(compensationDevices(passes[1]!, new Set(['edge-03']))).toEqual(['edge-01']);
    expect(compensationPasses(order, new Map([['edge-01', []]]))).toEqual([]);
  });

  it("each member's floor intent is the single-profile one with its own revisions", () => {
    const ctx = { rollout: 'rollout:pkg:1', run: 'run-1', revertWindowMs: 3_600_000 };
    expect(memberFloor('apply', members[1]!, ctx)).toEqual({
      rollout: 'rollout:pkg:1',
      run: 'run-1',
      raise: { from: 6, windowMs: 3_600_000 },
    });
    expect(memberFloor('rollback', members[1]!, ctx)).toEqual({
      rollout: 'rollout:pkg:1',
      run: 'run-1',
      below: { kind: 'compensation', rollout: 'rollout:pkg:1', run: 'run-1' },
    });
    const reverts = { rolloutId: 'rollout:pkg:1', runId: 'run-1', closedAt: 5 };
    expect(memberFloor('apply', revertMembers(members)[1]!, { rollout: 'r2', run: 'x', reverts })).toEqual({
      rollout: 'r2',
      run: 'x',
      raise: { from: 6, windowMs: 0 },
      below: { kind: 'revert', rollout: 'rollout:pkg:1', run: 'run-1', closedAt: 5 },
    });
    expect(memberFloor('apply', members[0]!, { rollout: 'r', run: 'x' }).raise).toEqual({
      from: 2,
      windowMs: 86_400_000,
    });
  });

  it("holds every member's lock: the main one first, then the others by name", () => {
    const m = setMembers({
      ...main,
      also: [
        { profile: 'zeta', fromRevision: 1, toRevision: 2 },
        { profile: 'alpha', fromRevision: 1, toRevision: 2 },
      ],
    });
    expect(setLockIds(m)).toEqual(['profile-lock:pkg', 'profile-lock:alpha', 'profile-lock:zeta']);
    expect(setLockIds(setMembers(main))).toEqual(['profile-lock:pkg']);
  });
});

describe('the scopes of a set', () => {
  it('refuses an also profile whose scope leaves out a device of the main one, naming the field, the profile and the devices', () => {
    const ids = ['edge-01', 'edge-02', 'edge-03', 'edge-04', 'edge-05', 'edge-06', 'edge-07'];
    expect(alsoScopeProblems(spec, ids, [new Set(ids)])).toEqual([]);
    expect(alsoScopeProblems(spec, ids, [new Set([...ids, 'lab-01'])])).toEqual([]);
    expect(alsoScopeProblems(spec, ids, [new Set(['edge-07'])])).toEqual([
      {
        path: 'rollout.also[0].profile',
        value: 'motd',
        message:
          'its scope leaves out 6 device(s) of profile "pkg"\'s scope (edge-01, edge-02, edge-03, edge-04, edge-05 and 1 more): they would get pkg without motd; widen its scope or narrow the main one\'s',
      },
    ]);
  });
});

describe('what the device runner settles a set with', () => {
  const first: DeviceOutcome = { state: 'applied', touched: true, counted: 'succeeded', readsGate: true };
  const required = { bestEffort: false };

  it('a device with every member in place counts once, succeeded, and stays in compensation while it changed any', () => {
    const end = nextSetStep(members, order, { applies: [applied, applied], undos: [] }) as SetEnd;
    expect(setOutcome(first, end, 2, required)).toEqual({
      state: 'applied',
      touched: true,
      counted: 'succeeded',
      readsGate: true,
    });
    const nothingChanged = nextSetStep(members, order, { applies: [inPlace, inPlace], undos: [] }) as SetEnd;
    expect(setOutcome(first, nothingChanged, 2, required)).toMatchObject({ touched: false, counted: 'succeeded' });
  });

  it('a device whose first member did not go in ends with that answer as it would alone (a waiting one retries)', () => {
    const waiting: DeviceOutcome = {
      state: 'waiting',
      reason: 'waiting for driver r1',
      touched: false,
      readsGate: false,
      retryAfterMs: 15_000,
    };
    const end = nextSetStep(members, order, { applies: [{ state: 'waiting', touched: false }], undos: [] }) as SetEnd;
    expect(setOutcome(waiting, end, 1, required)).toBe(waiting);
  });

  it('a device put back after a later failure counts failed and is out of compensation; one whose undo failed stays in it', () => {
    const applies = [applied, failed('apply exit 3')];
    const undone = nextSetStep(members, order, { applies, undos: [rolledBack, rolledBack] }) as SetEnd;
    expect(setOutcome(first, undone, 2, required)).toMatchObject({
      state: 'failed',
      touched: false,
      counted: 'failed',
    });
    const broken = nextSetStep(members, order, {
      applies,
      undos: [rolledBack, { state: 'rollback-failed', reason: 'exit 1', touched: true }],
    }) as SetEnd;
    expect(setOutcome(first, broken, 2, required)).toMatchObject({
      state: 'rollback-failed',
      touched: true,
      counted: 'failed',
    });
    expect(setOutcome(first, undone, 2, { bestEffort: true })).not.toHaveProperty('counted');
  });

  it('says which member a busy device is on, in apply order', () => {
    expect(memberBusyReason({ kind: 'apply', member: 1 }, members, order)).toBe('applying motd r7 (2 of 2)');
    expect(memberBusyReason({ kind: 'apply', member: 1 }, revertMembers(members), applyOrder(2, true))).toBe(
      'applying motd r6 (1 of 2)',
    );
    expect(memberBusyReason({ kind: 'undo', member: 0 }, members, order)).toBe('putting back pkg r2');
  });

  it('a cancel mid-set leaves the members started, the one in flight included, to compensation', () => {
    expect(changedSoFar(order, { applies: [], undos: [] })).toEqual([0]);
    expect(changedSoFar(order, { applies: [applied], undos: [] })).toEqual([0, 1]);
    expect(changedSoFar(order, { applies: [inPlace], undos: [] })).toEqual([1]);
    expect(changedSoFar(applyOrder(2, true), { applies: [applied], undos: [] })).toEqual([1, 0]);
    expect(changedSoFar(applyOrder(3, false), { applies: [inPlace], undos: [] })).toEqual([1]);
    expect(changedSoFar(applyOrder(3, false), { applies: [applied, applied, applied], undos: [] })).toEqual([0, 1, 2]);
    // Cancelled while putting back after motd failed: motd was put back, pkg's undo was in flight.
    expect(changedSoFar(order, { applies: [applied, failed('exit 3')], undos: [rolledBack] })).toEqual([0]);
    expect(changedSoFar(order, { applies: [applied, failed('exit 3')], undos: [] })).toEqual([0, 1]);
    expect(changedSoFar(order, { applies: [failed('exit 1')], undos: [] })).toEqual([0]);
  });
});
