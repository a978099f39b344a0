import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { WavegateError } from '../../../core/errors';
import { revocationOf, verifyRevocations, withRevocations, type RevocationList } from '../../../core/revocation';
import { signDocument } from '../../../core/signed-document';
import {
  bodyDigest,
  keyPairFromSeed,
  parseTrust,
  pinOf,
  signRevision,
  cosignEnvelope,
  verifyEnvelope,
  type KeyPair,
} from '../../../core/signing';
import type { Revision } from '../../../core/revision';
import { nextRevocationsContent } from '../../../core/trust-admin';

/**
 * core/revocation.ts: a revocation list signed by a threshold of the current root, versioned (a lower version is a
 * rollback, the same version with other content a fork); a revoked revision never verifies (REVOKED), a revoked
 * key's signature never counts (REVOKED_KEY). And the lists `trust revoke` drafts (core/trust-admin.ts).
 */
const key = (): KeyPair => keyPairFromSeed(randomBytes(32));
const [A, B, C] = [key(), key(), key()] as [KeyPair, KeyPair, KeyPair];
const PROFILE = 'edge';
const NOW = Date.now();
const trust = parseTrust({ threshold: 2, pins: [A, B, C].map((k) => pinOf(k)) }, 'trust.yaml');

function list(
  change: Parameters<typeof nextRevocationsContent>[0]['change'],
  current?: RevocationList,
  reason = 'bad',
) {
  return nextRevocationsContent({
    profile: PROFILE,
    ...(current ? { current: current.content } : {}),
    change,
    reason,
    now: NOW,
  });
}

function verified(envelope: unknown, held?: RevocationList): RevocationList {
  const out = verifyRevocations(envelope, trust, {
    profile: PROFILE,
    ...(held ? { held: { version: held.content.version, digest: held.digest } } : {}),
  });
  if (!('content' in out)) throw new Error(`${out.reason}: ${out.message}`);
  return out;
}

const revision = (n: number): Revision => ({
  profile: PROFILE,
  revision: n,
  apply: 'true',
  verify: 'true',
  payload: [],
  risk: 'safe',
});

describe('verifyRevocations', () => {
  it('verifies a list signed by a threshold of the root and refuses one below it', () => {
    const body = list({ revision: 2 });
    expect(verified(signDocument(body, [A, B])).content.revisions).toEqual([{ revision: 2, reason: 'bad' }]);
    expect(verifyRevocations(signDocument(body, [A]), trust, { profile: PROFILE })).toMatchObject({
      ok: false,
      reason: 'BELOW_THRESHOLD',
    });
  });

  it('refuses a rollback to a lower version (METADATA_ROLLBACK) and a fork of the version held (ROOT_FORK)', () => {
    const v1 = verified(signDocument(list({ revision: 2 }), [A, B]));
    const v2 = verified(signDocument(list({ revision: 3 }, v1), [A, B]), v1);
    expect(v2.content.version).toBe(2);
    expect(v2.content.revisions.map((r) => r.revision)).toEqual([2, 3]);
    const old = signDocument(list({ revision: 2 }), [A, B]);
    expect(verifyRevocations(old, trust, { profile: PROFILE, held: { version: 2, digest: v2.digest } })).toMatchObject({
      ok: false,
      reason: 'METADATA_ROLLBACK',
    });
    const fork = signDocument({ ...list({ revision: 4 }, v1) }, [A, C]);
    expect(verifyRevocations(fork, trust, { profile: PROFILE, held: { version: 2, digest: v2.digest } })).toMatchObject(
      {
        ok: false,
        reason: 'ROOT_FORK',
      },
    );
  });

  it('refuses a list of another profile', () => {
    const other = { ...list({ revision: 2 }), profile: 'other' };
    expect(verifyRevocations(signDocument(other, [A, B]), trust, { profile: PROFILE })).toMatchObject({ ok: false });
  });

  it('a revoked revision never verifies (REVOKED, with the reason); by digest only that envelope', () => {
    const r2 = cosignEnvelope(signRevision(revision(2), A, { now: NOW }), B);
    const other2 = cosignEnvelope(signRevision({ ...revision(2), apply: 'echo other' }, A, { now: NOW }), B);
    const all = withRevocations(
      trust,
      verified(signDocument(list({ revision: 2 }, undefined, 'leaks memory'), [A, B])),
    );
    expect(verifyEnvelope(r2, all, { now: NOW })).toMatchObject({ ok: false, reason: 'REVOKED' });
    expect((verifyEnvelope(r2, all, { now: NOW }) as { message: string }).message).toContain('leaks memory');
    const one = withRevocations(trust, verified(signDocument(list({ revision: 2, digest: bodyDigest(r2)! }), [A, B])));
    expect(verifyEnvelope(r2, one, { now: NOW })).toMatchObject({ ok: false, reason: 'REVOKED' });
    expect(verifyEnvelope(other2, one, { now: NOW })).toMatchObject({ ok: true });
    expect(revocationOf(one.revoked, 2, bodyDigest(other2))).toBeUndefined();
    expect(revocationOf(one.revoked, 2, bodyDigest(r2))).toEqual({ revision: 2, reason: 'bad' });
    expect(revocationOf(one.revoked, 2)).toEqual({ revision: 2, reason: 'bad' });
    expect(revocationOf(one.revoked, 3)).toBeUndefined();
  });

  it("a revoked key's signature never counts (REVOKED_KEY), and the others still do", () => {
    const revoked = withRevocations(trust, verified(signDocument(list({ kid: B.kid }), [A, B])));
    const byAB = cosignEnvelope(signRevision(revision(3), A, { now: NOW }), B);
    const byAC = cosignEnvelope(signRevision(revision(3), A, { now: NOW }), C);
    expect(verifyEnvelope(byAB, revoked, { now: NOW })).toMatchObject({ ok: false, reason: 'REVOKED_KEY' });
    expect(verifyEnvelope(byAC, revoked, { now: NOW })).toMatchObject({ ok: true });
  });
});

describe('nextRevocationsContent (trust revoke)', () => {
  it('carries the current entries one version up, refuses a revocation twice, lifts one', () => {
    const v1 = verified(signDocument(list({ revision: 2 }), [A, B]));
    expect(() => list({ revision: 2 }, v1)).toThrow(WavegateError);
    try {
      list({ revision: 2 }, v1);
    } catch (err) {
      expect((err as WavegateError).code).toBe('CONFLICT');
      expect((err as WavegateError).message).toContain('--revision 2: already revoked in revocation list v1 (bad)');
    }
    const lifted = nextRevocationsContent({
      profile: PROFILE,
      current: v1.content,
      change: { revision: 2 },
      lift: true,
      now: NOW,
    });
    expect(lifted).toMatchObject({ version: 2, revisions: [], keys: [] });
    expect(() =>
      nextRevocationsContent({ profile: PROFILE, current: v1.content, change: { revision: 5 }, lift: true, now: NOW }),
    ).toThrow('--revision 5: not revoked (revocation list v1): nothing to lift');
  });

  it('refuses a reason that is not one line of visible text, naming --reason and the value', () => {
    expect(() => list({ revision: 2 }, undefined, 'two\nlines')).toThrow(
      /--reason: must be one line of visible text .*"two\\nlines"/,
    );
  });
});
