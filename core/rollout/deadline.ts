import { formatDurationMs } from '../duration';
import type { PlannedPhase } from '../planner';
import { stepState, type DeviceState, type DeviceStatus } from '../rollout-state';
import type { RolloutSpec } from '../spec';

/**
 * Progress deadlines (docs/formats.md, `progressDeadline`, `phaseDeadline`, `onDeadline`): how long a
 * rollout, or one phase of it, may take in **active** time. Time the rollout spends paused (by an
 * operator, by a failure policy or a deadline's own pause, or held by the audit trail) never counts, so
 * a deadline cannot fire on a rollout someone deliberately holds. Pure: the workflow feeds the clock
 * `Date.now()` samples and carries out what these functions decide.
 */

export type DeadlineKind = 'progressDeadline' | 'phaseDeadline';
export type DeadlineAction = 'pause' | 'abort' | 'rollback';

/** At most this many unconfirmed device ids are named in the audit record and the status; the count is always whole. */
export const MAX_NAMED_UNCONFIRMED = 100;

/**
 * Accumulates active milliseconds from samples. Between two samples the rollout was in the state the
 * earlier sample saw (the workflow samples at every change: pause, resume, a phase's start and end),
 * so the sum is exact in workflow time.
 */
export class ActiveClock {
  private activeMs = 0;
  private lastAt: number;
  private lastActive: boolean;

  constructor(now: number, active: boolean) {
    this.lastAt = now;
    this.lastActive = active;
  }

  /** Record that the rollout is `active` (or not) from `now` on; returns the active ms so far. */
  sample(now: number, active: boolean): number {
    if (this.lastActive && now > this.lastAt) this.activeMs += now - this.lastAt;
    this.lastAt = Math.max(this.lastAt, now);
    this.lastActive = active;
    return this.activeMs;
  }

  /** Active ms up to `now`, assuming the state of the last sample held since. */
  elapsed(now: number): number {
    return this.activeMs + (this.lastActive && now > this.lastAt ? now - this.lastAt : 0);
  }
}

/** One armed deadline: a limit over an active clock; it passes once, when the active time reaches the limit. */
export class Deadline {
  private readonly clock: ActiveClock;
  fired = false;

  constructor(
    readonly kind: DeadlineKind,
    readonly limitMs: number,
    now: number,
    active: boolean,
    /** The phase index it watches (phaseDeadline only). */
    readonly phase?: number,
  ) {
    this.clock = new ActiveClock(now, active);
  }

  sample(now: number, active: boolean): void {
    this.clock.sample(now, active);
  }
  elapsed(now: number): number {
    return this.clock.elapsed(now);
  }
  /** Active ms left before it passes (0 once passed). */
  remaining(now: number): number {
    return Math.max(0, this.limitMs - this.clock.elapsed(now));
  }
  due(now: number): boolean {
    return !this.fired && this.remaining(now) === 0;
  }
}

type DeadlineSpec = Pick<RolloutSpec, 'phases' | 'progressDeadline' | 'phaseDeadline' | 'onDeadline'>;

/** Whether the spec sets any deadline (the workflow's guard: rollouts without one run exactly as before). */
export function hasDeadlines(spec: DeadlineSpec): boolean {
  return (
    spec.progressDeadline !== undefined ||
    spec.phaseDeadline !== undefined ||
    spec.phases.some((p) => p.phaseDeadline !== undefined)
  );
}

/** A planned phase's deadline: its spec phase's own `phaseDeadline`, else the spec's (an implicit remainder takes the spec's). */
export function phaseDeadlineOf(
  spec: Pick<DeadlineSpec, 'phases' | 'phaseDeadline'>,
  phase: Pick<PlannedPhase, 'specIndex'>,
): number | undefined {
  // A `risk: safe` plan collapses every phase into one ('all', specIndex 0): the first phase's own, else the spec's.
  const own = phase.specIndex >= 0 ? spec.phases[phase.specIndex]?.phaseDeadline : undefined;
  return own ?? spec.phaseDeadline;
}

/** What the spec's `onDeadline` asks for (default `pause`). */
export function deadlineAction(spec: Pick<DeadlineSpec, 'onDeadline'>): DeadlineAction {
  return spec.onDeadline ?? 'pause';
}

/** A phase's stage while its deadline runs: from its first device start to the end of its health gate. */
export function phaseInProgress(stage: string): boolean {
  // `failed` and `passed` end it; `inconclusive` holds paused and checks again, so it has not ended.
  return stage === 'applying' || stage === 'gate' || stage === 'awaiting-approval' || stage === 'inconclusive';
}

/**
 * The required devices a deadline names as still unconfirmed: devices of the watched scope (a phase,
 * or every phase) that are not best-effort, not skipped, and not yet confirmed — at the target
 * (applied or claimed) *and* through their phase's health gate.
 */
export function unconfirmedDevices(
  devices: Iterable<DeviceStatus>,
  passedPhases: ReadonlySet<number>,
  phase?: number,
): { ids: string[]; count: number; byState: Partial<Record<DeviceState, number>> } {
  const ids: string[] = [];
  let count = 0;
  const byState: Partial<Record<DeviceState, number>> = {};
  for (const d of devices) {
    // Not-started devices are skipped ones too (stepState): nobody waits for them.
    if (d.phase < 0 || (phase !== undefined && d.phase !== phase) || stepState(d.state) === 'skipped') continue;
    const atTarget = d.state === 'applied' || d.state === 'claimed';
    if (atTarget && passedPhases.has(d.phase)) continue;
    count += 1;
    byState[d.state] = (byState[d.state] ?? 0) + 1;
    if (ids.length < MAX_NAMED_UNCONFIRMED) ids.push(d.id);
  }
  return { ids, count, byState };
}

/** What the status carries once a deadline passed (the latest one). */
export interface DeadlineStatus {
  kind: DeadlineKind;
  /** The phase it watched (phaseDeadline), or the phase running when it passed (progressDeadline). */
  phase: string | null;
  limitMs: number;
  /** ISO instant (workflow time) it passed at. */
  at: string;
  /** The first MAX_NAMED_UNCONFIRMED required devices not yet confirmed. */
  unconfirmed: string[];
  unconfirmedCount: number;
  action: DeadlineAction;
}

/** The reason a deadline gives (pause reason, abort reason, rollback trigger): it starts with `deadline:`. */
export function deadlineReason(
  kind: DeadlineKind,
  limitMs: number,
  phase: string | null,
  unconfirmedCount: number,
): string {
  const where =
    kind === 'phaseDeadline'
      ? `phaseDeadline ${formatDurationMs(limitMs)} of phase ${phase ?? '?'}`
      : `progressDeadline ${formatDurationMs(limitMs)}${phase ? ` (in phase ${phase})` : ''}`;
  return `deadline: ${where} passed in active time with ${unconfirmedCount} required device(s) unconfirmed`;
}

/** Why devices that never started are skipped after a deadline rolled the rollout back (an abort says `aborted by wavegate`). */
export function deadlineSkipReason(kind: DeadlineKind): string {
  return `not started: ${kind} passed (rolled back)`;
}
