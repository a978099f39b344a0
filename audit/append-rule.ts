import { ApplicationFailure } from '@temporalio/common';
import type { AuditEvent, AuditHead, AuditRecord } from '../core/audit';

/** Where a rollout's current segment stands, as either store (file or PostgreSQL) reads it. */
export interface SegmentStanding {
  segment: number;
  /** Where the segment continues from: the genesis for segment 1, its override's lastGood after. */
  start: AuditHead;
  /** Its last readable record (or `start` past the genesis), null for an empty first segment. */
  head: AuditHead | null;
  /** The segment is not whole (an edited, missing or unreadable record). */
  problem: boolean;
}

/** What to write next: a record after `prevHash` in the current segment, or an override opening the next one. */
export type AppendStep =
  | { kind: 'append'; prevHash: string }
  | { kind: 'new-segment'; segment: number; prevHash: string };

/**
 * The one rule both audit stores follow for the record after the current head (docs/formats.md, the
 * audit trail): an override opens a new segment after its lastGood unless the segment is whole and ends
 * right there (then it is an ordinary next record), and is refused when the segment is whole and already
 * holds more; any other record goes only to a whole segment (`corrupt` otherwise), exactly at head + 1.
 * An earlier seq with other content is a conflict (never an overwrite); a later one waits its turn.
 * `where` names the segment in messages (a file path, or the database's rollout and segment).
 */
export function nextAppend(
  s: SegmentStanding,
  event: AuditEvent,
  existing: AuditRecord | undefined,
  where: string,
): AppendStep | 'corrupt' {
  if (event.event === 'audit.override') {
    const lastGood = event.lastGood!;
    const endsAtLastGood =
      s.head === null ? lastGood.seq === 0 : s.head.seq === lastGood.seq && s.head.hash === lastGood.hash;
    if (!s.problem && s.head !== null && s.head.seq > lastGood.seq) {
      throw ApplicationFailure.create({
        type: 'AuditConflict',
        message: `${where} is whole and already holds record ${s.head.seq}, after the override's lastGood ${lastGood.seq}: no override is needed, and one would fork the chain`,
        nonRetryable: true,
        details: [{ file: where, head: s.head }],
      });
    }
    if (s.problem || !endsAtLastGood) return { kind: 'new-segment', segment: s.segment + 1, prevHash: lastGood.hash };
  } else if (s.problem) {
    return 'corrupt';
  }

  const last = s.head ?? s.start;
  if (event.seq <= last.seq) {
    throw ApplicationFailure.create({
      type: 'AuditConflict',
      message: `${where}: record ${event.seq} already exists with other content (${existing ? `${existing.event} at ${existing.at} by ${existing.by}` : 'seq not found in this segment'}); refusing to write ${event.event} at ${event.at} as ${event.seq}`,
      nonRetryable: true,
      details: [{ seq: event.seq }],
    });
  }
  if (event.seq > last.seq + 1) {
    throw ApplicationFailure.create({
      type: 'AuditOutOfOrder',
      message: `${where} ends at record ${last.seq}; record ${event.seq} must wait for ${last.seq + 1} to land`,
      nonRetryable: false,
      details: [{ seq: event.seq, last: last.seq }],
    });
  }
  return { kind: 'append', prevHash: last.hash };
}
