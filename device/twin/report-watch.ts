import type { Client } from '@temporalio/client';
import { TwinFeed, type TwinChange } from '../../clients/twin-feed';

/**
 * How a worker learns that an agent answered (docs/architecture.md, "The twin change feed"): every apply waiting
 * for an agent device subscribes to its device here, and ONE `reported` feed per worker and Temporal client, read
 * while anything waits, tells each subscriber when its twin recorded a report. The apply then reads that twin once.
 * So a device in flight costs the rollout one read when it is asked and one when it answers, however long it takes,
 * plus a read every REPORT_SAFETY_READ_MS in case a change was missed (visibility late or down for a while), when the
 * apply also asks again if the agent has not taken the request (device/twin/apply.ts).
 *
 * The second of the three routes an answer takes into the rollout (docs/architecture.md, "Reports reach the
 * rollout"): it carries the answers no gateway completes, the ones whose report the twin stamps: a gateway before
 * r11 (workers and gateways upgrade in either order) and a report answering a request the writing gateway's record
 * does not show as awaited (a desire it has not read yet). Without it those answers would wait for the safety read,
 * up to REPORT_SAFETY_READ_MS each (a phase of such devices 30 s longer), or, with a safety read short enough not
 * to, every waiting apply would query its twin every few seconds: what this feed replaced.
 */
export const REPORT_SAFETY_READ_MS = 30_000;

export interface ReportSubscription {
  /** Resolves once the device's twin recorded a report since the last call (at once if it already has), or after `ms`. */
  next(ms: number, signal?: AbortSignal): Promise<'changed' | 'timeout'>;
  close(): void;
}

interface Subscriber {
  changed: boolean;
  wake?: () => void;
}

export class ReportWatch {
  private readonly subscribers = new Map<string, Set<Subscriber>>();
  private readonly feed: TwinFeed;
  private count = 0;

  constructor(client: Client, intervalMs = 500) {
    this.feed = new TwinFeed(client, 'reported', { intervalMs, onChanges: (changes) => this.deliver(changes) });
  }

  subscribe(deviceId: string): ReportSubscription {
    const subscriber: Subscriber = { changed: false };
    const set = this.subscribers.get(deviceId) ?? new Set<Subscriber>();
    this.subscribers.set(deviceId, set);
    set.add(subscriber);
    if (this.count++ === 0) this.feed.start();
    let closed = false;
    return {
      next: (ms, signal) =>
        new Promise((resolve, reject) => {
          if (subscriber.changed) {
            subscriber.changed = false;
            return resolve('changed');
          }
          if (signal?.aborted) return reject(signal.reason ?? new Error('cancelled'));
          const finish = (outcome: 'changed' | 'timeout' | 'aborted') => {
            clearTimeout(timer);
            signal?.removeEventListener('abort', onAbort);
            subscriber.wake = undefined;
            subscriber.changed = false;
            if (outcome === 'aborted') reject(signal?.reason ?? new Error('cancelled'));
            else resolve(outcome);
          };
          const onAbort = () => finish('aborted');
          const timer = setTimeout(() => finish('timeout'), ms);
          signal?.addEventListener('abort', onAbort, { once: true });
          subscriber.wake = () => finish('changed');
        }),
      close: () => {
        if (closed) return;
        closed = true;
        set.delete(subscriber);
        if (set.size === 0) this.subscribers.delete(deviceId);
        if (--this.count === 0) this.feed.stop();
      },
    };
  }

  private deliver(changes: TwinChange[]): void {
    for (const change of changes) {
      for (const subscriber of this.subscribers.get(change.deviceId) ?? []) {
        subscriber.changed = true;
        subscriber.wake?.();
      }
    }
  }
}

const watches = new WeakMap<Client, ReportWatch>();

/** The worker's one watch per Temporal client. */
export function reportWatchOf(client: Client): ReportWatch {
  const watch = watches.get(client) ?? new ReportWatch(client);
  watches.set(client, watch);
  return watch;
}
