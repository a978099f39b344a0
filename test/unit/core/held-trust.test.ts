import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import {
  freshnessFor,
  freshnessProblem,
  heldTrustOf,
  heldTrustRecord,
  heldVersionsOf,
  parseHeldVersions,
  reopenHeldTrust,
  takeTrustNews,
  type HeldTrust,
} from '../../../core/held-trust';
import { REVOCATIONS_TYPE } from '../../../core/revocation';
import { signDocument } from '../../../core/signed-document';
import { bodyDigest, keyPairFromSeed, parseTrust, pinOf, signRevision, verifyEnvelope } from '../../../core/signing';
import { timestampContent } from '../../../core/timestamp';
import { ROOT_TYPE } from '../../../core/trust-root';

const key = () => keyPairFromSeed(randomBytes(32));
const [a, b, c, t, stranger] = [key(), key(), key(), key(), key()];
const NOW = Date.parse('2030-01-01T00:00:00Z');
const anchor = parseTrust({ threshold: 1, pins: [pinOf(a)] }, 'trust.yaml');
const profile = 'p';

const root = (version: number, pins: ReturnType<typeof key>[], signers: ReturnType<typeof key>[], extra = {}) =>
  signDocument(
    {
      type: ROOT_TYPE,
      profile,
      version,
      threshold: 1,
      pins: pins.map((k) => pinOf(k)),
      timestamp: { threshold: 1, pins: [pinOf(t)] },
      issuedAt: new Date(NOW).toISOString(),
      ...extra,
    },
    signers,
  );
// v1: a -> b (a removed), signed by a (v0's) and b (its own); v2: b -> c.
const v1 = root(1, [b], [a, b], { removes: [a.kid] });
const v2 = root(2, [c], [b, c], { removes: [b.kid] });
const list = (version: number, revisions: number[], signers = [c]) =>
  signDocument(
    {
      type: REVOCATIONS_TYPE,
      profile,
      version,
      revisions: revisions.map((revision) => ({ revision, reason: 'bad release' })),
      keys: [],
      issuedAt: new Date(NOW).toISOString(),
    },
    signers,
  );
const revision = (n: number, signer = c) =>
  signRevision({ profile, revision: n, apply: 'true', verify: 'true', payload: [], risk: 'safe' }, signer, {
    now: NOW,
  });
const stamp = (over: Partial<Parameters<typeof timestampContent>[0]> = {}, signer = t) =>
  signDocument(
    timestampContent({
      device: 'dev-a',
      profile,
      root: 2,
      revocations: 1,
      desired: null,
      now: NOW,
      expiryMs: 60_000,
      ...over,
    }),
    [signer],
  );
const take = (held: HeldTrust, news: unknown, now = NOW) => takeTrustNews(held, news, { anchor, device: 'dev-a', now });

