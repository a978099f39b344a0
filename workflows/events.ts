import * as wf from '@temporalio/workflow';
import {
  DeliveryLedger,
  shownUrl,
  webhookEventFor,
  webhookWants,
  type EventContext,
  type TransitionRecord,
  type Webhook,
  type WebhookEvent,
} from '../core/events';
import type { AuditEventName } from '../core/audit';
import { isFinalState } from '../core/controls';
import type { RolloutModel } from '../core/rollout/model';
import type { RolloutState } from '../core/rollout-state';
import type { RolloutInput } from '../core/rollout/input';
import { deliverWebhook } from './activity-proxies';
import { rootMessage } from './device-runner';

/** New executions with `webhooks` in their spec deliver every transition to them (core/events.ts). */
export const WEBHOOK_EVENTS_PATCH = 'webhook-events';

/** How long the end of a rollout waits for its last deliveries before it closes anyway. */
const DRAIN_MS = 30_000;

/**
 * The rollout's outbox: each transition becomes an event, queued per webhook in order, and one loop per
 * webhook sends them one after another in the background. The story never waits for a delivery; only its
 * end waits, at most DRAIN_MS, so a dead endpoint costs a rollout half a minute at most and never its
 * outcome. What is not delivered by then is listed in status (`webhooks.failed`).
 */
export class EventOutbox {
  private readonly ctx: EventContext;
  private readonly queues: WebhookEvent[][];
  /** The delivery each webhook's loop is sending now (undefined: none). */
  private readonly sending: Array<WebhookEvent | undefined>;
  private count = 0;
  private ended = false;
  private readonly ledger = new DeliveryLedger();

  constructor(
    input: RolloutInput,
    model: RolloutModel,
    private readonly hooks: readonly Webhook[],
  ) {
    const { spec } = input;
    this.ctx = {
      rolloutId: input.rolloutId,
      runId: wf.workflowInfo().runId,
      profile: spec.profile,
      fromRevision: spec.fromRevision,
      toRevision: spec.toRevision,
    };
    model.attachWebhooks(this.ledger);
    this.queues = hooks.map(() => []);
    this.sending = hooks.map(() => undefined);
    // Not cancellable: a cancelled rollout's rollback and its end are events too.
    hooks.forEach((_hook, i) => void wf.CancellationScope.nonCancellable(() => this.send(i)));
  }

  /**
   * A transition the audit trail records: queued at once; on the rollout's end (a final state) the
   * returned promise is the bounded wait for delivery (drain), otherwise there is nothing to wait for.
   */
  transition(
    event: AuditEventName,
    fields: { phase: string | null; by?: string; reason?: string | null; evidence?: unknown },
    state: RolloutState,
  ): Promise<void> | undefined {
    this.record({
      event,
      phase: fields.phase,
      by: fields.by ?? 'wavegate',
      reason: fields.reason ?? null,
      at: new Date(Date.now()).toISOString(),
      evidence: fields.evidence ?? null,
    });
    return isFinalState(state) ? this.drain() : undefined;
  }

  /** Queue the event of a transition for every webhook that wants it (returns at once). */
  record(record: TransitionRecord): void {
    if (this.ended) return;
    const event = webhookEventFor(this.ctx, this.count + 1, record);
    if (!event) return;
    this.count += 1;
    this.hooks.forEach((hook, i) => {
      if (!webhookWants(hook, event.event)) return;
      this.queues[i]!.push(event);
      this.ledger.queued();
    });
  }

  /**
   * The rollout's end: wait up to DRAIN_MS for every queued delivery, then give up the rest (listed as
   * failed) and stop queueing. Later transitions (there are none after the end) are not sent.
   */
  async drain(): Promise<void> {
    if (this.ended) return;
    const idle = () => this.sending.every((e) => e === undefined) && this.queues.every((q) => q.length === 0);
    await wf.CancellationScope.nonCancellable(() => wf.condition(idle, DRAIN_MS));
    this.ended = true;
    this.queues.forEach((queue, i) => {
      const left = [...(this.sending[i] ? [this.sending[i]] : []), ...queue.splice(0)];
      for (const event of left)
        this.ledger.failed({
          deliveryId: event.deliveryId,
          event: event.event,
          url: shownUrl(this.hooks[i]!.url),
          error: 'not delivered when the rollout ended',
        });
    });
  }

  /** One webhook's loop: its events in order, each retried by the activity's policy, then the next. */
  private async send(i: number): Promise<void> {
    const hook = this.hooks[i]!;
    const queue = this.queues[i]!;
    const url = shownUrl(hook.url);
    for (;;) {
      await wf.condition(() => queue.length > 0 || this.ended);
      const event = queue.shift();
      if (!event) return;
      this.sending[i] = event;
      try {
        await deliverWebhook.executeWithOptions({ summary: `${event.event} to ${url}` }, [
          {
            url: hook.url,
            ...(hook.secretEnv ? { secretEnv: hook.secretEnv } : { secretFile: hook.secretFile }),
            event,
          },
        ]);
        if (!this.ended) this.ledger.delivered();
      } catch (err) {
        if (!this.ended)
          this.ledger.failed({ deliveryId: event.deliveryId, event: event.event, url, error: rootMessage(err) });
      } finally {
        this.sending[i] = undefined;
      }
    }
  }
}
