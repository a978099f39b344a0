import { ed25519 } from '@noble/curves/ed25519.js';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { fromBase64, toBase64 } from '../../../core/bytes';
import {
  type Checkpoint,
  type CheckpointKey,
  checkpointBody,
  checkpointOrigin,
  cosign,
  cosignatureMessage,
  keyHash,
  MAX_NOTE_BYTES,
  parseCheckpoint,
  signCheckpoint,
  signedNote,
  verifyCheckpoint,
} from '../../../core/checkpoint';
import { EMPTY_ROOT, leafHash, treeRoot } from '../../../core/merkle';
import { keyPairFromSeed } from '../../../core/signing';

/**
 * core/checkpoint.ts: the checkpoint as a C2SP signed note, the log's signature and a witness's cosignature,
 * the strict bounded parser and the verifier. The key hash and the signature line are checked against known
 * answers of the Go ecosystem (golang.org/x/mod/sumdb/note's PeterNeumann key and signed note; a cosignature/v1
 * verifier key of transparency-dev/formats), so a C2SP tool reads wavegate's notes.
 */

const log = keyPairFromSeed(new Uint8Array(32).fill(1));
const witness = keyPairFromSeed(new Uint8Array(32).fill(2));
const stranger = keyPairFromSeed(new Uint8Array(32).fill(3));
const LOG_NAME = 'wavegate-control-plane';
const WITNESS_NAME = 'witness.example/w1';
const keys: CheckpointKey[] = [
  { name: LOG_NAME, publicKey: log.publicKey, kind: 'log' },
  { name: WITNESS_NAME, publicKey: witness.publicKey, kind: 'witness' },
];
const cp: Checkpoint = {
  origin: checkpointOrigin('rollout:web:20260102-030405'),
  size: 5,
  root: treeRoot([1, 2, 3, 4, 5].map((n) => leafHash(Uint8Array.of(n)))),
};
const body = checkpointBody(cp);
const TIME = 1_767_000_000;
const note = signedNote(body, [signCheckpoint(body, log, LOG_NAME), cosign(body, witness, WITNESS_NAME, TIME)]);

describe('checkpoint: known answers of the C2SP ecosystem', () => {
  it('the key hash of a log key is SHA-256(name || 0x0A || 0x01 || key)[:4], and its line is the Go note signature', () => {
    // golang.org/x/mod/sumdb/note: PRIVATE+KEY+PeterNeumann+c74f20a3+<0x01 || seed>, and its signed note.
    const seed = fromBase64('AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz')!.subarray(1);
    const pair = keyPairFromSeed(seed);
    expect(toBase64(Uint8Array.of(1, ...pair.publicKey))).toBe('ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW');
    expect(Buffer.from(keyHash('PeterNeumann', pair.publicKey, 'log')).toString('hex')).toBe('c74f20a3');
    const text =
      "If you think cryptography is the answer to your problem,\nthen you don't know what your problem is.\n";
    const bytes = Uint8Array.of(
      ...keyHash('PeterNeumann', pair.publicKey, 'log'),
      ...ed25519.sign(new TextEncoder().encode(text), seed),
    );
    expect(toBase64(bytes)).toBe(
      'x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=',
    );
  });

  it('the key hash of a witness key takes the cosignature type 0x04 (transparency-dev/formats remora.n621.de)', () => {
    const typeAndKey = fromBase64('BOvN63jn/bLvkieywe8R6UYAtVtNbZpXh34x7onlmtw2')!;
    expect(typeAndKey[0]).toBe(4);
    expect(Buffer.from(keyHash('remora.n621.de', typeAndKey.subarray(1), 'witness')).toString('hex')).toBe('da77ade7');
  });
});