describe('held trust: news taken only when it verifies from what is held', () => {
  it('walks roots from the pins file, takes the list and the timestamp; the pins are the newest root with the list applied', () => {
    const r3 = revision(3);
    const out = take({ profile }, { roots: [v2, v1], revocations: list(1, [3]), timestamp: stamp() });
    expect(out.refused).toEqual([]);
    expect(heldVersionsOf(out.held)).toEqual({ root: 2, revocations: 1 });
    const trust = heldTrustOf(out.held, anchor);
    expect([...trust.keys.keys()]).toEqual([c.kid]);
    expect(verifyEnvelope(r3, trust, { now: NOW })).toMatchObject({ ok: false, reason: 'REVOKED' });
    expect(verifyEnvelope(revision(4), trust, { now: NOW }).ok).toBe(true);
    expect(verifyEnvelope(revision(4, a), trust, { now: NOW })).toMatchObject({ ok: false, reason: 'UNPINNED_KEY' });
  });

  it('refuses and names: a root below threshold, a lower root, an endless feed, a list rollback, another device, a replay', () => {
    const forged = root(1, [b], [b]); // not signed by v0's key a
    expect(take({ profile }, { roots: [forged] }).refused[0]).toMatchObject({ reason: 'UNPINNED_KEY' });
    const at2 = take({ profile }, { roots: [v1, v2], revocations: list(2, [3]), timestamp: stamp({ revocations: 2 }) });
    expect(at2.refused).toEqual([]);
    const held = at2.held;
    expect(take(held, { roots: [v1] }).refused[0]).toMatchObject({ reason: 'ROOT_ROLLBACK' });
    const endless = Array.from({ length: 65 }, (_, i) => root(i + 3, [c], [c]));
    expect(take(held, { roots: endless }).refused[0]!.message).toContain('at most 64');
    expect(take(held, { revocations: list(1, []) }).refused[0]).toMatchObject({ reason: 'METADATA_ROLLBACK' });
    expect(take(held, { timestamp: stamp({ device: 'dev-b', revocations: 2 }) }).refused[0]).toMatchObject({
      reason: 'WRONG_SUBJECT',
    });
    const older = stamp({ revocations: 2, now: NOW - 10_000 });
    expect(take(held, { timestamp: older }).refused[0]).toMatchObject({ reason: 'METADATA_ROLLBACK' });
    expect(take(held, { timestamp: stamp({ revocations: 2 }, stranger) }).refused[0]).toMatchObject({
      reason: 'UNPINNED_KEY',
    });
    // Each refusal kept what was held: nothing drops.
    for (const news of [{ roots: [v1] }, { revocations: list(1, []) }, { timestamp: older }])
      expect(heldVersionsOf(take(held, news).held)).toEqual({ root: 2, revocations: 2 });
  });

  it("a gateway's problem with its own copy is a refusal, whatever else comes", () => {
    const out = take({ profile }, { problem: 'root/3.json: 2097152 bytes, at most 1048576' });
    expect(out.refused).toEqual([{ reason: 'TRUST_UNVERIFIED', message: expect.stringContaining('2097152 bytes') }]);
    expect(out.changed).toBe(false);
  });

  it('a timestamp naming versions not held yet is not taken; a bad root stops the walk after the good ones', () => {
    const out = take({ profile }, { roots: [v1, root(2, [c], [c])], timestamp: stamp() });
    expect(heldVersionsOf(out.held).root).toBe(1);
    expect(out.refused.map((r) => r.reason)).toEqual(['UNPINNED_KEY', 'ROOT_GAP']);
    expect(out.held.timestamp).toBeUndefined();
  });

  it('freshness: required with a timestamp role, stale without one or once expired, and names the desired envelope', () => {
    expect(freshnessFor({ profile }, NOW)).toEqual({ required: false });
    const r5 = revision(5);
    const desired = { revision: 5, digest: bodyDigest(r5)! };
    const noStamp = take({ profile }, { roots: [v1, v2] }).held;
    expect(freshnessProblem(noStamp, { revision: 5, envelope: r5 }, NOW)).toContain('no timestamp received yet');
    // An unsigned entry is not held back: it is refused UNSIGNED by the entry's own checks.
    expect(freshnessProblem(noStamp, { revision: 5 }, NOW)).toBeUndefined();
    const held = take({ profile }, { roots: [v1, v2], timestamp: stamp({ revocations: 0, desired }) }).held;
    expect(freshnessProblem(held, { revision: 5, envelope: r5 }, NOW + 1_000)).toBeUndefined();
    expect(freshnessProblem(held, { revision: 6, envelope: revision(6) }, NOW + 1_000)).toContain('names r5');
    expect(freshnessProblem(held, { revision: 5, envelope: r5 }, NOW + 61_000)).toContain('expired at');
  });

  it('a record reads back as it was written; one of another profile, or with a root not signed by its own keys, does not', () => {
    const held = take({ profile }, { roots: [v1, v2], revocations: list(1, [3]), timestamp: stamp() }).held;
    const record = JSON.parse(JSON.stringify(heldTrustRecord(held)));
    const back = reopenHeldTrust(record, profile);
    expect(typeof back === 'string' ? back : heldVersionsOf(back)).toEqual({ root: 2, revocations: 1 });
    expect(reopenHeldTrust(record, 'q')).toContain('profile');
    expect(reopenHeldTrust({ ...record, root: root(2, [c], [b]) }, profile)).toContain('root:');
    expect(reopenHeldTrust({ ...record, extra: 1 }, profile)).toContain('must hold exactly');
  });

  it("the gateway's reading of a sync's held versions: bounded, named", () => {
    expect(parseHeldVersions({ p: { root: 2, revocations: 0 } })).toEqual({ p: { root: 2, revocations: 0 } });
    expect(parseHeldVersions({ p: { root: -1, revocations: 0 } })).toContain('held.p');
    expect(parseHeldVersions({ '../x': { root: 0, revocations: 0 } })).toContain('not a profile name');
    const many = Object.fromEntries(Array.from({ length: 65 }, (_, i) => [`p${i}`, { root: 0, revocations: 0 }]));
    expect(parseHeldVersions(many)).toContain('at most 64');
  });
});
