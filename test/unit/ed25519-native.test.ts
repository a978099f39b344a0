import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { ed25519 } from '@noble/curves/ed25519.js';
import { nativeEd25519Sign, nativeEd25519Verify } from '../../device/ed25519-native';
import { ed25519Verify } from '../../core/signing';

/** Node's native Ed25519 check gives the pure one's answer on what a gateway or worker meets. */
describe('nativeEd25519Verify', () => {
  it('agrees with core/signing on valid, tampered, re-keyed and malformed signatures', () => {
    for (let i = 0; i < 50; i++) {
      const secret = randomBytes(32);
      const key = ed25519.getPublicKey(secret);
      const other = ed25519.getPublicKey(randomBytes(32));
      const message = randomBytes(1 + (i % 300));
      const sig = ed25519.sign(message, secret);
      const tampered = Uint8Array.from(message);
      tampered[0]! ^= 1;
      const badSig = Uint8Array.from(sig);
      badSig[10]! ^= 0x40;
      const cases: Array<[Uint8Array, Uint8Array, Uint8Array, boolean]> = [
        [sig, message, key, true],
        [sig, tampered, key, false],
        [sig, message, other, false],
        [badSig, message, key, false],
        [sig.slice(0, 63), message, key, false],
        [sig, message, key.slice(0, 31), false],
      ];
      for (const [s, m, k, expected] of cases) {
        expect(nativeEd25519Verify(s, m, k)).toBe(expected);
        expect(ed25519Verify(s, m, k)).toBe(expected);
      }
    }
  });

  it('signs byte for byte as the pure signer (Ed25519 is deterministic)', () => {
    for (let i = 0; i < 20; i++) {
      const seed = randomBytes(32);
      const message = randomBytes(i * 7);
      expect(Buffer.from(nativeEd25519Sign(message, seed))).toEqual(Buffer.from(ed25519.sign(message, seed)));
    }
  });

  it('a signature with S not below the group order is refused, as the pure check refuses it', () => {
    const secret = randomBytes(32);
    const key = ed25519.getPublicKey(secret);
    const message = randomBytes(32);
    const sig = ed25519.sign(message, secret);
    // S + L: the same point equation, a non-canonical scalar (signature malleability).
    const L = 2n ** 252n + 27742317777372353535851937790883648493n;
    let s = 0n;
    for (let i = 63; i >= 32; i--) s = (s << 8n) | BigInt(sig[i]!);
    const big = s + L;
    const malleable = Uint8Array.from(sig);
    for (let i = 0; i < 32; i++) malleable[32 + i] = Number((big >> BigInt(8 * i)) & 0xffn);
    expect(ed25519Verify(malleable, message, key)).toBe(false);
    expect(nativeEd25519Verify(malleable, message, key)).toBe(false);
  });
});
