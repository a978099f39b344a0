import { sha256 } from '@noble/hashes/sha2.js';
import { bytesEqual, fromBase64, toBase64, utf8Encode } from './bytes';
import { WavegateError } from './errors';
import { HASH_BYTES } from './merkle';
import { ed25519, ed25519Verify, type KeyPair } from './signing';

/**
 * Checkpoints of an audit trail (docs/formats.md, "Checkpoints and the witness"): the trail's Merkle tree
 * (core/merkle.ts) at one size, as a C2SP signed note (c2sp.org/signed-note, c2sp.org/tlog-checkpoint), signed by
 * the control plane and cosigned by witnesses (c2sp.org/tlog-cosignature, the Ed25519 `cosignature/v1` form):
 *
 *   wavegate/<rollout id>                       the origin: one tree per rollout's trail
 *   <size>                                      decimal, no leading zero
 *   <base64 root>                               the tree's root (32 bytes)
 *                                               a blank line, then one line per signature:
 *   — <key name> <base64(key hash[4] || Ed25519 signature[64])>                     the log's, over the body
 *   — <key name> <base64(key hash[4] || time[8, big-endian] || signature[64])>    a witness's, over
 *                                               "cosignature/v1\ntime <time>\n" + the body
 *
 * The key hash is SHA-256(name || 0x0A || type || 32-byte public key)[:4], type 0x01 for a log's signature and
 * 0x04 for a witness's cosignature (C2SP's signature types). Keys are the project's Ed25519 key files
 * (core/signing.ts KeyPair, `wavegate keygen`); the key name is given beside the key, as C2SP verifiers are
 * configured with (name, public key).
 *
 *   checkpointOrigin(rolloutId) / checkpointBody({ origin, size, root })      the text signed
 *   signCheckpoint(body, pair, name)        the log's signature line
 *   cosign(body, pair, name, timeSeconds)   a witness's cosignature line
 *   signedNote(body, lines)                 body + blank line + signature lines
 *   parseCheckpoint(note)                   strict and bounded (8 KB, 16 signature lines); a value, never a throw
 *   verifyCheckpoint(note, keys)            which of `keys` signed validly; a value, never a throw
 *
 * Pure (@noble, no Node API): safe in workflow code.
 */

export const ORIGIN_PREFIX = 'wavegate/';
/** The largest note parseCheckpoint reads: 16 signatures of ~120 bytes and a body of ~300 fit many times over. */
export const MAX_NOTE_BYTES = 8 * 1024;
/** C2SP signed-note: a verifier must accept at least 16 signatures; wavegate's notes carry a log's and a few witnesses'. */
export const MAX_SIGNATURE_LINES = 16;

/** `wavegate/` and a rollout id (core/rollout-id.ts, and the runs and converges made of the same characters). */
const ORIGIN = /^wavegate\/[A-Za-z0-9][A-Za-z0-9:._@/-]{0,199}$/;
/** C2SP key names: no space, no `+`; wavegate keeps them to printable ASCII of at most 128 characters. */
const KEY_NAME = /^[\x21-\x2a\x2c-\x7e]{1,128}$/;
const SIZE = /^(0|[1-9][0-9]{0,15})$/;
const DASH = '\u2014 ';
const SIGNATURE_BYTES = 64;
const TIME_BYTES = 8;

export interface Checkpoint {
  origin: string;
  size: number;
  root: Uint8Array;
}

/** Who signed: the trail's log (the control plane) or a witness. */
export type SignerKind = 'log' | 'witness';

/** C2SP signature type bytes: 0x01 Ed25519 over the note, 0x04 a timestamped Ed25519 cosignature. */
const TYPE_BYTE: Record<SignerKind, number> = { log: 0x01, witness: 0x04 };

export interface CheckpointKey {
  name: string;
  publicKey: Uint8Array;
  kind: SignerKind;
}

export function checkpointOrigin(rolloutId: string): string {
  return `${ORIGIN_PREFIX}${rolloutId}`;
}

const invalid = (field: string, message: string, value?: unknown) =>
  new WavegateError('INVALID_INPUT', `${field}: ${message}`, { field, ...(value === undefined ? {} : { value }) });

