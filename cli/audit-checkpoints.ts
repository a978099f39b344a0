import { parseAuditLog, type AuditSegment } from '../core/audit';
import {
  checkTrailCheckpoints,
  pinnedKeyText,
  type PinnedKey,
  type TrailCheckpointsVerdict,
} from '../core/trail-checkpoints';
import { TrailTree } from '../core/trail-tree';
import { readPinnedKey } from '../intake/checkpoint-keys';

/**
 * `wavegate audit <id> --verify`'s checks of the checkpoints kept beside the trail (docs/formats.md, "Where
 * checkpoints are kept"), when it has any: each one's root the root of the trail's first n records, each
 * consistent with the one before, the log's signature under `--log-key` and the witness's cosignature under
 * `--witness-key` when given. A checkpoint that fails is named by its size.
 */

export interface CheckpointKeyFlags {
  logKey?: string;
  witnessKey?: string;
}

export interface CheckpointKeys {
  log?: PinnedKey;
  witness?: PinnedKey;
}

/** The keys the flags pin (a pin file, ed25519:<base64>, a C2SP verifier key): bad input exits 2 before any read. */
export function checkpointKeysOf(flags: CheckpointKeyFlags): CheckpointKeys {
  return {
    ...(flags.logKey !== undefined ? { log: readPinnedKey('--log-key', flags.logKey, 'log') } : {}),
    ...(flags.witnessKey !== undefined ? { witness: readPinnedKey('--witness-key', flags.witnessKey, 'witness') } : {}),
  };
}

/** What the store keeps beside the chain: its notes, or why they could not be read (a damaged file). */
export type KeptCheckpoints = { notes: string[] } | { unreadable: string };

export type CheckpointsCheck =
  | (TrailCheckpointsVerdict & { kept: number })
  | { ok: false; kept: null; unreadable: string }
  | null;

/** The checks of the kept checkpoints against the trail's segments; null when none is kept. */
export function checkKeptCheckpoints(
  rolloutId: string,
  segments: readonly AuditSegment[],
  kept: KeptCheckpoints,
  keys: CheckpointKeys,
): CheckpointsCheck {
  if ('unreadable' in kept) return { ok: false, kept: null, unreadable: kept.unreadable };
  if (kept.notes.length === 0) return null;
  const tree = TrailTree.of(segments.flatMap((s) => parseAuditLog(s.text).records));
  return { ...checkTrailCheckpoints(rolloutId, kept.notes, tree, keys), kept: kept.notes.length };
}

/** The lines `--verify` prints of them: each failure by its size, then what was and was not checked. */
export function checkpointLines(check: CheckpointsCheck, keys: CheckpointKeys): string[] {
  if (check === null) return [];
  if (check.kept === null) return [`checkpoints: cannot be read: ${check.unreadable}`];
  const out: string[] = [];
  for (const c of check.checkpoints)
    for (const problem of c.problems)
      out.push(`checkpoint ${c.n}${c.size === null ? '' : ` (size ${c.size})`}: ${problem}`);
  const failed = check.checkpoints.filter((c) => c.problems.length > 0).length;
  out.push(
    failed
      ? `checkpoints: ${failed} of ${check.kept} FAILED`
      : `checkpoints: ${check.kept} kept, each the root of the trail's first records and consistent with the one before`,
  );
  out.push(
    keys.log
      ? `checkpoints: the log's signatures checked under ${pinnedKeyText(keys.log)}`
      : "checkpoints: the log's signatures NOT checked (give the worker's checkpoint key with --log-key)",
  );
  out.push(
    keys.witness
      ? `checkpoints: the witness's cosignatures checked under ${pinnedKeyText(keys.witness)}`
      : "checkpoints: the witness's cosignatures NOT checked (give the witness's key with --witness-key)",
  );
  return out;
}
