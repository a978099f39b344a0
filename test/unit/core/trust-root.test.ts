import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { signDocument } from '../../../core/signed-document';
import { keyPairFromSeed, parseTrust, pinOf, type KeyPair } from '../../../core/signing';
import { nextRootContent, rootTally, rootTallyText } from '../../../core/trust-admin';
import {
  MAX_ROOT_STEPS,
  ROOT_TYPE,
  verifyNextRoot,
  walkRoots,
  type RootAnchor,
  type RootContent,
  type TrustRoot,
} from '../../../core/trust-root';

/**
 * core/trust-root.ts: version N+1 counts only when a threshold of version N's keys AND of its own signed it, walked
 * one version at a time from trust.yaml (version 0). Every refusal is a value naming its reason and the version.
 */
const key = (): KeyPair => keyPairFromSeed(randomBytes(32));
const [A, B, C, D] = [key(), key(), key(), key()] as [KeyPair, KeyPair, KeyPair, KeyPair];
const PROFILE = 'edge';
const NOW = Date.parse('2026-06-01T00:00:00Z');

const v0 = (keys: KeyPair[], threshold: number): RootAnchor => ({
  version: 0,
  trust: parseTrust({ threshold, pins: keys.map((k) => pinOf(k)) }, 'trust.yaml'),
});

/** Root content after `from` for `keys`/`threshold`, as `trust rotate` drafts it (removes filled). */
const content = (from: RootAnchor, keys: KeyPair[], threshold: number): RootContent =>
  nextRootContent({ profile: PROFILE, from, next: { threshold, pins: keys.map((k) => pinOf(k)) }, now: NOW });

function next(from: RootAnchor, envelope: unknown): TrustRoot {
  const root = verifyNextRoot(from, envelope, { profile: PROFILE });
  if (!('content' in root)) throw new Error(`${root.reason}: ${root.message}`);
  return root;
}

describe('verifyNextRoot', () => {
  const start = v0([A, B], 2);

  it('accepts a signer replaced (A,B -> A,C, threshold 2) signed by A,B (the old) and A,C (the new): C is pinned by v1', () => {
    const body = content(start, [A, C], 2);
    expect(body.removes).toEqual([B.kid]);
    const v1 = next(start, signDocument(body, [A, B, C]));
    expect(v1.content.version).toBe(1);
    expect([...v1.trust.keys.keys()].sort()).toEqual([A.kid, C.kid].sort());
    expect(v1.trust.root).toEqual({ version: 1, digest: v1.digest });
  });

  it('refuses a root below the previous threshold (by the old keys): BELOW_THRESHOLD naming v0', () => {
    const body = content(start, [A, C], 2);
    const envelope = signDocument(body, [A, C]);
    const refused = verifyNextRoot(start, envelope, { profile: PROFILE });
    expect(refused).toMatchObject({ ok: false, reason: 'BELOW_THRESHOLD' });
    expect((refused as { message: string }).message).toContain("v1 by v0's keys");
    expect(rootTallyText(rootTally(start, envelope, body))).toBe("1 of 2 of v0's keys, 2 of 2 of its own");
  });

  it('refuses a root below its own threshold (the new keys must show they hold it): BELOW_THRESHOLD "by its own keys"', () => {
    const body = content(start, [A, C], 2);
    const envelope = signDocument(body, [A, B]);
    const refused = verifyNextRoot(start, envelope, { profile: PROFILE });
    expect(refused).toMatchObject({ ok: false, reason: 'BELOW_THRESHOLD' });
    expect((refused as { message: string }).message).toContain('by its own keys');
    expect(rootTallyText(rootTally(start, envelope, body))).toBe("2 of 2 of v0's keys, 1 of 2 of its own");
  });

  it('refuses a root that drops a key without naming it in removes', () => {
    const body = { ...content(start, [A, C], 2) };
    delete (body as { removes?: string[] }).removes;
    const refused = verifyNextRoot(start, signDocument(body, [A, B, C]), { profile: PROFILE });
    expect(refused).toMatchObject({ ok: false, reason: 'MALFORMED' });
    expect((refused as { message: string }).message).toContain(`drops ${B.kid} without naming it in "removes"`);
  });

  it('refuses a root of another profile, and a document of another type', () => {
    const other = { ...content(start, [A, B], 2), profile: 'other' };
    expect(verifyNextRoot(start, signDocument(other, [A, B]), { profile: PROFILE })).toMatchObject({ ok: false });
    const list = {
      type: 'wavegate/revocations',
      profile: PROFILE,
      version: 1,
      revisions: [],
      keys: [],
      issuedAt: '2026-06-01T00:00:00Z',
    };
    expect(verifyNextRoot(start, signDocument(list, [A, B]), { profile: PROFILE })).toMatchObject({
      ok: false,
      reason: 'MALFORMED',
    });
  });

  it('refuses a signature by a revoked key (it never counts toward either threshold)', () => {
    const body = content(start, [A, B], 2);
    const refused = verifyNextRoot(start, signDocument(body, [A, B]), {
      profile: PROFILE,
      revokedKeys: new Set([B.kid]),
    });
    expect(refused).toMatchObject({ ok: false, reason: 'REVOKED_KEY' });
  });

  it('refuses a version that is not one above: ROOT_ROLLBACK for the same or lower, ROOT_GAP for a skip', () => {
    const v1 = next(start, signDocument(content(start, [A, B], 2), [A, B]));
    const again = verifyNextRoot(v1, v1.envelope, { profile: PROFILE });
    expect(again).toMatchObject({ ok: false, reason: 'ROOT_ROLLBACK' });
    const skipping = { ...content(v1, [A, B], 2), version: 3 };
    expect(verifyNextRoot(v1, signDocument(skipping, [A, B]), { profile: PROFILE })).toMatchObject({
      ok: false,
      reason: 'ROOT_GAP',
    });
  });
});