/** The note text of a checkpoint: origin, size, base64 root, each ending in a newline. INVALID_INPUT naming the field. */
export function checkpointBody(cp: Checkpoint): string {
  if (!ORIGIN.test(cp.origin))
    throw invalid('origin', `must be "wavegate/" and a rollout id (got ${JSON.stringify(cp.origin.slice(0, 80))})`);
  if (!Number.isSafeInteger(cp.size) || cp.size < 0)
    throw invalid('size', `must be a whole number ≥ 0 (got ${cp.size})`, cp.size);
  if (!(cp.root instanceof Uint8Array) || cp.root.length !== HASH_BYTES)
    throw invalid('root', `must be a ${HASH_BYTES}-byte hash`);
  return `${cp.origin}\n${cp.size}\n${toBase64(cp.root)}\n`;
}

/** The 4-byte key hash of C2SP signed notes: SHA-256(name || 0x0A || type || public key)[:4]. */
export function keyHash(name: string, publicKey: Uint8Array, kind: SignerKind): Uint8Array {
  const nameBytes = utf8Encode(name);
  const input = new Uint8Array(nameBytes.length + 2 + publicKey.length);
  input.set(nameBytes, 0);
  input[nameBytes.length] = 0x0a;
  input[nameBytes.length + 1] = TYPE_BYTE[kind];
  input.set(publicKey, nameBytes.length + 2);
  return sha256(input).subarray(0, 4);
}

/** What a witness signs (c2sp.org/tlog-cosignature, Ed25519): the header, the time line, then the body. */
export function cosignatureMessage(body: string, timeSeconds: number): string {
  return `cosignature/v1\ntime ${timeSeconds}\n${body}`;
}

function checkSigning(body: string, name: string): void {
  if (!KEY_NAME.test(name))
    throw invalid(
      'name',
      `a key name is 1-128 printable ASCII characters, no space or "+" (got ${JSON.stringify(name)})`,
    );
  const parsed = parseBody(body, 1);
  if (!parsed.ok) throw invalid('body', parsed.message);
}

function signatureLine(name: string, bytes: Uint8Array): string {
  return `${DASH}${name} ${toBase64(bytes)}\n`;
}

/** The log's signature line over `body` (a checkpointBody): `— <name> <base64(key hash || signature)>\n`. */
export function signCheckpoint(body: string, pair: KeyPair, name: string): string {
  checkSigning(body, name);
  const sig = ed25519().sign(utf8Encode(body), pair.secretKey);
  const bytes = new Uint8Array(4 + SIGNATURE_BYTES);
  bytes.set(keyHash(name, pair.publicKey, 'log'), 0);
  bytes.set(sig, 4);
  return signatureLine(name, bytes);
}

/** A witness's cosignature line over `body` at `timeSeconds` (POSIX seconds): key hash, time, signature. */
export function cosign(body: string, pair: KeyPair, name: string, timeSeconds: number): string {
  checkSigning(body, name);
  if (!Number.isSafeInteger(timeSeconds) || timeSeconds < 0)
    throw invalid('time', `must be whole seconds since the epoch (got ${timeSeconds})`, timeSeconds);
  const sig = ed25519().sign(utf8Encode(cosignatureMessage(body, timeSeconds)), pair.secretKey);
  const bytes = new Uint8Array(4 + TIME_BYTES + SIGNATURE_BYTES);
  bytes.set(keyHash(name, pair.publicKey, 'witness'), 0);
  new DataView(bytes.buffer).setBigUint64(4, BigInt(timeSeconds));
  bytes.set(sig, 4 + TIME_BYTES);
  return signatureLine(name, bytes);
}

/** The signed note: the body, a blank line, the signature lines (each ending in a newline). */
export function signedNote(body: string, lines: readonly string[]): string {
  return `${body}\n${lines.join('')}`;
}

export interface SignatureLine {
  /** 1-based, in the whole note. */
  line: number;
  name: string;
  keyHash: Uint8Array;
  /** What follows the key hash: the signature (a log's), or the time and the signature (a cosignature). */
  rest: Uint8Array;
}

export interface ParsedCheckpoint {
  /** The note text the log signed: three lines, each ending in a newline. */
  body: string;
  checkpoint: Checkpoint;
  signatures: SignatureLine[];
}

export type CheckpointParse =
  | { ok: true; note: ParsedCheckpoint }
  | { ok: false; code: 'INVALID_INPUT'; message: string; line?: number };

