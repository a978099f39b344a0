import { readSigningKeyFile } from '../../intake/checkpoint-keys';
import type { Command } from 'commander';
import { agentKeyPin, parseAgentKey } from '../../core/agent-auth';
import type { CheckpointKey } from '../../core/checkpoint';
import { WavegateError } from '../../core/errors';
import { type KeyPair, parseTrust } from '../../core/signing';
import { prepareStateDir } from '../../agent/inputs';
import { parseDocumentText, readFlagFile } from '../../intake/files';
import { startWitness } from '../witness/server';
import { parseListen } from '../../http/listen';
import { action } from '../run';

/**
 * `wavegate witness` (docs/cli.md; docs/formats.md, "Checkpoints and the witness"): a small separate process with
 * its own key that cosigns audit-trail checkpoints only when they extend the last one it cosigned for their
 * trail. Every flag is checked before anything listens: a bad one exits 2 naming the flag and the value.
 */

const log = (line: string) => process.stdout.write(`${line}\n`);

/** C2SP key names (core/checkpoint.ts): printable ASCII, no space or "+". */
const KEY_NAME = /^[\x21-\x2a\x2c-\x7e]{1,128}$/;

interface WitnessFlags {
  key: string;
  stateDir: string;
  log: string[];
  name: string;
  listen: string;
}

const refuse = (flag: string, value: string, why: string) =>
  new WavegateError('INVALID_INPUT', `${flag} ${JSON.stringify(value)}: ${why}`, { field: flag, value });

/** `--key`: a wavegate key file (`wavegate keygen`), the owner's alone (like an ssh private key). */
function loadWitnessKey(path: string): KeyPair {
  // One reader of a signing key for every command that holds one: owner-only, bounded, never quoting the secret.
  return readSigningKeyFile('--key', path);
}

/**
 * `--log <name>=<key>`: the log key name its signature lines carry, and its public key, given as
 * `ed25519:<base64>` or as a pin file (`<key>.pub.yaml` from `wavegate keygen`, checked as a trust file's pin).
 */
export function parseLogFlag(value: string): CheckpointKey {
  const eq = value.indexOf('=');
  const name = eq < 0 ? '' : value.slice(0, eq);
  const key = eq < 0 ? '' : value.slice(eq + 1);
  if (!KEY_NAME.test(name) || !key)
    throw refuse(
      '--log',
      value,
      'must be <key name>=<pin file or ed25519:<base64 public key>>, the name 1-128 printable characters without space or "+"',
    );
  if (key.startsWith('ed25519:')) {
    const publicKey = parseAgentKey(key);
    if (!publicKey) throw refuse('--log', value, 'the key must be ed25519: and the base64 of 32 bytes');
    return { name, publicKey, kind: 'log' };
  }
  const pin = parseDocumentText(readFlagFile('--log', key).toString('utf8'), `--log ${key}`, 'yaml');
  const trust = parseTrust({ threshold: 1, pins: [pin] }, `--log ${key}`);
  return { name, publicKey: [...trust.keys.values()][0]!, kind: 'log' };
}

export function register(program: Command): void {
  program
    .command('witness')
    .description(
      'Run a witness: with its own key, cosign a checkpoint of an audit trail (signed by a pinned log key) only when it extends the last one cosigned for that trail (a consistency proof), so a rewritten or forked trail gets no second signature (docs/formats.md, "Checkpoints and the witness")',
    )
    .requiredOption('--key <file>', "the witness's own key file (wavegate keygen; mode 0600)")
    .requiredOption(
      '--state-dir <dir>',
      'where it keeps the last cosigned size and root of each trail, a file each, written before it answers (made 0700)',
    )
    .requiredOption(
      '--log <name=key>',
      'a log whose checkpoints it cosigns: the key name of its signature lines = a pin file (<key>.pub.yaml) or ed25519:<base64 public key>; repeatable',
      (v: string, all: string[] = []) => [...all, v],
    )
    .option('--name <key name>', 'the key name of its cosignature lines', 'wavegate-witness')
    .option('--listen <host:port>', 'address to serve on (port 0: any free port, printed)', '127.0.0.1:7380')
    .action(
      action(async (flags: WitnessFlags) => {
        // Every refusal before anything listens: exit 2.
        const listen = parseListen(flags.listen);
        if (!KEY_NAME.test(flags.name))
          throw refuse('--name', flags.name, 'a key name is 1-128 printable ASCII characters without space or "+"');
        const logs = flags.log.map(parseLogFlag);
        const twice = logs.find((l, i) => logs.findIndex((o) => o.name === l.name) !== i);
        if (twice) throw refuse('--log', twice.name, 'this key name is given twice');
        const pair = loadWitnessKey(flags.key);
        const stateDir = prepareStateDir('--state-dir', flags.stateDir, log);
        const witness = await startWitness({ pair, name: flags.name, logs, stateDir, listen, log });
        // Public only: what a verifier pins for this witness (its name and public key), never the key file's secret.
        log(`witness key: name ${flags.name}, public key ${agentKeyPin(pair.publicKey)}`);
        log(`cosigning for: ${logs.map((l) => `${l.name} (${agentKeyPin(l.publicKey)})`).join(', ')}`);
        log(`witness listening on ${witness.url} (state ${stateDir}); SIGTERM stops it`);
        await new Promise<void>((resolve) => {
          const stop = (signal: string) => {
            log(`${signal}: stopping the witness`);
            resolve();
          };
          process.once('SIGTERM', () => stop('SIGTERM'));
          process.once('SIGINT', () => stop('SIGINT'));
        });
        await witness.close();
      }),
    );
}
