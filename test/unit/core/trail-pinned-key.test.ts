import { describe, expect, it } from 'vitest';
import { toBase64 } from '../../../core/bytes';
import { keyHash } from '../../../core/checkpoint';
import { keyPairFromSeed } from '../../../core/signing';
import { parsePinnedKey } from '../../../core/trail-checkpoints';

/** A C2SP verifier key line `<name>+<8 hex key hash>+<base64(type byte || key)>`. */
function vkey(name: string, publicKey: Uint8Array, type: 1 | 4): string {
  const hash = Buffer.from(keyHash(name, publicKey, type === 1 ? 'log' : 'witness')).toString('hex');
  return `${name}+${hash}+${toBase64(Uint8Array.from([type, ...publicKey]))}`;
}

describe('pinned checkpoint keys', () => {
  it('reads a C2SP verifier key whose base64 holds a "+" (about half of all keys)', () => {
    let seed = 1;
    let line = '';
    let pair = keyPairFromSeed(new Uint8Array(32).fill(seed));
    for (; seed < 200; seed++) {
      pair = keyPairFromSeed(new Uint8Array(32).fill(seed));
      line = vkey('log.example/1', pair.publicKey, 1);
      if (line.split('+').length > 3) break;
    }
    expect(line.split('+').length).toBeGreaterThan(3);
    expect(parsePinnedKey(line, '--log-key', 'log')).toEqual({ name: 'log.example/1', publicKey: pair.publicKey });
    // A witness's key where a log's is expected is still refused, by its type byte.
    expect(() => parsePinnedKey(vkey('w', pair.publicKey, 4), '--log-key', 'log')).toThrow(/witness/);
  });
});
