import { fromBase64 } from '../core/bytes';
import type { SignerKind } from '../core/checkpoint';
import { WavegateError } from '../core/errors';
import { parseSecretKeyFile, parseTrust, type KeyPair } from '../core/signing';
import { parsePinnedKey, type PinnedKey } from '../core/trail-checkpoints';
import { checkOwnerOnlyFile, parseDocumentText, readFlagFile } from './files';

/**
 * The keys of checkpoints as flags name them (docs/cli.md): the worker's own signing key (`--checkpoint-key`, a
 * `wavegate keygen` key file, the owner's alone) and the public keys an operator pins (`--witness-key`,
 * `--log-key`). Every refusal names the flag and the path or value, never a byte of a secret.
 */

const KEY_FILE_MAX_BYTES = 64 * 1024;

/** A `wavegate keygen` key file named by `flag`: owner-only, bounded, parsed (INVALID_INPUT naming flag and path). */
export function readSigningKeyFile(flag: string, path: string): KeyPair {
  checkOwnerOnlyFile(flag, path, {
    maxBytes: KEY_FILE_MAX_BYTES,
    expected: 'a wavegate key file (wavegate keygen --out FILE)',
    details: { field: flag, value: path },
  });
  const text = readFlagFile(flag, path).toString('utf8');
  let data: unknown;
  try {
    data = JSON.parse(text);
  } catch {
    // Never the parser's message: it may quote the file, and the file holds a secret.
    throw new WavegateError('INVALID_INPUT', `${flag} ${path}: not a wavegate key file (JSON from wavegate keygen)`, {
      field: flag,
      value: path,
    });
  }
  // core/signing.ts's refusal of a malformed field quotes its value: never for the secret key.
  const secret = (data as { secretKey?: unknown } | null)?.secretKey;
  if (typeof secret !== 'string' || fromBase64(secret)?.length !== 32)
    throw new WavegateError(
      'INVALID_INPUT',
      `${flag} ${path}: invalid\n  secretKey: must be the base64 of a 32-byte Ed25519 secret key (not shown)`,
      { field: flag, value: path },
    );
  return parseSecretKeyFile(data, `${flag} ${path}`);
}

/**
 * A public key pinned by `flag`: given inline (`ed25519:<base64>`, `<name>=ed25519:<base64>`, a C2SP verifier key
 * line), or a file holding one of those or a `wavegate keygen` pin (`<key>.pub.yaml`).
 */
export function readPinnedKey(flag: string, value: string, kind: SignerKind): PinnedKey {
  const inline = parsePinnedKey(value, flag, kind);
  if (inline) return inline;
  const text = readFlagFile(flag, value).toString('utf8');
  if (text.length > KEY_FILE_MAX_BYTES)
    throw new WavegateError('INVALID_INPUT', `${flag} ${value}: above ${KEY_FILE_MAX_BYTES} bytes for a public key`, {
      field: flag,
      value,
    });
  const line = text.trim();
  if (!line.includes('\n')) {
    const fromFile = parsePinnedKey(line, `${flag} ${value}:`, kind);
    if (fromFile) return fromFile;
  }
  const pin = parseDocumentText(text, `${flag} ${value}`, 'yaml');
  const trust = parseTrust({ threshold: 1, pins: [pin] }, `${flag} ${value}`);
  return { publicKey: [...trust.keys.values()][0]! };
}
