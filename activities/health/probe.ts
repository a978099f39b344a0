import { Context } from '@temporalio/activity';
import { setMaxListeners } from 'node:events';
import type { Probe } from './types';

/** The activity context, or undefined when called directly (tests, tools). */
export function activityContext(): Context | undefined {
  try {
    return Context.current();
  } catch {
    return undefined;
  }
}

/** One check's probe while it runs, and how it ends. */
export interface RunningProbe {
  probe: Probe;
  /** Throws the activity's cancellation when it was cancelled: it must end as cancelled, not with a verdict made of aborted probes. */
  throwIfCancelled(): void;
  /** Stops the timers and listeners the probe holds. */
  stop(): void;
}

export interface ProbeSettings {
  /** The check's canonical text, as its heartbeats name it. */
  check: string;
  /** When the check started (epoch ms): its deadline is `timeoutMs` later. */
  started: number;
  timeoutMs: number;
  /** How many devices it asks (the heartbeats' total). */
  devices: number;
  /** How many listeners the signal may have at once (each device being asked holds one). */
  listeners: number;
}

/**
 * Start one check's probe: its deadline `timeoutMs` after `started`, a signal that aborts at the deadline or
 * when the activity is cancelled, and heartbeats naming the check and its progress (on each device answered
 * and on a clock). Usable outside an activity: no heartbeats, no cancellation.
 */
export function startProbe({ check, started, timeoutMs, devices, listeners }: ProbeSettings): RunningProbe {
  const ctx = activityContext();
  // One controller held by its own timer, not AbortSignal.any([AbortSignal.timeout(), ...]): a
  // composite signal is weakly held and, collected under GC pressure, never aborts, so a metrics
  // source that accepts and never answers would hang the check for good (nodejs/node#55428).
  const controller = new AbortController();
  // Each device being asked listens on it (its session closes at the deadline): up to `concurrency` at once.
  setMaxListeners(listeners, controller.signal);
  const timer = setTimeout(
    () => controller.abort(new DOMException(`timed out after ${timeoutMs} ms`, 'TimeoutError')),
    timeoutMs,
  );
  const onCancel = () => controller.abort(ctx?.cancellationSignal.reason);
  ctx?.cancellationSignal.addEventListener('abort', onCancel, { once: true });
  let progress: { done: number; total: number } = { done: 0, total: devices };
  const heartbeat = () => ctx?.heartbeat({ check, ...progress });
  heartbeat();
  // Heartbeat on a clock too: an HTTP query or a single slow device gives no progress events.
  const ticker = ctx ? setInterval(heartbeat, 1_000) : undefined;
  return {
    probe: {
      deadline: started + timeoutMs,
      signal: controller.signal,
      progress: (done, total) => {
        progress = { done, total };
        heartbeat();
      },
    },
    throwIfCancelled() {
      if (ctx?.cancellationSignal.aborted) throw ctx.cancellationSignal.reason;
    },
    stop() {
      if (ticker) clearInterval(ticker);
      clearTimeout(timer);
      ctx?.cancellationSignal.removeEventListener('abort', onCancel);
    },
  };
}
