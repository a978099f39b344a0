import { WavegateError } from '../core/errors';
import { pinnedKeyText } from '../core/trail-checkpoints';
import { readPinnedKey, readSigningKeyFile } from '../intake/checkpoint-keys';
import { defaultCheckpointName, type CheckpointConfig } from './checkpointer';

/**
 * `wavegate worker`'s checkpoint flags (docs/cli.md), checked before the worker connects (a bad one exits 2
 * naming the flag and the value, never a byte of the key file):
 *
 *   --checkpoint-key <file>    the worker's checkpoint key (a `wavegate keygen` key file, the owner's alone)
 *   --checkpoint-name <name>   the key name on its signature lines (default the host name, else `wavegate`)
 *   --witness <url>            the witness (`wavegate witness`) that cosigns each checkpoint
 *   --witness-key <key>        the witness's public key, pinned: a pin file or ed25519:<base64>
 *
 * Without --checkpoint-key no checkpoint is made (the default, as before); the other three need it, and
 * --witness and --witness-key go together.
 */
export interface CheckpointFlags {
  checkpointKey?: string;
  checkpointName?: string;
  witness?: string;
  witnessKey?: string;
}

const KEY_NAME = /^[\x21-\x2a\x2c-\x7e]{1,128}$/;
const MAX_URL = 2048;

const refuse = (flag: string, value: string, why: string) =>
  new WavegateError('INVALID_INPUT', `${flag} ${JSON.stringify(value.slice(0, 200))}: ${why}`, { field: flag, value });

/** The witness's URL: http(s)://host[:port][/path], no credentials in it (it is printed and logged). */
export function parseWitnessUrl(value: string, flag = '--witness'): string {
  let url: URL;
  try {
    if (value.length > MAX_URL) throw new Error('too long');
    url = new URL(value);
  } catch {
    throw refuse(flag, value, `must be the witness's http(s)://host:port (at most ${MAX_URL} characters)`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    throw refuse(flag, value, `must be http:// or https:// (got ${url.protocol})`);
  if (url.username || url.password)
    throw refuse(flag, url.host, 'no user or password in the URL: the witness asks for none, and the URL is logged');
  if (url.search || url.hash) throw refuse(flag, value, 'no query or fragment: the witness answers /v1/add-checkpoint');
  return url.toString();
}

/** The checkpoint configuration the flags name, or undefined without --checkpoint-key. INVALID_INPUT for a bad one. */
export function resolveCheckpointConfig(flags: CheckpointFlags): CheckpointConfig | undefined {
  if (flags.checkpointKey === undefined) {
    const stray = (['checkpointName', 'witness', 'witnessKey'] as const).find((f) => flags[f] !== undefined);
    if (stray) {
      const flag = `--${stray.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`;
      throw refuse(flag, flags[stray]!, 'needs --checkpoint-key: without it this worker makes no checkpoint');
    }
    return undefined;
  }
  if (flags.witness !== undefined && flags.witnessKey === undefined)
    throw refuse(
      '--witness',
      flags.witness,
      "needs --witness-key, the witness's public key: its cosignatures are checked",
    );
  if (flags.witnessKey !== undefined && flags.witness === undefined)
    throw refuse('--witness-key', flags.witnessKey, 'needs --witness <url>: the witness to ask');
  const name = flags.checkpointName ?? defaultCheckpointName();
  if (!KEY_NAME.test(name))
    throw refuse('--checkpoint-name', name, 'a key name is 1-128 printable ASCII characters without space or "+"');
  const url = flags.witness === undefined ? undefined : parseWitnessUrl(flags.witness);
  const witnessKey =
    flags.witnessKey === undefined ? undefined : readPinnedKey('--witness-key', flags.witnessKey, 'witness');
  const pair = readSigningKeyFile('--checkpoint-key', flags.checkpointKey);
  return { pair, name, ...(url && witnessKey ? { witness: { url, key: witnessKey } } : {}) };
}

/** What the worker says at start about its checkpoints (public keys only). */
export function describeCheckpoints(config: CheckpointConfig | undefined): string {
  if (!config) return 'checkpoints: none (no --checkpoint-key): the trail is not checkpointed for a witness';
  const log = `signed as ${config.name} (${pinnedKeyText({ publicKey: config.pair.publicKey })})`;
  if (!config.witness)
    return `checkpoints: at every phase transition, ${log}; warning: no --witness, so every checkpoint is kept uncosigned`;
  return `checkpoints: at every phase transition, ${log}, cosigned by the witness ${config.witness.url} (${pinnedKeyText(config.witness.key)})`;
}
