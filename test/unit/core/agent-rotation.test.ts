import { describe, expect, it } from 'vitest';
import { agentKeyPin, authenticate, authorizationHeader, NonceCache } from '../../../core/agent-auth';
import { acceptedKeys, makeProof, parseProof, proofProblem } from '../../../core/agent-rotation';
import { parseRotationSource, signRotationDocument, verifyRotation, type RotationSource } from '../../../core/rotation';
import { keyPairFromSeed, parseTrust, pinOf } from '../../../core/signing';
import { refusal } from '../../support/refusal';

/** core/agent-rotation.ts: an agent identity key's rotation proof and the keys a device may sign with. */

const pair = (n: number) => keyPairFromSeed(new Uint8Array(32).fill(n));
const [oldKey, newKey, stranger, alice] = [pair(11), pair(12), pair(13), pair(14)];
const [OLD, NEW] = [agentKeyPin(oldKey.publicKey), agentKeyPin(newKey.publicKey)];
const T0 = Date.parse('2027-01-01T00:00:00Z');
const H = 3_600_000;

const source = (over: Record<string, unknown> = {}): RotationSource =>
  ({
    type: 'wavegate/rotation',
    id: 'agent-id-2027',
    kind: 'agent-identity',
    authority: 'fleet',
    publish: new Date(T0).toISOString(),
    activate: new Date(T0 + H).toISOString(),
    retire: new Date(T0 + 2 * H).toISOString(),
    required: 'all',
    ...over,
  }) as RotationSource;

describe('an agent-identity schedule', () => {
  it('verifies without old and new (each device proves its own key), and is refused with them', () => {
    const trust = parseTrust({ threshold: 1, pins: [pinOf(alice)] }, 'trust.yaml');
    const v = verifyRotation(signRotationDocument(source(), alice, T0), trust, { now: T0 });
    expect(v).toMatchObject({ ok: true, rotation: { kind: 'agent-identity' } });
    const bad = refusal(() => parseRotationSource(source({ old: `SHA256:${'A'.repeat(43)}` }), 'rot.yaml'));
    expect(bad.message).toContain('old: not allowed for kind agent-identity');
    // An ssh-login schedule still needs both fingerprints.
    const missing = refusal(() => parseRotationSource(source({ kind: 'ssh-login' }), 'rot.yaml'));
    expect(missing.message).toContain('old: required for kind ssh-login');
  });
});

describe('the rotation proof', () => {
  const expected = { id: 'agent-id-2027', device: 'dev-1', pinned: OLD };

  it('verifies when the old key hands over and the new key accepts, for this rotation and device', () => {
    const proof = makeProof('agent-id-2027', 'dev-1', oldKey, newKey);
    expect(parseProof(JSON.parse(JSON.stringify(proof)))).toEqual(proof);
    expect(proofProblem(proof, expected)).toBeNull();
    // Proven again once the inventory moved to the new key: harmless.
    expect(proofProblem(proof, { ...expected, pinned: NEW })).toBeNull();
  });

  it('is refused when either key alone made it, for another device or rotation, or from a key not pinned', () => {
    const honest = makeProof('agent-id-2027', 'dev-1', oldKey, newKey);
    // A thief of the new key alone cannot claim dev-1: it has no old key's signature to give.
    const byNewOnly = { ...honest, byOld: makeProof('agent-id-2027', 'dev-1', stranger, newKey).byOld };
    expect(proofProblem(byNewOnly, expected)).toBe('byOld: not signed by the old key');
    // A thief of the old key alone cannot name a key it does not hold: the new key's signature is missing.
    const byOldOnly = { ...honest, byNew: makeProof('agent-id-2027', 'dev-1', oldKey, stranger).byNew };
    expect(proofProblem(byOldOnly, expected)).toBe('byNew: not signed by the new key');
    // One role's signature cannot stand for the other's.
    expect(proofProblem({ ...honest, byNew: honest.byOld }, expected)).toBe('byNew: not signed by the new key');
    expect(proofProblem(makeProof('agent-id-2027', 'dev-2', oldKey, newKey), expected)).toBe(
      'byOld: not signed by the old key',
    );
    expect(proofProblem(makeProof('other', 'dev-1', oldKey, newKey), expected)).toContain('rotation other');
    expect(proofProblem(makeProof('agent-id-2027', 'dev-1', stranger, newKey), expected)).toContain(
      "not dev-1's agentKey",
    );
  });

  it('refuses a malformed proof naming the field', () => {
    expect(parseProof({ id: 'x', old: OLD, new: 'ed25519:short', byOld: '', byNew: '' })).toContain(
      'rotationProof.new',
    );
    expect(parseProof({ id: 'x', old: OLD })).toContain('must hold exactly');
  });
});

describe('the keys a device may sign with', () => {
  const proof = { old: OLD, new: NEW };
  const base = { device: 'dev-1', pinned: OLD, now: T0 };

  it('either during the overlap, the new one only after the retire, the pin alone without a proof', () => {
    expect(acceptedKeys({ ...base, proof, retired: false })).toEqual([NEW, OLD]);
    expect(acceptedKeys({ ...base, proof, retired: true })).toEqual([NEW]);
    expect(acceptedKeys({ ...base, pinned: NEW, proof, retired: true })).toEqual([NEW]);
    // A forced retire went past a device that never proved: it keeps its pin (listed, not locked out).
    expect(acceptedKeys({ ...base, retired: true })).toEqual([OLD]);
    // The inventory changed by hand since the proof: the proof counts for nothing.
    expect(acceptedKeys({ ...base, pinned: agentKeyPin(stranger.publicKey), proof, retired: false })).toEqual([
      agentKeyPin(stranger.publicKey),
    ]);
  });

  it('a lifeline device keeps the old key until lifelineUntil', () => {
    const rotation = { lifeline: ['dev-1'], lifelineUntil: new Date(T0 + H).toISOString() };
    expect(acceptedKeys({ ...base, rotation, proof, retired: true })).toEqual([NEW, OLD]);
    expect(acceptedKeys({ ...base, rotation, proof, retired: true, now: T0 + 2 * H })).toEqual([NEW]);
  });

  it('authenticate takes a request signed by any of the keys given, and refuses another', () => {
    const nonces = new NonceCache();
    const request = (key: typeof oldKey, nonce: string) => ({
      header: authorizationHeader({
        device: 'dev-1',
        method: 'POST',
        path: '/v1/sync',
        body: new Uint8Array(),
        now: T0,
        nonce,
        secretKey: key.secretKey,
      }),
      method: 'POST',
      path: '/v1/sync',
      now: T0,
    });
    const both = () => [oldKey.publicKey, newKey.publicKey];
    expect(authenticate(request(oldKey, 'a'.repeat(32)), both, nonces)).toMatchObject({ ok: true });
    expect(authenticate(request(newKey, 'b'.repeat(32)), both, nonces)).toMatchObject({ ok: true });
    expect(authenticate(request(oldKey, 'c'.repeat(32)), () => [newKey.publicKey], nonces)).toMatchObject({
      ok: false,
      reason: 'BAD_SIGNATURE',
    });
  });
});
