import { writeKeyFile } from '../support/key-file';
import type { ChildProcess } from 'node:child_process';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringify as toYaml } from 'yaml';
import { requestCosignature } from '../../audit/witness-client';
import { agentKeyPin } from '../../core/agent-auth';
import { toBase64 } from '../../core/bytes';
import {
  type CheckpointKey,
  checkpointBody,
  checkpointOrigin,
  signCheckpoint,
  signedNote,
  verifyCheckpoint,
} from '../../core/checkpoint';
import { consistencyProof, leafHash, treeRoot } from '../../core/merkle';
import { keyPairFromSeed, pinOf } from '../../core/signing';
import { runCli, spawnCliUntil, stopChild } from '../support/cli';
import { scratchDir } from '../support/harness';

/**
 * The real `wavegate witness` process (compiled, as every process the tests start): it cosigns a first checkpoint
 * and a grown one with a valid consistency proof; refuses a fork, a rollback, a bad proof (409, naming the origin
 * and sizes), a checkpoint no pinned log key signed (403), malformed input (400); serializes one origin's
 * requests; keeps its state across kill -9; refuses bad flags with exit 2 naming the flag and value; and never
 * says its secret key. The requests go through audit/witness-client.ts, the client the worker will use.
 */

const scratch = scratchDir('witness');
afterAll(() => scratch.cleanup());

const LOG_NAME = 'wavegate-control-plane';
const logKey = keyPairFromSeed(new Uint8Array(32).fill(11));
const otherLog = keyPairFromSeed(new Uint8Array(32).fill(12));
const witnessKey = keyPairFromSeed(new Uint8Array(32).fill(13));
const WITNESS: CheckpointKey = { name: 'witness.test/w1', publicKey: witnessKey.publicKey, kind: 'witness' };

const witnessKeyFile = writeKeyFile(join(scratch.dir, 'witness.key'), witnessKey);
const logPinFile = join(scratch.dir, 'log.pub.yaml');
writeFileSync(logPinFile, toYaml(pinOf(logKey, 'control plane')));
const stateDir = join(scratch.dir, 'state');
const secretText = toBase64(witnessKey.secretKey);

/** A trail of n leaves; `fork` changes leaf 4 (so trees of 5 leaves and more differ from the trail's). */
const trail = (n: number, fork = false) =>
  Array.from({ length: n }, (_, i) => leafHash(Uint8Array.of(i, fork && i === 4 ? 1 : 0)));
const A = trail(20);
const B = trail(20, true);

/** The note of `origin`'s tree of `size` leaves of `hashes`, signed by `signer` under `name`. */
function note(origin: string, size: number, hashes = A, signer = logKey, name = LOG_NAME): string {
  const body = checkpointBody({ origin, size, root: treeRoot(hashes, size) });
  return signedNote(body, [signCheckpoint(body, signer, name)]);
}

interface Running {
  child: ChildProcess;
  url: string;
  output: () => string;
}

async function startWitness(): Promise<Running> {
  const { child, output } = await spawnCliUntil(
    [
      'witness',
      '--key',
      witnessKeyFile,
      '--state-dir',
      stateDir,
      '--log',
      `${LOG_NAME}=${logPinFile}`,
      '--log',
      `another-log=${agentKeyPin(keyPairFromSeed(new Uint8Array(32).fill(14)).publicKey)}`,
      '--name',
      WITNESS.name,
      '--listen',
      '127.0.0.1:0',
    ],
    /witness listening on http:\/\/127\.0\.0\.1:\d+/,
    60_000,
  );
  const url = /witness listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(output())![1]!;
  return { child, url, output };
}

/** Ask for a cosignature; on success, check it verifies under the witness's key for exactly this checkpoint. */
async function ask(url: string, text: string, proof: Uint8Array[] = []) {
  const answer = await requestCosignature(url, text, proof, { timeoutMs: 20_000 });
  if (answer.ok) {
    const cosigned = verifyCheckpoint(`${text}${answer.lines.join('')}`, [WITNESS]);
    expect(cosigned).toMatchObject({ ok: true, signers: [{ name: WITNESS.name, kind: 'witness' }] });
  }
  return answer;
}