describe('walkRoots', () => {
  const start = v0([A, B], 2);
  /** v1..vn over the same keys A,B (threshold 2), each signed by both. */
  function chain(n: number): unknown[] {
    const out: unknown[] = [];
    let from: RootAnchor = start;
    for (let i = 1; i <= n; i++) {
      const root = next(from, signDocument(content(from, [A, B], 2), [A, B]));
      out.push(root.envelope);
      from = root;
    }
    return out;
  }

  it('walks trust.yaml -> v1 (A,B) -> v2 (A,C) -> v3 (C,D) in any order, each by the keys before it and its own', () => {
    const v1 = next(start, signDocument(content(start, [A, B], 2), [A, B]));
    const v2 = next(v1, signDocument(content(v1, [A, C], 2), [A, B, C]));
    const v3 = next(v2, signDocument(content(v2, [C, D], 2), [A, C, D]));
    const walk = walkRoots(start, [v3.envelope, v1.envelope, v2.envelope, v1.envelope], { profile: PROFILE });
    expect(walk.ok).toBe(true);
    const reached = walk.root as TrustRoot;
    expect(reached.content.version).toBe(3);
    expect([...reached.trust.keys.keys()].sort()).toEqual([C.kid, D.kid].sort());
    // From v1 on, v1 itself is not news (ignored), and the walk goes on from there.
    expect(walkRoots(v1, [v1.envelope, v2.envelope, v3.envelope], { profile: PROFILE })).toMatchObject({
      ok: true,
      steps: 2,
    });
  });

  it('refuses a gap, naming the missing version, and keeps the root reached before it', () => {
    const [v1, , v3] = chain(3);
    const walk = walkRoots(start, [v1, v3], { profile: PROFILE });
    expect(walk).toMatchObject({ ok: false, reason: 'ROOT_GAP' });
    expect((walk as { message: string }).message).toContain('v2 is missing');
    expect((walk.root as TrustRoot).content.version).toBe(1);
  });

  it('refuses a fork: two different roots claiming one version, both refused', () => {
    const body = content(start, [A, B], 2);
    const one = signDocument(body, [A, B]);
    const other = signDocument({ ...body, note: 'the other one' }, [A, B]);
    const walk = walkRoots(start, [one, other], { profile: PROFILE });
    expect(walk).toMatchObject({ ok: false, reason: 'ROOT_FORK' });
    expect(walk.root).toBe(start);
  });

  it('never goes back: a verifier at v2 offered v1 again stays at v2 (what it holds is not news)', () => {
    const roots = chain(2);
    const v2 = walkRoots(start, roots, { profile: PROFILE });
    expect(v2.ok).toBe(true);
    const again = walkRoots(v2.root, [roots[0]], { profile: PROFILE });
    expect(again).toMatchObject({ ok: true, steps: 0 });
    expect((again.root as TrustRoot).content.version).toBe(2);
  });

  it(`refuses an endless feed: more than ${MAX_ROOT_STEPS} versions at once, before verifying any`, () => {
    const roots = chain(MAX_ROOT_STEPS + 1);
    const walk = walkRoots(start, roots, { profile: PROFILE });
    expect(walk).toMatchObject({ ok: false, reason: 'ROOT_GAP' });
    expect((walk as { message: string }).message).toContain(
      `${MAX_ROOT_STEPS + 1} trust root versions offered at once`,
    );
    expect(walk.root).toBe(start);
    expect(walkRoots(start, roots.slice(0, MAX_ROOT_STEPS), { profile: PROFILE })).toMatchObject({
      ok: true,
      steps: MAX_ROOT_STEPS,
    });
  });

  it('stops at the first root that does not verify (below threshold), never stepping over it', () => {
    const [v1] = chain(1);
    const from1 = next(start, v1);
    const badV2 = signDocument(content(from1, [A, B], 2), [A]);
    const v3 = signDocument({ ...content(from1, [A, B], 2), version: 3 }, [A, B]);
    const walk = walkRoots(start, [v1, badV2, v3], { profile: PROFILE });
    expect(walk).toMatchObject({ ok: false, reason: 'BELOW_THRESHOLD' });
    expect((walk.root as TrustRoot).content.version).toBe(1);
  });

  it('refuses an envelope whose version cannot be read', () => {
    expect(walkRoots(start, [{ body: 'not base64 json', signatures: [] }], { profile: PROFILE })).toMatchObject({
      ok: false,
      reason: 'MALFORMED',
    });
    expect(ROOT_TYPE).toBe('wavegate/root');
  });
});