describe('checkpoint: the text, the signatures, the cosignature', () => {
  it('the body is origin, size and base64 root, each on its line; the note adds a blank line and the signatures', () => {
    expect(body).toBe(`wavegate/rollout:web:20260102-030405\n5\n${toBase64(cp.root)}\n`);
    const lines = note.split('\n');
    expect(lines.slice(3, 4)).toEqual(['']);
    expect(lines[4]).toMatch(/^— wavegate-control-plane [A-Za-z0-9+/]{91}=$/);
    expect(lines[5]).toMatch(/^— witness\.example\/w1 [A-Za-z0-9+/]{100}[A-Za-z0-9+/=]{4}$/);
    expect(lines[6]).toBe('');
    // The log signs the body; the witness the cosignature/v1 message; each line carries its key hash first.
    const logSig = fromBase64(lines[4]!.split(' ')[2]!)!;
    expect(logSig.subarray(0, 4)).toEqual(keyHash(LOG_NAME, log.publicKey, 'log'));
    expect(ed25519.verify(logSig.subarray(4), new TextEncoder().encode(body), log.publicKey)).toBe(true);
    const cosig = fromBase64(lines[5]!.split(' ')[2]!)!;
    expect(cosig).toHaveLength(76);
    expect(cosig.subarray(0, 4)).toEqual(keyHash(WITNESS_NAME, witness.publicKey, 'witness'));
    expect(Number(new DataView(cosig.buffer, cosig.byteOffset + 4, 8).getBigUint64(0))).toBe(TIME);
    const message = `cosignature/v1\ntime ${TIME}\n${body}`;
    expect(cosignatureMessage(body, TIME)).toBe(message);
    expect(ed25519.verify(cosig.subarray(12), new TextEncoder().encode(message), witness.publicKey)).toBe(true);
  });

  it('verifyCheckpoint names who signed validly, with the cosignature time', () => {
    expect(verifyCheckpoint(note, keys)).toEqual({
      ok: true,
      checkpoint: cp,
      body,
      signers: [
        { name: LOG_NAME, kind: 'log' },
        { name: WITNESS_NAME, kind: 'witness', time: TIME },
      ],
    });
    // Only the log's key known: the witness's line is ignored, not refused.
    expect(verifyCheckpoint(note, keys.slice(0, 1))).toMatchObject({ ok: true, signers: [{ name: LOG_NAME }] });
  });

  it('a changed size, root or origin fails the known keys naming the line; a note no known key signed is NO_KNOWN_KEY', () => {
    const lines = note.split('\n');
    for (const [i, changed] of [
      [1, '6'],
      [2, toBase64(EMPTY_ROOT)],
      [0, 'wavegate/rollout:web:20260102-030405-2'],
    ] as const) {
      const forged = lines.map((l, j) => (j === i ? changed : l)).join('\n');
      expect(verifyCheckpoint(forged, keys)).toMatchObject({
        ok: false,
        reason: 'BAD_SIGNATURE',
        line: 5,
        message: expect.stringContaining('the signature of wavegate-control-plane does not verify'),
      });
    }
    // A cosignature whose time was changed no longer verifies.
    const cosig = fromBase64(lines[5]!.split(' ')[2]!)!;
    cosig[11]! ^= 1;
    const moved = [...lines.slice(0, 5), `— ${WITNESS_NAME} ${toBase64(cosig)}`, ''].join('\n');
    expect(verifyCheckpoint(moved, keys)).toMatchObject({ ok: false, reason: 'BAD_SIGNATURE', line: 6 });
    const strangers = signedNote(body, [signCheckpoint(body, stranger, LOG_NAME)]);
    expect(verifyCheckpoint(strangers, keys)).toMatchObject({
      ok: false,
      reason: 'NO_KNOWN_KEY',
      message: 'signed by no known key (signature lines of: wavegate-control-plane)',
    });
    // The witness's key cannot stand in for the log's: the type byte differs, so the key hash does.
    const swapped: CheckpointKey[] = [{ name: WITNESS_NAME, publicKey: witness.publicKey, kind: 'log' }];
    expect(verifyCheckpoint(note, swapped)).toMatchObject({ ok: false, reason: 'NO_KNOWN_KEY' });
  });

  it('signing refuses a body that is not a checkpoint and a key name with a space or "+"', () => {
    expect(() => signCheckpoint('hello\n', log, LOG_NAME)).toThrow(/body: a checkpoint is 3 lines/);
    expect(() => signCheckpoint(body, log, 'a name')).toThrow(/name: a key name is 1-128 printable ASCII/);
    expect(() => cosign(body, witness, 'a+b', TIME)).toThrow(/name: /);
    expect(() => cosign(body, witness, WITNESS_NAME, -1)).toThrow(/time: must be whole seconds/);
    expect(() => checkpointBody({ ...cp, origin: 'rollout:web' })).toThrow(/origin: must be "wavegate\/"/);
    expect(() => checkpointBody({ ...cp, size: 1.5 })).toThrow(/size: must be a whole number/);
    expect(() => checkpointBody({ ...cp, root: new Uint8Array(31) })).toThrow(/root: must be a 32-byte hash/);
  });
});

