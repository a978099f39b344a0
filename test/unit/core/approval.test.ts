import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import {
  decideApproval,
  decideStarter,
  parseApprovers,
  signStatement,
  verifyStatement,
  type OperatorStatement,
  type Verified,
} from '../../../core/approval';
import { toBase64 } from '../../../core/bytes';
import { keyPairFromSeed, pinOf, type KeyPair } from '../../../core/signing';
import { parseRolloutSpec } from '../../../core/spec';

/** The two-person rule's decisions (core/approval.ts), each against the case it exists for. */

const key = (): KeyPair => keyPairFromSeed(new Uint8Array(randomBytes(32)));
const alice = key();
const bob = key();
const carol = key();
const board = key();
const stranger = key();
const NOW = Date.parse('2026-12-08T01:00:00.000Z');
const approvers = parseApprovers(
  {
    keys: [
      { ...pinOf(alice, 'alice'), role: 'approver' },
      { ...pinOf(bob, 'bob') },
      { ...pinOf(carol, 'carol'), role: 'operator' },
      { ...pinOf(board, 'board-1'), role: 'board' },
    ],
  },
  'approvers.yaml',
);
const EXPECT = { action: 'approve' as const, rolloutId: 'rollout:demo:1', runId: 'run-1', phase: 'bulk' };

function statement(extra: Partial<OperatorStatement> = {}): OperatorStatement {
  return {
    type: 'wavegate.operator-statement',
    action: 'approve',
    rolloutId: 'rollout:demo:1',
    runId: 'run-1',
    phase: 'bulk',
    nonce: randomBytes(16).toString('hex'),
    at: new Date(NOW - 60_000).toISOString(),
    ...extra,
  };
}
const verify = (pair: KeyPair, extra: Partial<OperatorStatement> = {}) =>
  verifyStatement(signStatement(statement(extra), pair), approvers, EXPECT, NOW);
const whyOf = (v: Verified) => (v.ok ? '' : v.why);

