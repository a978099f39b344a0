import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { ed25519 } from '@noble/curves/ed25519.js';
import { memoizedVerify } from '../../device/signature-memo';

/**
 * The worker's remembered Ed25519 verdicts (device/signature-memo.ts): the same answer as the check
 * itself for every input, a changed byte of key, signature or body checked afresh (never a remembered
 * "valid"), and a bounded memory.
 */
describe('memoizedVerify', () => {
  const secret = randomBytes(32);
  const publicKey = ed25519.getPublicKey(secret);
  const body = new TextEncoder().encode('{"profile":"p","revision":2}');
  const sig = ed25519.sign(body, secret);

  it('answers as the check does, first time and remembered', () => {
    const verify = memoizedVerify();
    expect(verify(sig, body, publicKey)).toBe(true);
    expect(verify(sig, body, publicKey)).toBe(true);
    const other = ed25519.getPublicKey(randomBytes(32));
    expect(verify(sig, body, other)).toBe(false);
    expect(verify(sig, body, other)).toBe(false);
  });

  it('a valid verdict never covers a tampered body, signature or key', () => {
    const verify = memoizedVerify();
    expect(verify(sig, body, publicKey)).toBe(true);
    const tamperedBody = Uint8Array.from(body);
    tamperedBody[5] ^= 1;
    expect(verify(sig, tamperedBody, publicKey)).toBe(false);
    const tamperedSig = Uint8Array.from(sig);
    tamperedSig[10] ^= 1;
    expect(verify(tamperedSig, body, publicKey)).toBe(false);
    const tamperedKey = Uint8Array.from(publicKey);
    tamperedKey[0] ^= 1;
    expect(verify(sig, body, tamperedKey)).toBe(false);
    // Bytes moved between signature and body (the same concatenation) are not the same entry.
    expect(verify(sig.slice(0, 63), Uint8Array.from([sig[63]!, ...body]), publicKey)).toBe(false);
    expect(verify(sig, body, publicKey)).toBe(true);
  });

  it('stays within its bound and still answers correctly past it', () => {
    const verify = memoizedVerify(4);
    for (let i = 0; i < 10; i++) {
      const b = new TextEncoder().encode(`body ${i}`);
      expect(verify(ed25519.sign(b, secret), b, publicKey)).toBe(true);
    }
    expect(verify(sig, body, publicKey)).toBe(true);
  });
});
