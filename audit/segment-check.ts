import { ApplicationFailure } from '@temporalio/common';
import {
  auditContentKey,
  GENESIS_HASH,
  verifyAuditChain,
  type AuditEvent,
  type AuditHead,
  type AuditRecord,
} from '../core/audit';
import { nextAppend, type AppendStep } from './append-rule';
import { countAuditWriteFailure } from './failures';
import type { AuditHealth } from './types';

/**
 * The one check of a rollout's current segment, for both stores (docs/architecture.md, "Audit"): the
 * file store reads a segment from a file's lines (file-segment.ts), the PostgreSQL store from a table's
 * rows (postgres-segment.ts); each says where a place is in its own words (SegmentPlace). Here, once:
 * does the segment chain from its start (the genesis, or its override's lastGood) with each record's MAC
 * the key's, what was found whole (so the next check reads and checks only what was added since), and
 * what is wrong and where (`AuditCorrupt`, the health answer, the next append's step).
 */

/** Why a segment is not whole, with the place to look. */
export interface SegmentProblem {
  /** 1-based line (or row) in the segment, or null when it could not be read at all. */
  line: number | null;
  seq: number;
  problem: string;
  message: string;
}

/** A rollout's current segment as checked. */
export interface SegmentState {
  segment: number;
  /** Readable records, in stored order (up to the first that is not a record). */
  records: AuditRecord[];
  /** Where this segment continues from: the genesis for segment 1, its override's lastGood after. */
  start: AuditHead;
  /** The last line is a torn, unacknowledged append (not a problem: the next append cuts it off). */
  torn: boolean;
  problem: SegmentProblem | null;
}

/** How a store names a segment and a place in it, in its answers and failures. */
export interface SegmentPlace {
  /** The segment: a file's path, or `<store> rollout "<id>" segment <n>` (the `file` of answers and details). */
  name: string;
  /** Where a problem is: `<path> line N` (the path alone with no line), or `<segment> seq N`. */
  of(problem: SegmentProblem): string;
  /** What an operator repairs and how to check it, for AuditCorrupt: `repair the file (check with …)`. */
  repair: string;
}

/**
 * What a store read of a segment, after the prefix it found unchanged since the checker last found it
 * whole (`known`, from `wholePrefix`):
 * - `absent`: no segment yet (an empty trail);
 * - `failed`: the store could not read it as records, named before any check (a file it cannot open; a
 *   row that is not JSON, which the PostgreSQL store has always named before the chain's problems, where
 *   a file's line that is not JSON comes after them, as `unreadable`), with the records read before that;
 * - `read`: the records after the prefix, the first line that is not a record (1-based in the whole
 *   segment; `torn` when it is the last, unterminated line) and the store's proof of what it read, asked
 *   for only when the segment is whole (undefined: nothing to remember, e.g. a file not ending in `\n`).
 */
export type SegmentRead<P> =
  | { kind: 'absent' }
  | { kind: 'failed'; fresh: AuditRecord[]; problem: SegmentProblem }
  | {
      kind: 'read';
      fresh: AuditRecord[];
      unreadable: { line: number; torn: boolean } | null;
      proof: () => P | undefined;
    };

/** What a checker found whole of a segment, and the store's proof to compare with what it holds later. */
export interface WholePrefix<P> {
  records: AuditRecord[];
  proof: P;
}

export interface SegmentChecker<P> {
  /** What was last found whole of segment `id` (never empty), for the store to compare with what it holds now. */
  wholePrefix(id: string): WholePrefix<P> | undefined;
  /** Check segment number `segment` (its store's id `id`) as read, and remember it when whole. */
  check(id: string, segment: number, known: WholePrefix<P> | undefined, read: SegmentRead<P>): SegmentState;
}

const GENESIS: AuditHead = { seq: 0, hash: GENESIS_HASH };
/** Segments remembered per store: a worker's live rollouts; an older one is checked in full again. */
const MAX_WHOLE_SEGMENTS = 1000;

/**
 * A checker remembering, per segment, what it found whole: re-checking only what was added since keeps an
 * append O(new records) instead of re-hashing the whole chain. `P` is the store's proof that the prefix is
 * unchanged (a digest of the file's text, or of the rows the server computes), so an edit before it is
 * still seen. `key`: every record must carry the key's MAC.
 */
