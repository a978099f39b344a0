import { chmodSync, writeFileSync } from 'node:fs';
import { secretKeyFile, type KeyPair } from '../../core/signing';

/** A `wavegate keygen` key file of `pair` at `path`, with `mode` (0600: owner-only, as every reader of one requires). */
export function writeKeyFile(path: string, pair: KeyPair, mode = 0o600): string {
  writeFileSync(path, `${JSON.stringify(secretKeyFile(pair), null, 2)}\n`, { mode });
  chmodSync(path, mode);
  return path;
}
