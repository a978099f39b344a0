import { randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { agentKeyPin } from '../core/agent-auth';
import { WavegateError } from '../core/errors';
import { keyPairFromSeed, parseSecretKeyFile, secretKeyFile, type KeyPair } from '../core/signing';

/**
 * The agent's identity key (docs/formats.md, "Agent state directory"): an Ed25519 key made on the
 * device by `wavegate agent enroll`, in the key file format `wavegate keys` uses, mode 0600 in a 0700
 * state directory. Only its pin (`ed25519:<base64 public key>`) leaves the device: into the inventory.
 */
export const IDENTITY_FILE = 'identity.key';

export function enrollIdentity(stateDir: string): { keyFile: string; pin: string } {
  const dir = resolve(stateDir);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  chmodSync(dir, 0o700);
  const keyFile = join(dir, IDENTITY_FILE);
  if (existsSync(keyFile)) {
    throw new WavegateError('CONFLICT', `${keyFile}: an identity key is already there; refusing to overwrite it (its pin is in the inventory). Print its pin with \`wavegate agent pin --key ${keyFile}\``, { field: '--state-dir', value: stateDir });
  }
  const pair = keyPairFromSeed(randomBytes(32));
  // 'wx': created here or not at all (two enrolls racing cannot both write).
  writeFileSync(keyFile, `${JSON.stringify(secretKeyFile(pair), null, 2)}\n`, { mode: 0o600, flag: 'wx' });
  return { keyFile, pin: agentKeyPin(pair.publicKey) };
}

/** The identity key at `path`: refused (INVALID_INPUT naming --key) when unreadable, malformed, or readable by group or others. */
export function loadIdentity(path: string): KeyPair {
  let text: string;
  let mode: number;
  try {
    mode = statSync(path).mode & 0o777;
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new WavegateError('INVALID_INPUT', `--key ${path}: cannot read the identity key (${(err as NodeJS.ErrnoException).code ?? String(err)}); create one with \`wavegate agent enroll --state-dir DIR\``, { field: '--key', value: path });
  }
  if (mode & 0o077) throw new WavegateError('INVALID_INPUT', `--key ${path}: mode ${mode.toString(8).padStart(4, '0')} lets others read the identity key; chmod 600 it`, { field: '--key', value: path });
  let data: unknown;
  try {
    data = JSON.parse(text);
  } catch {
    throw new WavegateError('INVALID_INPUT', `--key ${path}: not a wavegate key file (JSON)`, { field: '--key', value: path });
  }
  return parseSecretKeyFile(data, `--key ${path}`);
}