describe('checkpoint: the parser is strict, bounded, names the line, and never throws', () => {
  const lines = note.split('\n');
  const refused = (text: unknown) => {
    const r = parseCheckpoint(text);
    expect(r.ok).toBe(false);
    return r.ok ? '' : r.message;
  };

  it.each([
    ['a size with a leading zero', lines.map((l, i) => (i === 1 ? '05' : l)).join('\n'), /^line 2: the tree size/],
    ['a negative size', lines.map((l, i) => (i === 1 ? '-5' : l)).join('\n'), /^line 2: /],
    ['a root of 31 bytes', lines.map((l, i) => (i === 2 ? toBase64(new Uint8Array(31)) : l)).join('\n'), /^line 3: /],
    ['an origin of another log', lines.map((l, i) => (i === 0 ? 'example.com/log' : l)).join('\n'), /^line 1: /],
    ['an extension line', [...lines.slice(0, 3), 'extra', ...lines.slice(3)].join('\n'), /^line 4: extension lines/],
    ['a hyphen for the em dash', lines.map((l, i) => (i === 4 ? l.replace('—', '-') : l)).join('\n'), /^line 5: /],
    ['a signature not base64', lines.map((l, i) => (i === 5 ? `${l}!` : l)).join('\n'), /^line 6: /],
    ['a carriage return', note.replace('\n5\n', '\n5\r\n'), /^line 2: a control character \(U\+000d\)/],
    ['no signature', `${body}\n`, /^line 4: no signature line/],
    ['a blank line after the signatures', `${note}\n`, /^line 7: a blank line after the signatures/],
    ['no blank line', body, /no blank line/],
    ['a last line without its newline', note.slice(0, -1), /^line 6: the last signature line must end/],
    ['17 signature lines', signedNote(body, Array(17).fill(`${lines[4]}\n`)), /^line 21: 17 signature lines/],
    ['more than 8 KB', `${note}${'x'.repeat(MAX_NOTE_BYTES)}`, /above the limit of 8192 bytes/],
    ['a lone surrogate', note.replace('wavegate-control-plane', '\ud800'), /not valid UTF-8/],
    ['not text', 42, /must be text/],
  ])('%s', (_, text, message) => {
    expect(refused(text)).toMatch(message);
  });

  it('16 signature lines are read (the C2SP minimum)', () => {
    const many = signedNote(body, Array(16).fill(`${lines[4]}\n`));
    expect(parseCheckpoint(many)).toMatchObject({ ok: true, note: { signatures: { length: 16 } } });
  });

  it('any text, or any change of one character of a signed note: a value, never a throw; no forgery verifies', () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 400 }), (text) => {
        expect(typeof parseCheckpoint(text).ok).toBe('boolean');
        expect(verifyCheckpoint(text, keys).ok).toBe(false);
      }),
    );
    fc.assert(
      fc.property(fc.nat(note.length - 1), fc.string({ minLength: 1, maxLength: 1 }), (at, ch) => {
        fc.pre(note[at] !== ch);
        const changed = note.slice(0, at) + ch + note.slice(at + 1);
        const r = verifyCheckpoint(changed, keys);
        // Either refused, or only the witness's line was broken beyond recognition (then ignored) and the
        // checkpoint is still the one the log signed.
        if (r.ok) expect(r.checkpoint).toEqual(cp);
      }),
    );
  });
});
