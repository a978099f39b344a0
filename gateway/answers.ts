import type { Client } from '@temporalio/client';
import { applyFailureOf } from '../device/apply-failure';
import { applyResultOf, type FinalAnswer } from '../device/twin/answer';
import type { EnrolledKeys } from '../device/receipt-check';
import { completeApply } from '../clients/apply-answer';
import { answerTo, type AgentReport, type DesiredEntry, type TwinState } from '../core/twin';
import { CallLimit } from './call-limit';

/**
 * Answers delivered by the gateway (docs/architecture.md, "Reports reach the rollout"): when the report a gateway
 * writes to a twin is an agent's final answer to a request an apply activity waits for (`DesiredEntry.awaited`),
 * the gateway completes that activity by its id once the write is durable, with the result the worker would have
 * returned (device/twin/answer.ts). An agent device in flight then costs the rollout no twin read and no
 * change-feed look; the worker's own safety read (every 30 s) stays for an answer no gateway delivered.
 *
 * The first of the three routes an answer takes into the rollout, and the one that carries nearly every answer
 * (docs/architecture.md, "Reports reach the rollout", says why each stays). It cannot be the only one: a gateway
 * killed between its write and its completion takes the completion with it, and a gateway before r11 makes none.
 * Without it nothing would be lost, but every answer would wait for the worker's change feed (0.9-1.5 s median at
 * 1,000 agents against 0.0 s: bench/README.md) and cost a visibility write (the twin's stamp) and a twin read.
 */

/** One answer to deliver: the request it answers and what the agent said. */
export interface Delivery {
  deviceId: string;
  entry: DesiredEntry;
  answer: FinalAnswer;
}

/**
 * What a report about to be written answers, against the device's record before the write: the answers to deliver,
 * and whether every new final answer in it is one of them. When one is not (the record does not know the request
 * the agent answered: another gateway's newer desire, or a sender before r11 that waits on the feed), the twin
 * must still stamp its change feed for the report, so `allDelivered` is false. A final answer the record already
 * holds was delivered when it was first written.
 */
export function deliveriesOf(
  deviceId: string,
  state: Pick<TwinState, 'desired' | 'report'>,
  report: AgentReport,
): { deliveries: Delivery[]; allDelivered: boolean } {
  const deliveries: Delivery[] = [];
  let allDelivered = true;
  for (const [profile, said] of Object.entries(report.profiles)) {
    if (!said.requestId) continue;
    const answer = answerTo({ report }, profile, said.requestId);
    if (answer.state === 'pending') continue;
    const before = state.report?.profiles;
    const known = before && Object.hasOwn(before, profile) ? before[profile] : undefined;
    if (known && known.requestId === said.requestId && known.state === said.state) continue;
    const entry = Object.hasOwn(state.desired, profile) ? state.desired[profile] : undefined;
    if (entry?.awaited === true && entry.requestId === said.requestId) deliveries.push({ deviceId, entry, answer });
    else allDelivered = false;
  }
  return { deliveries, allDelivered };
}

export interface AnswerDeliveryOptions {
  client: Client;
  /**
   * The keys the device may sign with (gateway/pins.ts `keysOf`, else `keyOf`: the inventory's agentKey, and during
   * an identity key rotation's overlap its proven new key too): an agent's receipt is checked against them before it
   * rides on the completion (device/receipt-check.ts). Absent: none passes.
   */
  keyOf?: (device: string) => EnrolledKeys;
  /** Completions at once; more wait their turn (default 32). */
  maxInFlight?: number;
  /** Attempts for a completion the server did not take (default 3), 1 s, then 2 s apart. */
  attempts?: number;
  log?: (line: string) => void;
  sleep?: (ms: number) => Promise<void>;
}

export interface AnswerDeliveryStats {
  /** Applies completed by this gateway. */
  delivered: number;
  /** Answers with nothing left to complete (the worker or another gateway answered first, the attempt ended). */
  gone: number;
  /** Answers not delivered after every attempt: the worker's safety read finds them. */
  failed: number;
}

/** Completes waiting applies from the answers in written reports, a bounded number at once. */
export class AnswerDelivery {
  private readonly limit: CallLimit;
  private readonly counts: AnswerDeliveryStats = { delivered: 0, gone: 0, failed: 0 };
  private readonly sleep: (ms: number) => Promise<void>;

  constructor(private readonly opts: AnswerDeliveryOptions) {
    this.sleep = opts.sleep ?? ((ms) => new Promise((resolve) => setTimeout(resolve, ms)));
    this.limit = new CallLimit(opts.maxInFlight ?? 32);
  }

  stats(): AnswerDeliveryStats {
    return { ...this.counts };
  }

  /** Deliver each answer (in the background: the agent's sync does not wait for it). */
  deliver(deliveries: readonly Delivery[]): Promise<void> {
    return Promise.all(deliveries.map((d) => this.limit.run(() => this.one(d)))).then(() => undefined);
  }

  private async one(delivery: Delivery): Promise<void> {
    const { entry, answer, deviceId } = delivery;
    let outcome: { result: unknown } | { failure: Error };
    try {
      const check = { request: entry, key: this.opts.keyOf?.(deviceId), log: this.opts.log ?? (() => {}) };
      outcome = { result: applyResultOf(deviceId, entry, answer, check) };
    } catch (err) {
      outcome = { failure: applyFailureOf(err) ?? (err as Error) };
    }
    const attempts = this.opts.attempts ?? 3;
    for (let attempt = 1; ; attempt++) {
      try {
        const done = await completeApply(this.opts.client, entry.holder, outcome);
        this.counts[done === 'completed' ? 'delivered' : 'gone']++;
        return;
      } catch (err) {
        if (attempt >= attempts) {
          this.counts.failed++;
          this.opts.log?.(
            `${deviceId}: the answer to ${entry.requestId} not delivered (${(err as Error).message.slice(0, 200)}); the rollout reads it from the twin`,
          );
          return;
        }
        await this.sleep(1_000 * 2 ** (attempt - 1));
      }
    }
  }
}
