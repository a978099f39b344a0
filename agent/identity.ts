import { randomBytes } from 'node:crypto';
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { agentKeyPin } from '../core/agent-auth';
import { WavegateError } from '../core/errors';
import { keyPairFromSeed, parseSecretKeyFile, secretKeyFile, type KeyPair } from '../core/signing';
import { prepareStateDir, readIdentityKeyText } from './inputs';

/**
 * The agent's identity key (docs/formats.md, "Agent state directory"): an Ed25519 key made on the
 * device by `wavegate agent enroll`, in the key file format `wavegate keys` uses, mode 0600 in a 0700
 * state directory. Only its pin (`ed25519:<base64 public key>`) leaves the device: into the inventory.
 */
export const IDENTITY_FILE = 'identity.key';

export function enrollIdentity(
  stateDir: string,
  log: (line: string) => void = () => {},
): { keyFile: string; pin: string } {
  // The same checks as the agent's own start: a directory of this user that no one else may write.
  const dir = prepareStateDir('--state-dir', stateDir, log);
  const keyFile = join(dir, IDENTITY_FILE);
  if (existsSync(keyFile)) {
    throw new WavegateError(
      'CONFLICT',
      `${keyFile}: an identity key is already there; refusing to overwrite it (its pin is in the inventory). Print its pin with \`wavegate agent pin --key ${keyFile}\``,
      { field: '--state-dir', value: stateDir },
    );
  }
  const pair = keyPairFromSeed(randomBytes(32));
  // 'wx': created here or not at all (two enrolls racing cannot both write).
  writeFileSync(keyFile, `${JSON.stringify(secretKeyFile(pair), null, 2)}\n`, { mode: 0o600, flag: 'wx' });
  return { keyFile, pin: agentKeyPin(pair.publicKey) };
}

/**
 * The identity key at `path`: refused (INVALID_INPUT naming --key and the path) when missing, not a
 * regular file (a FIFO would block the read), oversized, readable by group or others, or malformed.
 */
export function loadIdentity(path: string): KeyPair {
  const text = readIdentityKeyText(path);
  let data: unknown;
  try {
    data = JSON.parse(text);
  } catch {
    throw new WavegateError('INVALID_INPUT', `--key ${path}: not a wavegate key file (JSON)`, {
      field: '--key',
      value: path,
    });
  }
  return parseSecretKeyFile(data, `--key ${path}`);
}
