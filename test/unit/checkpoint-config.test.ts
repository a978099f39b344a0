import { chmodSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { stringify as toYaml } from 'yaml';
import { describeCheckpoints, resolveCheckpointConfig } from '../../audit/checkpoint-config';
import { defaultCheckpointName } from '../../audit/checkpointer';
import { agentKeyPin } from '../../core/agent-auth';
import { toBase64 } from '../../core/bytes';
import { keyHash } from '../../core/checkpoint';
import { WavegateError } from '../../core/errors';
import { keyPairFromSeed, pinOf, secretKeyFile } from '../../core/signing';
import { readPinnedKey } from '../../intake/checkpoint-keys';
import { scratchDir } from '../support/harness';
import { refusal } from '../support/refusal';

/**
 * `wavegate worker`'s checkpoint flags (audit/checkpoint-config.ts) and the keys `--witness-key` / `--log-key`
 * pin (intake/checkpoint-keys.ts): every bad value refused INVALID_INPUT (exit 2) naming the flag, never a byte
 * of the secret key; the forms a public key is given in all read the same key.
 */

const scratch = scratchDir('checkpoint-config');
afterAll(() => scratch.cleanup());

const pair = keyPairFromSeed(new Uint8Array(32).fill(51));
const witness = keyPairFromSeed(new Uint8Array(32).fill(52));
const SECRET = toBase64(pair.secretKey);

function file(name: string, text: string, mode = 0o600): string {
  const path = join(scratch.dir, name);
  writeFileSync(path, text, { mode });
  chmodSync(path, mode);
  return path;
}
const keyFile = file('cp.key', `${JSON.stringify(secretKeyFile(pair), null, 2)}\n`);

describe('resolveCheckpointConfig', () => {
  it('none without --checkpoint-key (the default); the key, its name (default the host name) and the witness with it', () => {
    expect(resolveCheckpointConfig({})).toBeUndefined();
    expect(describeCheckpoints(undefined)).toMatch(/^checkpoints: none \(no --checkpoint-key\)/);
    const config = resolveCheckpointConfig({
      checkpointKey: keyFile,
      witness: 'http://127.0.0.1:7380',
      witnessKey: agentKeyPin(witness.publicKey),
    })!;
    expect(config.name).toBe(defaultCheckpointName());
    expect(Buffer.from(config.pair.publicKey)).toEqual(Buffer.from(pair.publicKey));
    expect(config.witness).toEqual({ url: 'http://127.0.0.1:7380/', key: { publicKey: witness.publicKey } });
    const said = describeCheckpoints(config);
    expect(said).toContain(`(${agentKeyPin(pair.publicKey)}), cosigned by the witness http://127.0.0.1:7380/`);
    expect(said).not.toContain(SECRET);
    expect(describeCheckpoints({ pair, name: 'w1' })).toContain('no --witness, so every checkpoint is kept uncosigned');
    expect(defaultCheckpointName('host with space')).toBe('wavegate');
  });

  it.each([
    [{ witness: 'http://w:1' }, '--witness "http://w:1": needs --checkpoint-key'],
    [{ checkpointName: 'n' }, '--checkpoint-name "n": needs --checkpoint-key'],
    [{ checkpointKey: keyFile, witness: 'http://w:1' }, '--witness "http://w:1": needs --witness-key'],
    [{ checkpointKey: keyFile, witnessKey: 'ed25519:x' }, '--witness-key "ed25519:x": needs --witness <url>'],
    [{ checkpointKey: keyFile, checkpointName: 'two words' }, '--checkpoint-name "two words": a key name is'],
    [
      { checkpointKey: keyFile, witness: 'ftp://w:1', witnessKey: agentKeyPin(witness.publicKey) },
      '--witness "ftp://w:1": must be http:// or https://',
    ],
    [
      { checkpointKey: keyFile, witness: 'http://me:pw@w:1', witnessKey: agentKeyPin(witness.publicKey) },
      '--witness "w:1": no user or password in the URL',
    ],
    [
      { checkpointKey: keyFile, witness: 'http://w:1', witnessKey: 'ed25519:AAAA' },
      '--witness-key "ed25519:AAAA": ed25519: must be followed by the base64 of a 32-byte Ed25519 public key',
    ],
  ])('refuses %j naming the flag', (flags, message) => {
    const err = refusal(() => resolveCheckpointConfig(flags), WavegateError);
    expect(err.code).toBe('INVALID_INPUT');
    expect(err.message).toContain(message);
  });

  it('a key file others may read, one that is not a key file, and one whose secret is malformed: refused without a byte of it', () => {
    const open = file('open.key', `${JSON.stringify(secretKeyFile(pair))}\n`, 0o644);
    expect(refusal(() => resolveCheckpointConfig({ checkpointKey: open }), WavegateError).message).toContain(
      `--checkpoint-key "${open}": readable by others (mode 644); chmod 600 it`,
    );
    const garbage = file('garbage.key', `${SECRET} is not JSON\n`);
    const notJson = refusal(() => resolveCheckpointConfig({ checkpointKey: garbage }), WavegateError).message;
    expect(notJson).toContain('not a wavegate key file');
    const bad = file('bad.key', JSON.stringify({ ...secretKeyFile(pair), secretKey: `${SECRET.slice(0, 20)}!!` }));
    const malformed = refusal(() => resolveCheckpointConfig({ checkpointKey: bad }), WavegateError).message;
    expect(malformed).toContain('secretKey: must be the base64 of a 32-byte Ed25519 secret key (not shown)');
    for (const said of [notJson, malformed]) expect(said).not.toContain(SECRET.slice(0, 20));
  });
});

describe('readPinnedKey', () => {
  it('reads the same key from ed25519:<base64>, <name>=ed25519:…, a C2SP verifier key (inline or in a file) and a keygen pin file', () => {
    const vkey = `witness.e2e/w1+${Buffer.from(keyHash('witness.e2e/w1', witness.publicKey, 'witness')).toString('hex')}+${toBase64(Uint8Array.of(4, ...witness.publicKey))}`;
    const forms = [
      agentKeyPin(witness.publicKey),
      `w1=${agentKeyPin(witness.publicKey)}`,
      vkey,
      file('w.vkey', `${vkey}\n`),
      file('w.pub.yaml', toYaml(pinOf(witness, 'the witness'))),
    ];
    for (const form of forms)
      expect(Buffer.from(readPinnedKey('--witness-key', form, 'witness').publicKey), form).toEqual(
        Buffer.from(witness.publicKey),
      );
    expect(readPinnedKey('--witness-key', vkey, 'witness').name).toBe('witness.e2e/w1');
    expect(refusal(() => readPinnedKey('--log-key', vkey, 'log'), WavegateError).message).toContain(
      "a witness's key, where a log's is expected",
    );
    expect(
      refusal(() => readPinnedKey('--witness-key', vkey.replace('+', 'x+'), 'witness'), WavegateError).message,
    ).toContain('the key hash does not match the name and key');
    expect(refusal(() => readPinnedKey('--log-key', join(scratch.dir, 'nope'), 'log'), WavegateError).message).toMatch(
      /^--log-key .*nope/,
    );
  });
});
