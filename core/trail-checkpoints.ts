import { hexToBytes } from '@noble/hashes/utils.js';
import { agentKeyPin, parseAgentKey } from './agent-auth';
import { bytesEqual, fromBase64 } from './bytes';
import {
  checkpointOrigin,
  keyHash,
  parseCheckpoint,
  verifyCheckpoint,
  type CheckpointKey,
  type ParsedCheckpoint,
  type SignerKind,
} from './checkpoint';
import { WavegateError } from './errors';
import { verifyConsistency } from './merkle';
import type { TrailTree } from './trail-tree';

/**
 * A trail's checkpoints as the control plane keeps them (docs/formats.md, "Where checkpoints are kept"): the
 * trail's Merkle leaves, the pinned keys an operator names, and the checks of the notes kept beside a trail.
 *
 *   checkpointSizeOf(rolloutId, note)  the size of a note that is a checkpoint of this rollout (INVALID_INPUT else)
 *   parsePinnedKey(text, field)        `ed25519:<base64>` or a C2SP verifier key line
 *   signersOf(note, key, kind)         the names under which `key` signed the note validly
 *   lastCosigned(notes, key)           the last note the witness cosigned (where its next proof starts)
 *   checkTrailCheckpoints(...)         `wavegate audit --verify`'s checks, each failure naming the size
 *
 * The trail's tree (its leaves: recordLeafHash) is core/trail-tree.ts's. Pure (no Node API).
 */

/** The note parsed, if it is a checkpoint of `rolloutId`'s trail; INVALID_INPUT naming `note` otherwise. */
export function checkpointOfRollout(rolloutId: string, note: string): ParsedCheckpoint {
  const parsed = parseCheckpoint(note);
  if (!parsed.ok) throw new WavegateError('INVALID_INPUT', `checkpoint note: ${parsed.message}`, { field: 'note' });
  const origin = checkpointOrigin(rolloutId);
  if (parsed.note.checkpoint.origin !== origin)
    throw new WavegateError(
      'INVALID_INPUT',
      `checkpoint note: origin ${JSON.stringify(parsed.note.checkpoint.origin.slice(0, 120))} is not this trail's (${origin})`,
      { field: 'note' },
    );
  return parsed.note;
}

/** The size of a note that is a checkpoint of `rolloutId` (checkpointOfRollout). */
export function checkpointSizeOf(rolloutId: string, note: string): number {
  return checkpointOfRollout(rolloutId, note).checkpoint.size;
}

/** The largest size among `notes` (-1: none readable): a checkpoint of this size or less is kept already. */
export function largestSize(notes: readonly string[]): number {
  let largest = -1;
  for (const note of notes) {
    const parsed = parseCheckpoint(note);
    if (parsed.ok) largest = Math.max(largest, parsed.note.checkpoint.size);
  }
  return largest;
}

/**
 * A public key an operator pins for checkpoints: the raw Ed25519 key, and the key name when the form names one.
 * Without a name, a signature line's own name is taken when the line's key hash (over the name and this key)
 * matches it: the name is a label, the signature under the key is what is checked.
 */
export interface PinnedKey {
  publicKey: Uint8Array;
  name?: string;
}

const TYPE_OF: Record<number, SignerKind> = { 1: 'log', 4: 'witness' };
const KEY_NAME = /^[\x21-\x2a\x2c-\x7e]{1,128}$/;

/**
 * A pinned key's text, as `wavegate witness --log` takes a log's: `ed25519:<base64 of the 32-byte key>` (what
 * `wavegate witness` prints, the `publicKey` of a `wavegate keygen` pin), optionally after `<key name>=`; or a
 * C2SP verifier key line `<name>+<8 hex key hash>+<base64(type byte || key)>` (type 01 a log's, 04 a witness's;
 * it must be `kind`'s). Undefined when it is none of these (a pin file's path, say); INVALID_INPUT naming `field`
 * when it is one of them, wrongly (the text is public: it may be quoted).
 */