const malformed = (message: string, line?: number): Extract<CheckpointParse, { ok: false }> => ({
  ok: false,
  code: 'INVALID_INPUT',
  message: line === undefined ? message : `line ${line}: ${message}`,
  ...(line === undefined ? {} : { line }),
});

/** The body's three lines (origin, size, root), or why not; `first` is the body's first line number in the note. */
function parseBody(
  body: string,
  first: number,
): { ok: true; checkpoint: Checkpoint } | Extract<CheckpointParse, { ok: false }> {
  if (!body.endsWith('\n')) return malformed('the checkpoint must end in a newline');
  const lines = body.slice(0, -1).split('\n');
  if (lines.length < 3) return malformed(`a checkpoint is 3 lines (origin, size, root); got ${lines.length}`);
  if (lines.length > 3) return malformed('extension lines are not part of a wavegate checkpoint', first + 3);
  const [origin, sizeText, rootText] = lines as [string, string, string];
  if (!ORIGIN.test(origin))
    return malformed(
      `the origin must be "wavegate/" and a rollout id (got ${JSON.stringify(origin.slice(0, 80))})`,
      first,
    );
  const size = Number(sizeText);
  if (!SIZE.test(sizeText) || !Number.isSafeInteger(size))
    return malformed(
      `the tree size must be a decimal number without leading zeros (got ${JSON.stringify(sizeText.slice(0, 40))})`,
      first + 1,
    );
  const root = fromBase64(rootText);
  if (root?.length !== HASH_BYTES)
    return malformed(
      `the root must be the base64 of ${HASH_BYTES} bytes (got ${JSON.stringify(rootText.slice(0, 60))})`,
      first + 2,
    );
  return { ok: true, checkpoint: { origin, size, root } };
}

/** One signature line, or why not. */
function parseSignatureLine(text: string, line: number): SignatureLine | Extract<CheckpointParse, { ok: false }> {
  if (!text.startsWith(DASH)) return malformed('a signature line starts with "— " (an em dash and a space)', line);
  const parts = text.slice(DASH.length).split(' ');
  if (parts.length !== 2) return malformed('a signature line is "— <key name> <base64 signature>"', line);
  const [name, encoded] = parts as [string, string];
  if (!KEY_NAME.test(name))
    return malformed(
      `the key name must be 1-128 printable ASCII characters, no space or "+" (got ${JSON.stringify(name.slice(0, 40))})`,
      line,
    );
  const bytes = fromBase64(encoded);
  if (!bytes || bytes.length < 5)
    return malformed(`the signature of ${name} is not base64 of a key hash and a signature`, line);
  return { line, name, keyHash: bytes.subarray(0, 4), rest: bytes.subarray(4) };
}

/**
 * A checkpoint note, strictly: UTF-8 of at most MAX_NOTE_BYTES, no control character but newlines, the body's
 * three lines, a blank line, 1 to MAX_SIGNATURE_LINES signature lines. Refusals name the line. Never throws.
 */
export function parseCheckpoint(note: unknown): CheckpointParse {
  if (typeof note !== 'string') return malformed('a checkpoint note must be text');
  if (note.length > MAX_NOTE_BYTES || utf8Encode(note).length > MAX_NOTE_BYTES)
    return malformed(`the note is above the limit of ${MAX_NOTE_BYTES} bytes`);
  // A lone surrogate has no UTF-8 form: the bytes signed would not be this text.
  if (/\p{Cs}/u.test(note)) return malformed('the note is not valid UTF-8 text');
  const control = /[\x00-\x09\x0b-\x1f\x7f]/.exec(note);
  if (control)
    return malformed(
      `a control character (U+${control[0].charCodeAt(0).toString(16).padStart(4, '0')}) is not allowed in a note`,
      note.slice(0, control.index).split('\n').length,
    );
  // C2SP: the text ends at the last blank line; what follows it is the signatures.
  const split = note.lastIndexOf('\n\n');
  if (split < 0) return malformed('no blank line between the checkpoint and its signatures');
  if (split === note.length - 2)
    return malformed(
      note.lastIndexOf('\n\n', split - 1) >= 0 ? 'a blank line after the signatures' : 'no signature line',
      note.split('\n').length - 1,
    );
  const body = note.slice(0, split + 1);
  const parsed = parseBody(body, 1);
  if (!parsed.ok) return parsed;
  const first = body.split('\n').length + 1;
  const rest = note.slice(split + 2);
  if (!rest.endsWith('\n'))
    return malformed('the last signature line must end in a newline', first + rest.split('\n').length - 1);
  const lines = rest.slice(0, -1).split('\n');
  if (lines.length > MAX_SIGNATURE_LINES)
    return malformed(
      `${lines.length} signature lines, above the limit of ${MAX_SIGNATURE_LINES}`,
      first + MAX_SIGNATURE_LINES,
    );
  const signatures: SignatureLine[] = [];
  for (const [i, text] of lines.entries()) {
    const sig = parseSignatureLine(text, first + i);
    if ('ok' in sig) return sig;
    signatures.push(sig);
  }
  return { ok: true, note: { body, checkpoint: parsed.checkpoint, signatures } };
}

