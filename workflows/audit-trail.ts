import * as wf from '@temporalio/workflow';
import { GENESIS_HASH, type AuditEvent, type AuditEventName, type AuditHead } from '../core/audit';
import { appendAuditBounded, appendAuditOnce, auditHealth } from './activity-proxies';
import { rootMessage } from './device-runner';

export interface AuditFields {
  phase: string | null;
  by?: string;
  reason?: string | null;
  counts: Record<string, number> | null;
  evidence?: unknown;
}

/** The one place an audit event is built from a workflow: its identity, time and who caused it. */
export function auditEvent(rolloutId: string, seq: number, event: AuditEventName, fields: AuditFields): AuditEvent {
  const info = wf.workflowInfo();
  return {
    seq,
    at: new Date(Date.now()).toISOString(),
    rolloutId,
    runId: info.runId,
    event,
    phase: fields.phase,
    by: fields.by ?? 'wavegate',
    reason: fields.reason ?? null,
    counts: fields.counts,
    evidence: fields.evidence ?? null,
  };
}

/**
 * How often a held trail asks the sink whether it is whole again: soon at first (a repaired file is
 * noticed in seconds), then backing off to 5 minutes so a hold over a weekend keeps its history small.
 */
const REPAIR_POLL_FIRST_MS = 5_000;
const REPAIR_POLL_MAX_MS = 300_000;

export interface AuditTrailHooks {
  onHead(head: AuditHead): void;
  /** The trail holds the rollout (with why), or holds it no more (undefined). */
  onHold(reason: string | undefined): void;
}

/**
 * A rollout's audit trail: one record per transition, appended strictly in order so the hash chain on
 * the worker is in order, even when a control handler and the story both write at once.
 *
 * A record that cannot be written stops progress: the trail holds the rollout (no new device starts, no advance, no end) and asks the sink
 * whether the trail is whole again (every 5 s at first, backing off to 5 min), then writes the record and lets go. An operator's override
 * (`override-audit`, with a reason) is the other way on: it writes an `audit.override` record that starts
 * a new segment from the last good head, and the held records follow it.
 *
 * The story does not wait for a record: appends run one after another in the background (order and chain
 * kept), each in one attempt, and a failed one holds the rollout as soon as it fails.
 */
export class AuditTrail {
  private seq = 0;
  private chain: Promise<unknown> = Promise.resolve();
  private head: AuditHead | undefined;
  private held = false;
  private override: { by: string; reason: string } | undefined;

  constructor(
    private readonly rolloutId: string,
    private readonly hooks: AuditTrailHooks,
  ) {}

  /** Queue a record; the promise settles once it (and every record before it) has been written. */
  append(event: AuditEventName, fields: AuditFields): Promise<unknown> {
    // The seq is given when the record is sent: an override in between takes the next one.
    const record = auditEvent(this.rolloutId, 0, event, fields);
    // A record outlives a cancel of the story: the compensation's records follow it.
    this.chain = this.chain.then(() => wf.CancellationScope.nonCancellable(() => this.send(record)));
    return this.chain;
  }

  /** An operator's decision to carry on past a trail that cannot be made whole (see the class comment). */
  requestOverride(c: { by: string; reason: string }): void {
    this.override = c;
  }

  /** Settles when every queued record has been written. */
  drained(): Promise<unknown> {
    return this.chain;
  }

  private written(head: AuditHead): void {
    this.seq = head.seq;
    this.head = head;
    this.hooks.onHead(head);
  }

  private async send(record: AuditEvent): Promise<void> {
    for (;;) {
      record.seq = this.seq + 1;
      try {
        this.written(await appendAuditOnce.executeWithOptions({ summary: `audit ${record.event}` }, [record]));
        if (this.held) {
          this.held = false;
          this.hooks.onHold(undefined);
        }
        return;
      } catch (err) {
        if (wf.isCancellation(err)) throw err;
        if (!this.held) {
          this.held = true;
          this.hooks.onHold(`record ${record.seq} (${record.event}) not written: ${rootMessage(err)}`.slice(0, 500));
        }
        await this.repairedOrOverridden();
      }
    }
  }

  /** Returns when the sink says the trail is whole again, or once an operator's override is written. */
  private async repairedOrOverridden(): Promise<void> {
    for (let wait = REPAIR_POLL_FIRST_MS; ; wait = Math.min(wait * 2, REPAIR_POLL_MAX_MS)) {
      await wf.condition(() => this.override !== undefined, wait);
      if (this.override) {
        const { by, reason } = this.override;
        this.override = undefined;
        const lastGood = this.head ?? { seq: 0, hash: GENESIS_HASH };
        const record: AuditEvent = {
          ...auditEvent(this.rolloutId, lastGood.seq + 1, 'audit.override', {
            phase: null,
            by,
            reason,
            counts: null,
            evidence: { lastGood },
          }),
          lastGood,
        };
        try {
          this.written(await appendAuditBounded.executeWithOptions({ summary: 'audit audit.override' }, [record]));
          return;
        } catch (err) {
          if (wf.isCancellation(err)) throw err;
          this.hooks.onHold(`the override was not written either: ${rootMessage(err)}`.slice(0, 500));
          continue;
        }
      }
      const health = await auditHealth
        .executeWithOptions({ summary: 'is the audit trail whole again?' }, [
          { rolloutId: this.rolloutId, ...(this.head ? { head: this.head } : {}) },
        ])
        .catch((err: unknown) => {
          if (wf.isCancellation(err)) throw err;
          return { ok: false as const };
        });
      if (health.ok) return;
    }
  }
}