export function parsePinnedKey(text: string, field: string, kind: SignerKind): PinnedKey | undefined {
  const value = text.trim();
  const refuse = (why: string) =>
    new WavegateError('INVALID_INPUT', `${field} ${JSON.stringify(value.slice(0, 80))}: ${why}`, { field, value });
  const eq = value.indexOf('=');
  const named = eq > 0 && KEY_NAME.test(value.slice(0, eq)) && value.slice(eq + 1).startsWith('ed25519:');
  const name = named ? value.slice(0, eq) : undefined;
  const bare = named ? value.slice(eq + 1) : value;
  if (bare.startsWith('ed25519:')) {
    const publicKey = parseAgentKey(bare);
    if (!publicKey) throw refuse('ed25519: must be followed by the base64 of a 32-byte Ed25519 public key');
    return { publicKey, ...(name ? { name } : {}) };
  }
  // <name>+<8 hex>+<base64>: a name has no "+" and the hash none, but base64 may (split at the first two only).
  const vkey = /^([^+\s]+)\+([^+\s]+)\+(\S+)$/.exec(value);
  if (!vkey) return undefined;
  const [, vname, hash, encoded] = vkey as unknown as [string, string, string, string];
  const bytes = fromBase64(encoded);
  const type = bytes?.length === 33 ? TYPE_OF[bytes[0]!] : undefined;
  if (!bytes || !type) throw refuse('a C2SP verifier key holds the base64 of a type byte (01 or 04) and 32 bytes');
  if (type !== kind) throw refuse(`a ${type === 'log' ? "log's" : "witness's"} key, where a ${kind}'s is expected`);
  const publicKey = bytes.subarray(1);
  if (!KEY_NAME.test(vname)) throw refuse('the key name is not a C2SP key name');
  if (!/^[0-9a-f]{8}$/.test(hash) || !bytesEqual(hexToBytes(hash), keyHash(vname, publicKey, kind)))
    throw refuse('the key hash does not match the name and key');
  return { name: vname, publicKey };
}

/** The pinned key fit to print (a public key): `[<name>=]ed25519:<base64>`. */
export function pinnedKeyText(key: PinnedKey): string {
  return `${key.name ? `${key.name}=` : ''}${agentKeyPin(key.publicKey)}`;
}

/**
 * Did `key` sign the note as a `kind` (a log's signature or a witness's cosignature)? `{ ok: true, time }` (a
 * cosignature's time) or `{ ok: false, message }`: no line of the key, or a line of the key that does not verify.
 */
export function signersOf(
  note: ParsedCheckpoint,
  key: PinnedKey,
  kind: SignerKind,
): { ok: true; name: string; time?: number } | { ok: false; message: string } {
  const names = key.name ? [key.name] : [...new Set(note.signatures.map((s) => s.name))];
  const keys: CheckpointKey[] = names.map((name) => ({ name, publicKey: key.publicKey, kind }));
  const v = verifyCheckpoint(note, keys);
  const what = kind === 'log' ? 'signature of the log' : 'cosignature of the witness';
  if (!v.ok) return { ok: false, message: v.reason === 'NO_KNOWN_KEY' ? `no ${what} under the key given` : v.message };
  const signer = v.signers.find((s) => s.kind === kind)!;
  return { ok: true, name: signer.name, ...(signer.time === undefined ? {} : { time: signer.time }) };
}

/** The last of `notes` (in the order kept) that `witness` cosigned validly: the tree its next proof starts from. */
export function lastCosigned(
  notes: readonly string[],
  witness: PinnedKey,
): { size: number; root: Uint8Array; index: number } | undefined {
  for (let i = notes.length - 1; i >= 0; i--) {
    const parsed = parseCheckpoint(notes[i]);
    if (parsed.ok && signersOf(parsed.note, witness, 'witness').ok)
      return { size: parsed.note.checkpoint.size, root: parsed.note.checkpoint.root, index: i };
  }
  return undefined;
}