export function createSegmentChecker<P>(key: Uint8Array | undefined): SegmentChecker<P> {
  const whole = new Map<string, WholePrefix<P>>();
  return {
    wholePrefix: (id) => whole.get(id),
    check(id, segment, known, read) {
      whole.delete(id);
      const state: SegmentState = { segment, records: [], start: GENESIS, torn: false, problem: null };
      if (read.kind === 'absent') return state;
      state.records = known ? known.records.concat(read.fresh) : read.fresh;
      if (read.kind === 'failed') return { ...state, problem: read.problem };
      state.torn = !!read.unreadable?.torn;
      state.problem = chainProblem(state, known, read.fresh, key);
      if (!state.problem && read.unreadable && !read.unreadable.torn) {
        const { line } = read.unreadable;
        state.problem = {
          line,
          seq: state.start.seq + state.records.length + 1,
          problem: 'edited',
          message: `line ${line} is not a JSON audit record`,
        };
      }
      const proof = !state.problem && !read.unreadable && state.records.length > 0 ? read.proof() : undefined;
      if (proof !== undefined) {
        if (whole.size >= MAX_WHOLE_SEGMENTS) whole.delete(whole.keys().next().value!);
        whole.set(id, { records: state.records, proof });
      }
      return state;
    },
  };
}

/**
 * A later segment must open with an override (its lastGood is the segment's start); then the chain from
 * the start, or from the last record known whole when only `fresh` is new, with each record's MAC.
 * Sets `state.start`; the first problem, or null.
 */
function chainProblem(
  state: SegmentState,
  known: WholePrefix<unknown> | undefined,
  fresh: AuditRecord[],
  key: Uint8Array | undefined,
): SegmentProblem | null {
  if (state.segment > 1) {
    const first = state.records[0];
    if (first?.event !== 'audit.override' || !first.lastGood)
      return {
        line: 1,
        seq: first?.seq ?? 0,
        problem: 'no-override',
        message: 'a later segment must start with an audit.override record',
      };
    state.start = first.lastGood;
  }
  const checkedUpTo = known?.records.at(-1);
  // `fresh` starts on the line after the known records: its messages name the segment's lines, as a full check's do.
  const verdict = checkedUpTo
    ? verifyAuditChain(fresh, undefined, {
        start: { seq: checkedUpTo.seq, hash: checkedUpTo.hash },
        key,
        firstLine: known!.records.length + 1,
      })
    : verifyAuditChain(state.records, undefined, { start: state.start, key });
  if (verdict.ok) return null;
  return {
    line: Math.max(1, verdict.seq - state.start.seq),
    seq: verdict.seq,
    problem: verdict.problem,
    message: verdict.message,
  };
}

/** The segment's last record, or its start past the genesis; null for an empty first segment. */
export function segmentHead(state: SegmentState): AuditHead | null {
  const last = state.records.at(-1);
  if (last) return { seq: last.seq, hash: last.hash };
  return state.start.seq > 0 ? state.start : null;
}

/** No record is written to a trail that is not whole (counted as a `corrupt` write failure). */
export function corruptFailure(state: SegmentState, place: SegmentPlace): ApplicationFailure {
  countAuditWriteFailure('corrupt');
  const p = state.problem!;
  return ApplicationFailure.create({
    type: 'AuditCorrupt',
    message: `${place.of(p)}: ${p.message}; no record is written to a trail that is not whole: ${place.repair} or record an operator override`,
    nonRetryable: true,
    details: [{ file: place.name, line: p.line, seq: p.seq, problem: p.problem, segment: state.segment }],
  });
}

/**
 * The record the segment holds at the event's seq, and the head to answer when it is the event itself
 * (the same content again: a retried append, already done).
 */
export function storedAt(
  state: SegmentState,
  event: AuditEvent,
  content: string,
): { existing: AuditRecord | undefined; done: AuditHead | undefined } {
  const existing = state.records.find((r) => r.seq === event.seq);
  const done =
    existing && auditContentKey(existing) === content ? { seq: existing.seq, hash: existing.hash } : undefined;
  return { existing, done };
}

/**
 * Where the event goes after the segment (append-rule.ts): the next record of this segment, or an
 * override's new one; `AuditCorrupt` when the segment is not whole and the event is no override.
 */
export function appendStep(
  state: SegmentState,
  event: AuditEvent,
  existing: AuditRecord | undefined,
  place: SegmentPlace,
): AppendStep {
  const standing = { segment: state.segment, start: state.start, head: segmentHead(state), problem: !!state.problem };
  const step = nextAppend(standing, event, existing, place.name);
  if (step === 'corrupt') throw corruptFailure(state, place);
  return step;
}

/**
 * `auditHealth`'s answer for a checked segment: whole with its head, or not, with the reason and place;
 * with `head` (the workflow's), the segment must also hold it.
 */
export function segmentHealth(state: SegmentState, place: SegmentPlace, head?: AuditHead): AuditHealth {
  const notWhole = (p: SegmentProblem): AuditHealth => ({
    ok: false,
    reason: `${place.of(p)}: ${p.message}`,
    problem: p.problem,
    file: place.name,
    line: p.line,
    segment: state.segment,
  });
  if (state.problem) return notWhole(state.problem);
  if (head) {
    const held = verifyAuditChain(state.records, head, { start: state.start });
    if (!held.ok) return notWhole({ line: null, seq: held.seq, problem: held.problem, message: held.message });
  }
  return { ok: true, head: segmentHead(state), file: place.name, segment: state.segment };
}
