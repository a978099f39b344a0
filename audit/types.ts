import type { AuditEvent, AuditHead, AuditSegment } from '../core/audit';

/**
 * Where audit trails live (docs/architecture.md, "Audit"): the file store (one JSONL file per rollout
 * on the worker's disk, the embedded default) or PostgreSQL (one table every worker and operator
 * reaches). Both keep the same sealed, hash-chained, MACed records and give the same answers, so the
 * workflow cannot tell them apart.
 */
export interface AuditStore {
  /** Where it is, fit to print: a directory, or the database URL with no secret in it. */
  readonly location: string;
  /**
   * Append one record, idempotent by (rollout, run of the chain, seq): the same content again returns
   * the stored head; other content under a written seq is `AuditConflict`; a seq beyond the next is
   * `AuditOutOfOrder`; a trail that is not whole is `AuditCorrupt` (the same failures as appendAudit).
   */
  append(event: AuditEvent): Promise<AuditHead>;
  /** Is the rollout's current segment whole (and holding `head` when given)? Never throws for a broken trail. */
  health(input: AuditHealthInput): Promise<AuditHealth>;
  /** Every segment of a chain as stored, in order (`verifyAuditSegments` checks them); NOT_FOUND when none. */
  segments(rolloutId: string, runId?: string): Promise<AuditSegment[]>;
  /** Run ids of earlier executions of a re-used rollout id whose chains are kept apart. */
  earlierRuns(rolloutId: string): Promise<string[]>;
  /**
   * Keep a checkpoint of the rollout's current chain (a C2SP signed note, core/checkpoint.ts, its origin
   * `wavegate/<rollout id>`) beside the trail, never as a record: a record's seq is the workflow's. Idempotent
   * by size: a note whose size is not above every size kept for the chain is not added (a retried append
   * checkpoints once; the kept sizes only grow). A note that is not a checkpoint of this rollout is INVALID_INPUT.
   */
  appendCheckpoint(rolloutId: string, note: string): Promise<void>;
  /** The current chain's checkpoint notes, in the order kept (their sizes ascending); empty when none. */
  checkpoints(rolloutId: string): Promise<string[]>;
  /** Release connections (a no-op for files). */
  close(): Promise<void>;
}

/** What `auditHealth` answers: whole with its head (null when empty), or not, with the reason and place. */
export type AuditHealth =
  | { ok: true; head: AuditHead | null; file: string; segment: number }
  | { ok: false; reason: string; problem: string; file: string; line: number | null; segment: number };

export interface AuditHealthInput {
  rolloutId: string;
  /** The head the workflow holds: the trail must also contain it (else a cut tail or a rewrite). */
  head?: AuditHead;
}