describe('verifyStatement: who a signed statement proves', () => {
  it('names the pinned key holder (approver by default) and a board-vouched operator with the role the board gave', () => {
    expect(verify(bob)).toMatchObject({ ok: true, identity: { name: 'bob', role: 'approver', via: 'key bob' } });
    expect(verify(board, { operator: 'dave', role: 'approver' })).toMatchObject({
      ok: true,
      identity: { name: 'dave', role: 'approver', via: 'board board-1' },
    });
  });

  it('proves nobody with an unpinned key, a forged signature, another run, phase or action, or an old statement', () => {
    expect(whyOf(verify(stranger))).toMatch(
      /^not authenticated: key sha256\/.* is not pinned in this profile's approvers.yaml/,
    );
    const forged = { ...signStatement(statement(), stranger), kid: alice.kid };
    expect(whyOf(verifyStatement(forged, approvers, EXPECT, NOW))).toMatch(/signature by alice's key does not verify/);
    expect(whyOf(verify(alice, { runId: 'run-0' }))).toMatch(/is for run "run-0", not this run \(run-1\)/);
    expect(whyOf(verify(alice, { phase: 'canary' }))).toMatch(
      /approves phase "canary", not the one waiting \("bulk"\)/,
    );
    expect(whyOf(verify(alice, { action: 'start' }))).toMatch(/is to start, not to approve/);
    expect(whyOf(verify(alice, { at: new Date(NOW - 16 * 60_000).toISOString() }))).toMatch(/more than 15 minutes ago/);
    expect(whyOf(verifyStatement(undefined, approvers, EXPECT, NOW))).toMatch(/no signed statement came with it/);
    expect(whyOf(verifyStatement({ body: 'x' }, approvers, EXPECT, NOW))).toMatch(/malformed/);
  });

  it("refuses a person's key speaking for another name, and a board statement naming no operator", () => {
    expect(whyOf(verify(alice, { operator: 'bob', role: 'approver' }))).toMatch(/a key speaks for its own name/);
    expect(whyOf(verify(board))).toMatch(/board board-1's statement names no operator/);
  });

  it('refuses an approvers file whose key does not match its kid', () => {
    expect(() =>
      parseApprovers({ keys: [{ name: 'x', kid: alice.kid, publicKey: toBase64(bob.publicKey) }] }, 'a.yaml'),
    ).toThrow(/keys\[0\]\.kid: does not match its publicKey/);
  });
});

describe('decideApproval: what counts toward a waiting phase', () => {
  const rule = { required: 2, notBy: 'starter' as const };
  const state = { starter: 'alice', approvedBy: [] as string[], usedNonces: new Set<string>() };

  it("refuses the starter's own approval, an operator's, and an unauthenticated one, each saying why", () => {
    expect(decideApproval(rule, state, verify(alice), 'bulk')).toEqual({
      accept: false,
      why: 'alice started this rollout, and approval.notBy: starter',
    });
    expect(decideApproval(rule, state, verify(carol), 'bulk')).toEqual({
      accept: false,
      why: 'carol is an operator, not an approver',
    });
    expect(decideApproval(rule, state, verify(stranger), 'bulk')).toMatchObject({ accept: false });
  });

  it('counts the same approver once, and goes on at the second distinct one', () => {
    const first = decideApproval(rule, state, verify(bob), 'bulk');
    expect(first).toEqual({ accept: true, count: 1, required: 2, done: false });
    const after = { ...state, approvedBy: ['bob'] };
    expect(decideApproval(rule, after, verify(bob), 'bulk')).toEqual({
      accept: false,
      why: 'bob already approved phase "bulk" (1 of 2); the same person twice counts once',
    });
    expect(decideApproval(rule, after, verify(board, { operator: 'dave', role: 'approver' }), 'bulk')).toEqual({
      accept: true,
      count: 2,
      required: 2,
      done: true,
    });
  });

  it('refuses a statement used already, and lets the starter approve without notBy', () => {
    const v = verify(bob);
    const nonce = v.ok ? v.identity.nonce : '';
    expect(decideApproval(rule, { ...state, usedNonces: new Set([nonce]) }, v, 'bulk')).toMatchObject({
      accept: false,
      why: expect.stringMatching(/already used/),
    });
    expect(decideApproval({ required: 1 }, state, verify(alice), 'bulk')).toMatchObject({ accept: true, done: true });
  });
});

describe('decideStarter: who started, as the rule takes it', () => {
  const start = (pair: KeyPair, extra: Partial<OperatorStatement> = {}) =>
    verifyStatement(
      signStatement(statement({ action: 'start', runId: undefined, phase: undefined, ...extra }), pair),
      approvers,
      { action: 'start', rolloutId: 'rollout:demo:1' },
      NOW,
    );

  it('refuses to start under notBy: starter without an authenticated starter, and names a verified one', () => {
    expect(decideStarter({ required: 1, notBy: 'starter' }, start(stranger))).toMatchObject({
      ok: false,
      why: expect.stringMatching(/^approval.notBy: starter needs an authenticated starter .*not pinned/),
    });
    expect(decideStarter({ required: 1 }, start(stranger))).toEqual({ ok: true });
    expect(decideStarter({ required: 1, notBy: 'starter' }, start(carol))).toMatchObject({
      ok: true,
      starter: { name: 'carol', role: 'operator' },
    });
  });
});

describe('the spec field approval', () => {
  const spec = (extra: Record<string, unknown>) => ({
    rollout: {
      profile: 'demo',
      fromRevision: 1,
      toRevision: 2,
      phases: [{ canary: 1 }, { bulk: 'remainder' }],
      ...extra,
    },
  });

  it('is taken with a manual gate, and refused without one or above 10 approvals', () => {
    expect(
      parseRolloutSpec(spec({ gate: 'manual', approval: { required: 2, notBy: 'starter' } }), 's').approval,
    ).toEqual({
      required: 2,
      notBy: 'starter',
    });
    expect(() => parseRolloutSpec(spec({ approval: { required: 2 } }), 's')).toThrow(
      /approval: applies at manual gates/,
    );
    expect(() => parseRolloutSpec(spec({ gate: 'manual', approval: { required: 11 } }), 's')).toThrow(
      /approval.required: must be at most 10/,
    );
  });
});