describe('wavegate witness', () => {
  let witness: Running;
  const origin = checkpointOrigin('rollout:web:20260102-030405');
  beforeAll(async () => {
    witness = await startWitness();
  }, 90_000);
  afterAll(async () => {
    if (witness) await stopChild(witness.child);
  });

  it('cosigns a first checkpoint, a grown one with a valid consistency proof, and the same one again', async () => {
    expect(await ask(witness.url, note(origin, 5))).toMatchObject({ ok: true, lines: [expect.any(String)] });
    expect(await ask(witness.url, note(origin, 8), consistencyProof(A, 5, 8))).toMatchObject({ ok: true });
    expect(await ask(witness.url, note(origin, 8))).toMatchObject({ ok: true });
    expect(witness.output()).toContain(`cosigned ${origin} size 8 (grown from 5)`);
    // The state is the file of the origin: size 8, the trail's root, written before the answer.
    const files = readdirSync(stateDir).filter((f) => f.endsWith('.json'));
    expect(files).toHaveLength(1);
    expect(JSON.parse(readFileSync(join(stateDir, files[0]!), 'utf8'))).toMatchObject({
      origin,
      size: 8,
      root: toBase64(treeRoot(A, 8)),
    });
  });

  it('refuses a fork (the same size, another root), a rollback (a smaller size) and a bad proof: 409 naming the origin and sizes', async () => {
    expect(await ask(witness.url, note(origin, 8, B))).toMatchObject({
      ok: false,
      code: 'CONFLICT',
      status: 409,
      witnessCode: 'CONFLICT',
      message: expect.stringContaining(`${origin}: size 8 with another root than the one this witness cosigned`),
    });
    expect(await ask(witness.url, note(origin, 6))).toMatchObject({
      status: 409,
      message: expect.stringContaining(`${origin}: size 6 is below size 8 this witness cosigned`),
    });
    // Grown, but the trail below 8 rewritten: its own proof from 8 does not lead to the cosigned root.
    expect(await ask(witness.url, note(origin, 12, B), consistencyProof(B, 8, 12))).toMatchObject({
      status: 409,
      message: expect.stringContaining(`${origin}: the consistency proof from size 8 (cosigned) to 12 does not hold`),
    });
    const proof = consistencyProof(A, 8, 12);
    proof[0] = proof[0]!.map((b, i) => (i === 0 ? b ^ 1 : b));
    expect(await ask(witness.url, note(origin, 12), proof)).toMatchObject({ status: 409 });
    expect(await ask(witness.url, note(origin, 12))).toMatchObject({ status: 409 });
    // None of them moved the state: the true extension is still cosigned.
    expect(await ask(witness.url, note(origin, 12), consistencyProof(A, 8, 12))).toMatchObject({ ok: true });
  });

  it('refuses a checkpoint signed by a key it does not pin (403), or under a pinned name with another key', async () => {
    const other = checkpointOrigin('rollout:web:20260102-030406');
    expect(await ask(witness.url, note(other, 5, A, otherLog, 'intruder'))).toMatchObject({
      ok: false,
      status: 403,
      witnessCode: 'FORBIDDEN',
      message: expect.stringContaining(`${other} (size 5): signed by no log key this witness pins`),
    });
    expect(await ask(witness.url, note(other, 5, A, otherLog))).toMatchObject({ status: 403 });
    // Nothing was recorded for that origin: a checkpoint the real log signs is its first.
    expect(await ask(witness.url, note(other, 5, B))).toMatchObject({ ok: true });
  });

  it('refuses malformed input with 400 naming the field or line, and an oversized body with 413', async () => {
    expect(await ask(witness.url, 'not a checkpoint')).toMatchObject({
      status: 400,
      message: expect.stringContaining('checkpoint: no blank line'),
    });
    const text = note(origin, 12).replace('\n12\n', '\n012\n');
    expect(await ask(witness.url, text)).toMatchObject({ status: 400, message: expect.stringContaining('line 2') });
    const res = await fetch(`${witness.url}/v1/add-checkpoint`, {
      method: 'POST',
      body: JSON.stringify({ checkpoint: note(origin, 12), proof: ['AAAA'] }),
    });
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({ code: 'INVALID_INPUT', message: expect.stringContaining('proof[0]') });
    const big = await fetch(`${witness.url}/v1/add-checkpoint`, { method: 'POST', body: 'x'.repeat(70_000) });
    expect(big.status).toBe(413);
    expect((await fetch(`${witness.url}/v1/add-checkpoint`)).status).toBe(405);
  });

  it("serializes one origin's requests: of two forks asked at once, one tree is cosigned, the other refused", async () => {
    const raced = checkpointOrigin('rollout:web:20260102-030407');
    expect(await ask(witness.url, note(raced, 4))).toMatchObject({ ok: true }); // A and B agree below 5
    const asks = Array.from({ length: 16 }, (_, i) =>
      i % 2 === 0
        ? ask(witness.url, note(raced, 10), consistencyProof(A, 4, 10))
        : ask(witness.url, note(raced, 10, B), consistencyProof(B, 4, 10)),
    );
    const answers = await Promise.all(asks);
    const cosignedA = answers.filter((a, i) => a.ok && i % 2 === 0).length;
    const cosignedB = answers.filter((a, i) => a.ok && i % 2 === 1).length;
    // Every ask of the winner's tree is cosigned, every ask of the other refused as a fork.
    expect([cosignedA, cosignedB].sort()).toEqual([0, 8]);
    expect(answers.filter((a) => !a.ok).every((a) => !a.ok && a.code === 'CONFLICT')).toBe(true);
  });

  it('its state survives kill -9: after a restart a fork is still refused and the cosigned tree cosigned again', async () => {
    witness.child.kill('SIGKILL');
    await new Promise((r) => (witness.child.exitCode === null ? witness.child.once('exit', r) : r(undefined)));
    witness = await startWitness();
    expect(await ask(witness.url, note(origin, 12, B))).toMatchObject({
      status: 409,
      message: expect.stringContaining(`${origin}: size 12 with another root`),
    });
    expect(await ask(witness.url, note(origin, 8))).toMatchObject({ status: 409 });
    expect(await ask(witness.url, note(origin, 12))).toMatchObject({ ok: true });
  }, 90_000);

  it('never says its secret key: not at start, not in an answer, not in its log', async () => {
    expect(witness.output()).toContain(`public key ${agentKeyPin(witnessKey.publicKey)}`);
    expect(witness.output()).not.toContain(secretText);
    const answer = await ask(witness.url, note(origin, 12));
    expect(JSON.stringify(answer)).not.toContain(secretText);
  });
});

