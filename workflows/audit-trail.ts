import * as wf from '@temporalio/workflow';
import type { AuditEvent, AuditEventName } from '../core/audit';
import type * as activities from '../activities';
import { rootMessage } from './device-runner';

type Acts = ReturnType<typeof activities.createActivities>;

/** The record must land: retry until it does, except when retrying cannot help. */
export const { appendAudit } = wf.proxyActivities<Acts>({
  startToCloseTimeout: '30 seconds',
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '30 seconds', nonRetryableErrorTypes: ['AuditConflict', 'AuditInvalid', 'AuditCorrupt'] },
});

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
 * A rollout's audit trail: one record per transition, appended strictly in order so the hash chain on
 * the worker is in order, even when a control handler and the story both write at once. A record that
 * cannot be written does not stop the rollout; it is reported through `onLost` (the status warnings).
 */
export class AuditTrail {
  private seq = 0;
  private chain: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly rolloutId: string,
    private readonly onHead: (head: { seq: number; hash: string }) => void,
    private readonly onLost: (warning: string) => void,
  ) {}

  /** Queue a record; the promise settles once it (and every record before it) has been tried. */
  append(event: AuditEventName, fields: AuditFields): Promise<unknown> {
    const record = auditEvent(this.rolloutId, ++this.seq, event, fields);
    this.chain = this.chain
      .then(() => appendAudit.executeWithOptions({ summary: `audit ${event}` }, [record]))
      .then((head) => this.onHead(head))
      .catch((err) => {
        if (wf.isCancellation(err)) throw err;
        // Keep the rollout (and the chain of later records) going, but say loudly what was not written.
        this.onLost(`audit record ${record.seq} (${event}) not written: ${rootMessage(err)}`);
      });
    return this.chain;
  }

  /** Settles when every queued record has been tried. */
  drained(): Promise<unknown> {
    return this.chain;
  }
}
