import { sha256 } from '@noble/hashes/sha2.js';
import { bytesEqual, fromBase64, toBase64, utf8Encode } from './bytes';
import type { Checkpoint } from './checkpoint';
import { WavegateError } from './errors';
import { HASH_BYTES, verifyConsistency } from './merkle';

/**
 * The witness's decision (`wavegate witness`, docs/formats.md "Checkpoints and the witness"): whether to cosign a
 * checkpoint given the last one it cosigned for the same origin, and the state it keeps per origin. Pure: the
 * server (cli/witness/) reads and writes the state file, verifies the log's signature and signs.
 *
 *   witnessDecision(last, next, proof)   cosign (first, same, grown) or refuse (CONFLICT: rollback, fork, bad proof)
 *   witnessStateText / parseWitnessState / witnessStateFileName     one small JSON file per origin
 *
 * A witness cosigns a tree only if it extends every tree it cosigned before for that origin: a rewritten trail
 * (another root at a size already cosigned, a smaller size, a tree the proof does not connect) never gets its
 * signature, so a trail cannot show one history to one auditor and another to the next.
 */

export interface WitnessState {
  origin: string;
  /** The largest tree cosigned for the origin, and its root. */
  size: number;
  root: Uint8Array;
}

export type WitnessDecision =
  | {
      ok: true;
      /** first: nothing cosigned for the origin before; same: the same tree asked again; grown: a proven extension. */
      change: 'first' | 'same' | 'grown';
    }
  | { ok: false; code: 'CONFLICT'; message: string };

/**
 * Cosign `next` (whose log signature the caller has verified) after `last` (undefined: none for its origin)?
 * `proof`: the consistency proof from `last.size` to `next.size` (read only when the tree grew).
 */
export function witnessDecision(
  last: WitnessState | undefined,
  next: Checkpoint,
  proof: readonly Uint8Array[],
): WitnessDecision {
  if (!last) return { ok: true, change: 'first' };
  const refuse = (why: string): WitnessDecision => ({
    ok: false,
    code: 'CONFLICT',
    message: `${next.origin}: ${why}; not cosigned`,
  });
  if (next.size < last.size)
    return refuse(
      `size ${next.size} is below size ${last.size} this witness cosigned (a trail never shrinks: a rollback)`,
    );
  // The same tree asked again (its answer lost, say): cosigned again, whatever proof came with it.
  if (next.size === last.size)
    return bytesEqual(next.root, last.root)
      ? { ok: true, change: 'same' }
      : refuse(`size ${next.size} with another root than the one this witness cosigned at that size (a fork)`);
  const check = verifyConsistency({ oldSize: last.size, oldRoot: last.root, size: next.size, root: next.root, proof });
  if (!check.ok)
    return refuse(
      `the consistency proof from size ${last.size} (cosigned) to ${next.size} does not hold: ${check.message}`,
    );
  return { ok: true, change: 'grown' };
}

const STATE_TYPE = 'wavegate.witness.state';

/** The state of one origin, as its file holds it (JSON, one line). */
export function witnessStateText(state: WitnessState, cosignedAt: Date): string {
  return `${JSON.stringify({
    type: STATE_TYPE,
    origin: state.origin,
    size: state.size,
    root: toBase64(state.root),
    cosignedAt: cosignedAt.toISOString(),
  })}\n`;
}

/**
 * A state file's text, strictly; INVALID_STATE naming `source` otherwise. A witness never takes a damaged state
 * file for "nothing cosigned yet": that would let a fork through.
 */
export function parseWitnessState(text: string, source: string, origin: string): WitnessState {
  const damaged = (why: string) =>
    new WavegateError('INVALID_STATE', `${source}: the witness state of ${origin} is damaged (${why}); not cosigning`, {
      source,
      origin,
    });
  let data: unknown;
  try {
    data = JSON.parse(text);
  } catch {
    throw damaged('not JSON');
  }
  const d = (typeof data === 'object' && data !== null ? data : {}) as Record<string, unknown>;
  if (d.type !== STATE_TYPE) throw damaged(`type is not ${STATE_TYPE}`);
  if (d.origin !== origin) throw damaged('it names another origin');
  if (typeof d.size !== 'number' || !Number.isSafeInteger(d.size) || d.size < 0) throw damaged('size');
  const root = typeof d.root === 'string' ? fromBase64(d.root) : undefined;
  if (root?.length !== HASH_BYTES) throw damaged('root');
  return { origin, size: d.size, root };
}

/** The state file of an origin: the hex SHA-256 of the origin, so no origin can name a path. */
export function witnessStateFileName(origin: string): string {
  let hex = '';
  for (const b of sha256(utf8Encode(origin))) hex += b.toString(16).padStart(2, '0');
  return `${hex}.json`;
}
