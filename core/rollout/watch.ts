import { formatDurationMs } from '../duration';
import type { CheckResult, GateOutcome } from '../health';
import type { RolloutSpec } from '../spec';

/**
 * The watch after promotion (docs/formats.md, `watch`): once the last phase passed, the rollout keeps
 * checking the devices it changed every `every` until `for` has passed, with the spec's own health-gate
 * checks (core/health.ts), and on a failed check either puts back exactly those devices (`onFail:
 * revert`, the rollout's own compensation, inside its revert window) or records an alert and goes on
 * watching (`onFail: alert`). The decisions here are pure; workflows/watch.ts carries them out.
 */

export type WatchSpec = NonNullable<RolloutSpec['watch']>;

/** The shortest wait between two checks when the spec gives no `every`: a check a minute at most. */
export const MIN_WATCH_EVERY_MS = 60_000;

/** The wait between two checks: the spec's `every`, else a tenth of `for`, at least a minute, never more than `for`. */
export function watchEvery(watch: Pick<WatchSpec, 'for' | 'every'>): number {
  const every = watch.every ?? Math.max(MIN_WATCH_EVERY_MS, Math.floor(watch.for / 10));
  return Math.min(every, watch.for);
}

/**
 * The waits before each check, in order: `every` each, the last cut short so the last check falls exactly
 * at `for` (a 10m watch every 3m checks at 3, 6, 9 and 10 minutes).
 */
export function watchWaits(watch: Pick<WatchSpec, 'for' | 'every'>): number[] {
  const every = watchEvery(watch);
  const waits: number[] = [];
  for (let at = 0; at < watch.for; at += every) waits.push(Math.min(every, watch.for - at));
  return waits;
}

/** What one check's outcome leads to. */
export type WatchStep =
  /** Healthy (or inconclusive under `onInconclusive: pause`, recorded): the watch goes on. */
  | { next: 'continue'; event: 'watch.passed' | 'watch.inconclusive' }
  /** `onFail: revert`: put back every device this rollout changed and end rolled back. */
  | { next: 'revert'; event: 'watch.failed' }
  /** `onFail: alert`: record the failure, tell the webhooks, go on watching; the rollout ends completed with the alert. */
  | { next: 'alert'; event: 'watch.failed' };

/**
 * A check's outcome under the spec: a failed check acts by `onFail`; an inconclusive one counts as failed
 * under `onInconclusive: fail`, and otherwise is recorded and the watch goes on (a promoted rollout has no
 * phase to hold: pausing would only stop the watch's clock, not any device).
 */
export function watchStep(
  outcome: GateOutcome,
  spec: Pick<RolloutSpec, 'onInconclusive'> & { watch: Pick<WatchSpec, 'onFail'> },
): WatchStep {
  const failed = outcome === 'fail' || (outcome === 'inconclusive' && spec.onInconclusive === 'fail');
  if (!failed) return { next: 'continue', event: outcome === 'pass' ? 'watch.passed' : 'watch.inconclusive' };
  return spec.watch.onFail === 'revert'
    ? { next: 'revert', event: 'watch.failed' }
    : { next: 'alert', event: 'watch.failed' };
}

/** One check of the watch as the status and the audit keep it. */
export interface WatchCheck {
  /** 1-based. */
  n: number;
  /** Milliseconds since the watch started (workflow time). */
  atMs: number;
  outcome: GateOutcome;
  /** Each check's line: `<check>: <outcome> — <evidence>` (the values read). */
  evidence: string[];
  /** The devices the failed or inconclusive checks named. */
  devices: string[];
}

/** The devices the checks that did not pass named, in order, each once. */
export function devicesNamed(results: readonly CheckResult[]): string[] {
  const named = new Set<string>();
  for (const r of results) if (r.outcome !== 'pass') for (const d of r.failedDevices ?? []) named.add(d);
  return [...named];
}

/**
 * Why a watch failed, in one line an operator can act on: which check (its number and time), the checks
 * that did not pass with the values they read, and the devices they named.
 */
export function watchFailureReason(check: WatchCheck, total: number, results: readonly CheckResult[]): string {
  const failing = results
    .filter((r) => r.outcome !== 'pass')
    .map((r) => `${r.check}: ${r.outcome} — ${r.evidence}`)
    .join('; ');
  const devices = check.devices.length ? ` (devices: ${check.devices.join(', ')})` : '';
  return `watch check ${check.n} of ${total} at +${formatDurationMs(check.atMs)} failed: ${failing}${devices}`;
}

/** What the status says of a watch: the spec's settings, where it is, its checks' outcome and its alerts. */
export interface WatchStatus {
  forMs: number;
  everyMs: number;
  onFail: WatchSpec['onFail'];
  checks: number;
  /** How many checks the watch makes in all. */
  planned: number;
  /** `watching` until the watch ends; `passed`, `reverted` (onFail revert), `alerted` (onFail alert, with a failure), `stopped` (an abort or cancel ended it). */
  outcome: 'watching' | 'passed' | 'reverted' | 'alerted' | 'stopped';
  /** The last check, as recorded. */
  last?: WatchCheck;
  /** Under `onFail: alert`: each failed check's reason, oldest first. */
  alerts: string[];
  /** The failed check's reason that reverted the rollout (`onFail: revert`). */
  reason?: string;
}

/** The watch's status when it starts. */
export function watchStarted(watch: WatchSpec): WatchStatus {
  return {
    forMs: watch.for,
    everyMs: watchEvery(watch),
    onFail: watch.onFail,
    checks: 0,
    planned: watchWaits(watch).length,
    outcome: 'watching',
    alerts: [],
  };
}

/** One line for status and watch: `watching 3 of 10 checks (every 3m for 30m, onFail revert)`. */
export function describeWatch(w: WatchStatus): string {
  const settings = `every ${formatDurationMs(w.everyMs)} for ${formatDurationMs(w.forMs)}, onFail ${w.onFail}`;
  const alerts = w.alerts.length ? `; ${w.alerts.length} alert(s): ${w.alerts.at(-1)}` : '';
  switch (w.outcome) {
    case 'watching':
      return `watching: ${w.checks} of ${w.planned} checks done (${settings})${alerts}`;
    case 'passed':
      return `watch passed: ${w.checks} of ${w.planned} checks healthy (${settings})`;
    case 'reverted':
      return `watch failed, reverted: ${w.reason ?? ''}`;
    case 'alerted':
      return `watch alerted: ${w.alerts.length} of ${w.checks} checks failed (${settings}); last: ${w.alerts.at(-1) ?? ''}`;
    case 'stopped':
      return `watch stopped after ${w.checks} of ${w.planned} checks (${settings})${alerts}`;
  }
}
