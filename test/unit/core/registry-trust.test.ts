import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { HeldTrust } from '../../../core/held-trust';
import { decideTrustAdoption, registryTrust, registryTrustState } from '../../../core/registry';
import { signDocument } from '../../../core/signed-document';
import { keyPairFromSeed, parseTrust, pinOf, type KeyPair } from '../../../core/signing';
import { nextRevocationsContent, nextRootContent } from '../../../core/trust-admin';
import { verifyNextRoot, type RootAnchor, type TrustRoot } from '../../../core/trust-root';

/**
 * core/registry.ts decideTrustAdoption: the registry takes a trust offer all or nothing (an agent keeps the roots
 * walked before a bad one; the registry, whose validator refuses the whole update, keeps none of it).
 */
const key = (): KeyPair => keyPairFromSeed(randomBytes(32));
const [A, B, C] = [key(), key(), key()] as [KeyPair, KeyPair, KeyPair];
const PROFILE = 'edge';
const NOW = Date.parse('2026-06-01T00:00:00Z');
const anchor = parseTrust({ threshold: 2, pins: [pinOf(A), pinOf(B)] }, 'trust.yaml');
const v0: RootAnchor = { version: 0, trust: anchor };
const v1 = signDocument(nextRootContent({ profile: PROFILE, from: v0, next: anchor, now: NOW }), [A, B]);
const root1 = verifyNextRoot(v0, v1, { profile: PROFILE }) as TrustRoot;
const v2Body = nextRootContent({
  profile: PROFILE,
  from: root1,
  next: { threshold: 2, pins: [pinOf(A), pinOf(C)] },
  now: NOW,
});
const empty: HeldTrust = { profile: PROFILE };

describe('decideTrustAdoption', () => {
  it('refuses an offer whole when a later root does not verify: v1 is good, v2 signed by its own keys only', () => {
    const decision = decideTrustAdoption({
      anchor,
      held: empty,
      offer: { roots: [v1, signDocument(v2Body, [A, C])] },
    });
    expect(decision).toMatchObject({ outcome: 'refused', code: 'INVALID_INPUT', reason: 'BELOW_THRESHOLD' });
    expect((decision as { message: string }).message).toContain("v2 by v1's keys");
  });

  it('adopts the chain, after which the pins are the newest root; a list then verifies against it', () => {
    const roots = decideTrustAdoption({ anchor, held: empty, offer: { roots: [signDocument(v2Body, [A, B, C]), v1] } });
    expect(roots.outcome).toBe('adopted');
    const held = (roots as { held: HeldTrust }).held;
    expect(registryTrustState(held, anchor)).toMatchObject({ root: 2, revocations: 0, kids: [A.kid, C.kid].sort() });

    const content = nextRevocationsContent({ profile: PROFILE, change: { revision: 4 }, reason: 'bad', now: NOW });
    // Signed by the keys of v0 (A, B): B is no longer pinned by the root held.
    expect(decideTrustAdoption({ anchor, held, offer: { revocations: signDocument(content, [A, B]) } })).toMatchObject({
      outcome: 'refused',
      reason: 'BELOW_THRESHOLD',
    });
    const list = signDocument(content, [A, C]);
    const taken = decideTrustAdoption({ anchor, held, offer: { revocations: list } });
    expect(taken.outcome).toBe('adopted');
    const withList = (taken as { held: HeldTrust }).held;
    expect(registryTrust(withList, anchor).revoked?.revisions.get(4)?.reason).toBe('bad');
    // The same list again is held as it is; roots at or below the one held are a rollback.
    expect(decideTrustAdoption({ anchor, held: withList, offer: { revocations: list } }).outcome).toBe('held');
    expect(decideTrustAdoption({ anchor, held: withList, offer: { roots: [v1] } })).toMatchObject({
      outcome: 'refused',
      reason: 'ROOT_ROLLBACK',
    });
  });

  it('reads only the part offered: a malformed offer is refused naming the field', () => {
    expect(decideTrustAdoption({ anchor, held: empty, offer: { roots: 'v1' } })).toMatchObject({
      outcome: 'refused',
      reason: 'MALFORMED',
    });
    expect(decideTrustAdoption({ anchor, held: empty, offer: { revocations: null } })).toMatchObject({
      outcome: 'refused',
      reason: 'MALFORMED',
    });
  });
});