describe('wavegate witness: bad flags exit 2 naming the flag and value, and start nothing', () => {
  const base = () => ['witness', '--key', witnessKeyFile, '--state-dir', join(scratch.dir, 'flags-state')];
  const logFlag = ['--log', `${LOG_NAME}=${logPinFile}`];
  const loose = writeKeyFile(join(scratch.dir, 'loose.key'), witnessKey, 0o644);
  const aFile = join(scratch.dir, 'a-file');
  writeFileSync(aFile, 'x');

  it.each([
    [
      'a --listen that is not host:port',
      [...base(), ...logFlag, '--listen', 'nowhere'],
      /--listen: must be host:port .*\(got "nowhere"\)/,
    ],
    ['a --log without a name', [...base(), '--log', logPinFile], /--log ".*log\.pub\.yaml": must be <key name>=/],
    [
      'a --log key that is not 32 bytes',
      [...base(), '--log', 'x=ed25519:AAAA'],
      /--log "x=ed25519:AAAA": the key must be/,
    ],
    [
      'a --log pin file that is missing',
      [...base(), '--log', `x=${aFile}.missing`],
      /--log .*a-file\.missing: cannot read file/,
    ],
    [
      'a --log name given twice',
      [...base(), ...logFlag, ...logFlag],
      /--log "wavegate-control-plane": this key name is given twice/,
    ],
    [
      'a --key readable by others',
      ['witness', '--key', loose, '--state-dir', aFile, ...logFlag],
      /--key ".*loose\.key": readable by others \(mode 644\)/,
    ],
    [
      'a --state-dir that is a file',
      ['witness', '--key', witnessKeyFile, '--state-dir', aFile, ...logFlag],
      /--state-dir .*a-file: is not a directory/,
    ],
    ['a --name with a space', [...base(), ...logFlag, '--name', 'my witness'], /--name "my witness": a key name/],
    ['no --log', base(), /required option '--log <name=key>' not specified/],
  ])('%s', async (_, args, message) => {
    const run = await runCli(args, { timeoutMs: 60_000 });
    expect(run.code).toBe(2);
    expect(run.stderr).toMatch(message);
    expect(run.stdout).not.toContain('listening');
  });
});
