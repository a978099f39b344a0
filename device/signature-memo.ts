import { createHash } from 'node:crypto';
import { nativeEd25519Verify } from './ed25519-native';

/**
 * Ed25519 verification, remembered: every device of a rollout has the worker verify the same envelope
 * (and the rollback's), and even Node's native check (device/ed25519-native.ts) costs the one thread
 * that also runs the SSH sessions. The answer is a pure function of (key, signature, body), so the memo is keyed by a
 * SHA-256 over all three: a different byte anywhere is a different entry, checked afresh. Bounded;
 * the oldest entries go first.
 */
export function memoizedVerify(limit = 1024): (sig: Uint8Array, body: Uint8Array, publicKey: Uint8Array) => boolean {
  const seen = new Map<string, boolean>();
  return (sig, body, publicKey) => {
    const key = createHash('sha256')
      .update(String(publicKey.length))
      .update(':')
      .update(publicKey)
      .update(String(sig.length))
      .update(':')
      .update(sig)
      .update(body)
      .digest('base64');
    const known = seen.get(key);
    if (known !== undefined) return known;
    const valid = nativeEd25519Verify(sig, body, publicKey);
    if (seen.size >= limit) seen.delete(seen.keys().next().value!);
    seen.set(key, valid);
    return valid;
  };
}

/** The worker's one memo (activities share it: the envelope verified for one device is the next's too). */
export const verifySignatureMemoized = memoizedVerify();
