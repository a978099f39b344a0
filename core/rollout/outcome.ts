import { countDevices, type DeviceState, type DeviceStatus } from '../rollout-state';
import type { RolloutStatus } from './status';
import { describeWatch } from './watch';

/**
 * How a `skipped` device's reason said it was not-for-me (left-behind, a node-down verdict, above the
 * target) before `not-for-me` was a state of its own; the apply that finds a device ahead still says it so.
 */
export const NOT_FOR_ME = 'not-for-me:';
/** How a `skipped` device's reason said it never started (an abort, a cancel, a rollback, a deadline), before `not-started`. */
export const NOT_STARTED = 'not started:';

const SKIP_LABELS: ReadonlyArray<[string, DeviceState]> = [
  [NOT_FOR_ME, 'not-for-me'],
  [NOT_STARTED, 'not-started'],
];

/**
 * A device under the state it has: `skipped` with a `not-for-me:` reason is `not-for-me`, with a `not started:`
 * reason `not-started`, the prefix dropped from the reason (the state says it now). Statuses and audit
 * records written before those states existed read this way, so an older rollout reads like a new one;
 * anything else is returned as it is.
 */
export function honestDevice<T extends Pick<DeviceStatus, 'state' | 'reason'>>(d: T): T {
  if (d.state !== 'skipped' || d.reason === undefined) return d;
  const label = SKIP_LABELS.find(([prefix]) => d.reason!.startsWith(prefix));
  if (!label) return d;
  const { reason, ...rest } = d;
  const why = reason!.slice(label[0].length).trim();
  return { ...rest, state: label[1], ...(why ? { reason: why } : {}) } as T;
}

/**
 * A status as the CLI shows it, from any build: devices under the state they have (honestDevice) and the
 * counts computed from them again (a status recorded before `not-for-me` and `not-started` has neither
 * in its counts, and counts them as skipped).
 */
export function readStatus<S extends Pick<RolloutStatus, 'devices' | 'counts' | 'slices'>>(s: S): S {
  const devices = s.devices.map(honestDevice);
  // Sliced records: the devices listed are the inline phases' only; the counts are the whole (a build
  // that writes `slices` wrote every state in its counts).
  if (s.slices) return { ...s, devices };
  return { ...s, devices, counts: countDevices(devices) };
}

export interface RolloutOutcome {
  /** 0: the rollout completed and every device it was for is at the target; 1: anything else. */
  code: 0 | 1;
  /** One line a person (or a CI log) can act on. */
  summary: string;
}

/**
 * What a finished (or stopped) rollout means for a pipeline: success only when the fleet is where the
 * rollout said it would be. A completed rollout with devices failed, skipped for being offline, or never
 * started is pending work, not a success; one whose every device was not-for-me completed all it was for. A canary
 * run succeeds on a `pass` verdict, or when there was nothing to test (as `schedule trigger` says).
 */
export function rolloutOutcome(s: RolloutStatus): RolloutOutcome {
  // A watch that failed says which check, which devices and what it read (core/rollout/watch.ts).
  if (s.watch?.outcome === 'reverted') return { code: 1, summary: `rollout ${s.state}: ${describeWatch(s.watch)}` };
  if (s.state !== 'completed') return { code: 1, summary: `rollout ${s.state}` };
  // Every device at the target, but the watch after promotion saw a failure (onFail: alert): not a success.
  if (s.watch?.outcome === 'alerted') return { code: 1, summary: `completed, but ${describeWatch(s.watch)}` };
  if (s.verdict !== undefined) {
    return s.verdict === 'pass' || s.verdict === 'nothing-to-test'
      ? { code: 0, summary: `canary verdict ${s.verdict}` }
      : { code: 1, summary: `canary verdict ${s.verdict}` };
  }
  // Read as it is meant whichever build wrote it: an older status says not-for-me in the reason.
  const devices = s.devices.map(honestDevice);
  const meant = devices.filter((d) => d.state !== 'not-for-me');
  const pending = meant.filter((d) => d.state !== 'applied' && d.state !== 'claimed');
  // Every device it was for is at the target when it was for none (docs/cli.md "Exit codes"; the board
  // shows it completed too): the fleet is where the rollout said it would be.
  // A sliced status lists only the inline phases' devices: its counts say whether there were others.
  const others = s.slices ? s.counts.total - s.counts['not-for-me'] : 0;
  if (meant.length === 0 && others > 0)
    return { code: 1, summary: `${others} device(s) of the slices not read here; nothing was applied inline` };
  if (meant.length === 0)
    return {
      code: 0,
      summary: `completed: no device in scope needed this revision (${s.slices ? s.counts['not-for-me'] : devices.length} not-for-me); nothing was applied`,
    };
  if (pending.length > 0) {
    const byState = new Map<string, number>();
    for (const d of pending) byState.set(d.state, (byState.get(d.state) ?? 0) + 1);
    const parts = [...byState].map(([state, n]) => `${n} ${state}`).join(', ');
    return {
      code: 1,
      summary: `completed with pending work: ${parts} (of ${meant.length} devices the rollout was for)`,
    };
  }
  return { code: 0, summary: `completed: ${meant.length} of ${meant.length} devices at the target` };
}

/**
 * What an accepted control did, in one line an operator can act on (the CLI prints it): not "now
 * running", but what happens next to the devices.
 */
export function describeControl(
  name: 'pause' | 'resume' | 'abort' | 'approve' | 'override-audit',
  s: RolloutStatus,
  control: { rollback?: boolean } = {},
): string {
  const changed = s.changedDevices ?? 0;
  const devices = (n: number) => `${n} device${n === 1 ? '' : 's'}`;
  switch (name) {
    case 'pause':
      return `pause accepted: no new device starts${s.counts.applying ? ` (${devices(s.counts.applying)} in flight finish)` : ''}, and the rollout holds before its next step; resume with: wavegate resume ${s.rolloutId}`;
    case 'resume':
      return s.state === 'paused'
        ? `resume accepted: ${s.pausedReason ?? 'still held'}`
        : `resume accepted: the rollout goes on (phase ${s.phase})`;
    case 'approve':
      return `approve accepted: the manual gate is passed; the health gate of phase ${s.phase} runs next`;
    case 'abort':
      return control.rollback === false
        ? `abort accepted: no new device starts; the ${devices(changed)} this rollout changed stay as they are`
        : `abort accepted: no new device starts; rolling back the ${devices(changed)} this rollout changed`;
    case 'override-audit':
      return `override accepted: a new audit segment continues from record ${s.auditHead?.seq ?? 0}; the rollout goes on`;
  }
}
