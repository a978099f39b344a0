import { randomBytes } from 'node:crypto';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { describe, expect, it } from 'vitest';
import { signDocument } from '../../../core/signed-document';
import { keyPairFromSeed, parseTrust, pinOf, type KeyPair } from '../../../core/signing';
import { nextRevocationsContent, nextRootContent } from '../../../core/trust-admin';
import { refusal } from '../../support/refusal';
import { WavegateError } from '../../../core/errors';
import { profileDir } from '../../../intake/profile-dir';
import { loadProfileTrust, profileTrustState } from '../../../intake/trust';

/**
 * intake/trust.ts: a profile's trust walked from trust.yaml through root/<n>.json with revocations.json applied, and
 * the high-water marks (trust-held.json) that make a verified version stick: a root version or a revocation list
 * deleted after it was verified here is refused (METADATA_ROLLBACK / missing), never read as the older state.
 */
const key = (): KeyPair => keyPairFromSeed(randomBytes(32));
const [A, B, C] = [key(), key(), key()] as [KeyPair, KeyPair, KeyPair];
const NOW = Date.now();

/** A profiles root with profile `edge`: trust.yaml (A,B; 2), root/1.json (the same), root/2.json (A,C; 2). */
function profile() {
  const root = mkdtempSync(join(tmpdir(), 'wavegate-trust-'));
  const layout = profileDir(root, 'edge');
  mkdirSync(layout.rootDir, { recursive: true });
  const doc = { threshold: 2, pins: [A, B].map((k) => pinOf(k)) };
  writeFileSync(layout.trustFile, stringify(doc));
  const v0 = { version: 0 as const, trust: parseTrust(doc, 'trust.yaml') };
  const v1Body = nextRootContent({ profile: 'edge', from: v0, next: doc, now: NOW });
  writeFileSync(layout.rootFile(1), JSON.stringify(signDocument(v1Body, [A, B])));
  const v1 = profileTrustState(layout)!.root;
  const v2Body = nextRootContent({
    profile: 'edge',
    from: v1,
    next: { threshold: 2, pins: [A, C].map((k) => pinOf(k)) },
    now: NOW,
  });
  writeFileSync(layout.rootFile(2), JSON.stringify(signDocument(v2Body, [A, B, C])));
  return { root, layout };
}

const reason = (fn: () => unknown) => refusal(fn, WavegateError).message;

describe('loadProfileTrust: the walk and its high-water marks', () => {
  it('walks to the newest root and applies the revocation list; marks are written to trust-held.json', () => {
    const { layout } = profile();
    const trust = loadProfileTrust(layout)!;
    expect(trust.root?.version).toBe(2);
    expect([...trust.keys.keys()].sort()).toEqual([A.kid, C.kid].sort());
    const list = nextRevocationsContent({ profile: 'edge', change: { revision: 2 }, reason: 'bad', now: NOW });
    writeFileSync(layout.revocationsFile, JSON.stringify(signDocument(list, [A, C])));
    expect(loadProfileTrust(layout)!.revoked?.revisions.get(2)).toEqual({ reason: 'bad' });
    const held = JSON.parse(readFileSync(layout.heldTrustFile, 'utf8')) as Record<string, { version: number }>;
    expect(held.root?.version).toBe(2);
    expect(held.revocations?.version).toBe(1);
  });

  it('a root version deleted after it was verified here is refused (METADATA_ROLLBACK), not read as v1', () => {
    const { layout } = profile();
    expect(loadProfileTrust(layout)!.root?.version).toBe(2);
    const saved = join(layout.dir, 'v2.saved');
    copyFileSync(layout.rootFile(2), saved);
    rmSync(layout.rootFile(2));
    expect(reason(() => loadProfileTrust(layout))).toMatch(
      /METADATA_ROLLBACK: trust root v2 was verified here before, but the newest now is v1/,
    );
    // Every root file deleted (only trust.yaml left): still refused.
    rmSync(layout.rootDir, { recursive: true });
    expect(reason(() => loadProfileTrust(layout))).toContain('METADATA_ROLLBACK');
    mkdirSync(layout.rootDir);
  });

  it('a revocation list deleted after it was verified here is refused: a revocation is never undone by deleting it', () => {
    const { layout } = profile();
    const list = nextRevocationsContent({ profile: 'edge', change: { revision: 2 }, reason: 'bad', now: NOW });
    writeFileSync(layout.revocationsFile, JSON.stringify(signDocument(list, [A, C])));
    expect(loadProfileTrust(layout)!.revoked?.version).toBe(1);
    rmSync(layout.revocationsFile);
    expect(reason(() => loadProfileTrust(layout))).toMatch(
      /revocations\.json: missing: revocation list v1 was verified here before/,
    );
  });

  it('an older revocation list put back over a newer one is refused (METADATA_ROLLBACK)', () => {
    const { layout } = profile();
    const v1 = nextRevocationsContent({ profile: 'edge', change: { revision: 2 }, reason: 'bad', now: NOW });
    const v1Envelope = JSON.stringify(signDocument(v1, [A, C]));
    writeFileSync(layout.revocationsFile, v1Envelope);
    loadProfileTrust(layout);
    const v2 = nextRevocationsContent({ profile: 'edge', current: v1, change: { revision: 2 }, lift: true, now: NOW });
    writeFileSync(layout.revocationsFile, JSON.stringify(signDocument(v2, [A, C])));
    expect(loadProfileTrust(layout)!.revoked?.revisions.size).toBe(0);
    writeFileSync(layout.revocationsFile, v1Envelope);
    expect(reason(() => loadProfileTrust(layout))).toContain(
      'METADATA_ROLLBACK: revocation list v2 was verified here before',
    );
  });

  it('a root signed below threshold is refused, never fallen back from: every envelope of the profile is then refused', () => {
    const { layout } = profile();
    const v2 = profileTrustState(layout)!.root;
    const v3Body = nextRootContent({
      profile: 'edge',
      from: v2,
      next: { threshold: 2, pins: [A, C].map((k) => pinOf(k)) },
      now: NOW,
    });
    writeFileSync(layout.rootFile(3), JSON.stringify(signDocument(v3Body, [A])));
    expect(reason(() => loadProfileTrust(layout))).toMatch(/root: BELOW_THRESHOLD: trust root v3 by v2's keys/);
  });
});