/** One kept checkpoint as `--verify` found it: its place, size and what failed (empty: none). */
export interface TrailCheckpointReport {
  /** 1-based, in the order kept. */
  n: number;
  /** Null when the note could not be read. */
  size: number | null;
  problems: string[];
  cosigned: boolean | null;
}

export interface TrailCheckpointsVerdict {
  ok: boolean;
  checkpoints: TrailCheckpointReport[];
  /** Which signatures were checked: the keys given. */
  logChecked: boolean;
  witnessChecked: boolean;
}

/**
 * `wavegate audit --verify`'s checks of the checkpoints kept beside a trail: each one a checkpoint of this
 * rollout; its root the root of the trail's first `size` records (none cut off); two of one size never; each
 * consistent with the one before (an RFC 9162 proof made from the trail, checked against the two roots); the
 * log's signature valid under `keys.log` and the witness's cosignature under `keys.witness`, each when given.
 */
export function checkTrailCheckpoints(
  rolloutId: string,
  notes: readonly string[],
  tree: TrailTree,
  keys: { log?: PinnedKey; witness?: PinnedKey } = {},
): TrailCheckpointsVerdict {
  const origin = checkpointOrigin(rolloutId);
  const parsed = notes.map((note) => parseCheckpoint(note));
  const reports: TrailCheckpointReport[] = [];
  let previous: { n: number; size: number; root: Uint8Array } | undefined;
  for (const [i, p] of parsed.entries()) {
    const n = i + 1;
    if (!p.ok) {
      reports.push({ n, size: null, problems: [`not a checkpoint note: ${p.message}`], cosigned: null });
      continue;
    }
    const { size, root } = p.note.checkpoint;
    const problems: string[] = [];
    if (p.note.checkpoint.origin !== origin)
      problems.push(`origin ${p.note.checkpoint.origin}, not this trail's ${origin}`);
    if (size > tree.size)
      problems.push(`the trail holds ${tree.size} records: records ${tree.size + 1}-${size} were cut off`);
    else if (!bytesEqual(tree.root(size), root))
      problems.push(`its root is not the root of the trail's first ${size} records: the trail was rewritten`);
    if (keys.log) {
      const signed = signersOf(p.note, keys.log, 'log');
      if (!signed.ok) problems.push(signed.message);
    }
    let cosigned: boolean | null = null;
    if (keys.witness) {
      const c = signersOf(p.note, keys.witness, 'witness');
      cosigned = c.ok;
      if (!c.ok)
        problems.push(
          c.message.startsWith('no ')
            ? `not cosigned by the witness (the witness refused it or was not reached when it was made)`
            : c.message,
        );
    }
    if (previous) problems.push(...sequenceProblems(previous, { size, root }, tree));
    reports.push({ n, size, problems, cosigned });
    previous = { n, size, root };
  }
  return {
    ok: reports.every((r) => r.problems.length === 0),
    checkpoints: reports,
    logChecked: keys.log !== undefined,
    witnessChecked: keys.witness !== undefined,
  };
}

/** Is the checkpoint after `previous` a proven extension of it (a larger tree the trail's proof connects)? */
function sequenceProblems(
  previous: { n: number; size: number; root: Uint8Array },
  next: { size: number; root: Uint8Array },
  tree: TrailTree,
): string[] {
  if (next.size === previous.size)
    return [
      bytesEqual(next.root, previous.root)
        ? `a second checkpoint of size ${next.size} (checkpoint ${previous.n} is of that size)`
        : `size ${next.size} with another root than checkpoint ${previous.n}: the trail was forked`,
    ];
  if (next.size < previous.size)
    return [`smaller than checkpoint ${previous.n} (size ${previous.size}): a trail never shrinks`];
  if (next.size > tree.size) return [];
  const proof = tree.consistencyProof(previous.size, next.size);
  const check = verifyConsistency({
    oldSize: previous.size,
    oldRoot: previous.root,
    size: next.size,
    root: next.root,
    proof,
  });
  return check.ok ? [] : [`not consistent with checkpoint ${previous.n} (size ${previous.size}): ${check.message}`];
}