export interface CheckpointSigner {
  name: string;
  kind: SignerKind;
  /** A cosignature's time, POSIX seconds (C2SP: as of then, this was the largest tree the witness saw). */
  time?: number;
}

export type CheckpointVerification =
  | { ok: true; checkpoint: Checkpoint; body: string; signers: CheckpointSigner[] }
  | { ok: false; reason: 'MALFORMED' | 'BAD_SIGNATURE' | 'NO_KNOWN_KEY'; message: string; line?: number };

/** Does `sig` verify as `key`'s (whose key hash it carries)? */
function signatureValid(body: string, key: CheckpointKey, sig: SignatureLine): { valid: boolean; time?: number } {
  if (key.kind === 'log') {
    if (sig.rest.length !== SIGNATURE_BYTES) return { valid: false };
    return { valid: ed25519Verify(sig.rest, utf8Encode(body), key.publicKey) };
  }
  if (sig.rest.length !== TIME_BYTES + SIGNATURE_BYTES) return { valid: false };
  const time = new DataView(sig.rest.buffer, sig.rest.byteOffset, TIME_BYTES).getBigUint64(0);
  if (time > BigInt(Number.MAX_SAFE_INTEGER)) return { valid: false };
  const message = utf8Encode(cosignatureMessage(body, Number(time)));
  return { valid: ed25519Verify(sig.rest.subarray(TIME_BYTES), message, key.publicKey), time: Number(time) };
}

/**
 * Which of `keys` signed the note validly (each named once). As C2SP says: a line of an unknown key (its name and
 * key hash match none of `keys`) is ignored; a line of a known key that does not verify fails the whole note
 * (BAD_SIGNATURE, naming the key and the line); a note no known key signed is NO_KNOWN_KEY. A caller still
 * checks that the signers it needs are among `signers` (the log's key; a witness's). Never throws.
 */
export function verifyCheckpoint(
  note: string | ParsedCheckpoint,
  keys: readonly CheckpointKey[],
): CheckpointVerification {
  let parsed: ParsedCheckpoint;
  if (typeof note === 'string') {
    const result = parseCheckpoint(note);
    if (!result.ok)
      return { ok: false, reason: 'MALFORMED', message: result.message, ...(result.line ? { line: result.line } : {}) };
    parsed = result.note;
  } else parsed = note;
  const signers: CheckpointSigner[] = [];
  for (const sig of parsed.signatures) {
    for (const key of keys) {
      if (key.name !== sig.name || !bytesEqual(keyHash(key.name, key.publicKey, key.kind), sig.keyHash)) continue;
      const { valid, time } = signatureValid(parsed.body, key, sig);
      if (!valid)
        return {
          ok: false,
          reason: 'BAD_SIGNATURE',
          message: `line ${sig.line}: the ${key.kind === 'log' ? 'signature' : 'cosignature'} of ${key.name} does not verify over this checkpoint (a changed checkpoint or signature)`,
          line: sig.line,
        };
      if (!signers.some((s) => s.name === key.name && s.kind === key.kind))
        signers.push({ name: key.name, kind: key.kind, ...(time === undefined ? {} : { time }) });
    }
  }
  if (!signers.length) {
    const names = [...new Set(parsed.signatures.map((s) => s.name))].join(', ');
    return { ok: false, reason: 'NO_KNOWN_KEY', message: `signed by no known key (signature lines of: ${names})` };
  }
  return { ok: true, checkpoint: parsed.checkpoint, body: parsed.body, signers };
}
