import { parseDurationMs } from './duration';
import { WavegateError } from './errors';
import { checkProfileName } from './profile-name';
import type { ControlRecord } from './rollout/status';

/**
 * Change freezes (issue 46 item 1; docs/formats.md "Freeze windows"): a window during which every running
 * rollout in its scope is held (paused under the freeze) and nothing new in scope starts (start, converge,
 * revert, the nightly canary). The windows live in one entity workflow per namespace (workflows/freeze.ts);
 * every decision about them is here.
 */

/** What a freeze covers: one profile, one pool, or everything. */
export type FreezeScope = { profile: string } | { pool: string } | 'all';

export interface FreezeWindow {
  /** `freeze-<n>`, given by the entity in the order windows were added. */
  id: string;
  reason: string;
  scope: FreezeScope;
  /** ISO 8601; absent: from when it was added. */
  from?: string;
  /** ISO 8601; absent: until it is lifted (`wavegate unfreeze`). */
  until?: string;
  /** Who added it (the operator's name). */
  by: string;
  /** ISO 8601, the entity's clock when it was added. */
  createdAt: string;
}

/** What an operator asks for: a window without the parts the entity gives it (id, createdAt). */
export type FreezeRequest = Omit<FreezeWindow, 'id' | 'createdAt'>;

/** Bounds: a reason is a line, not a document; the windows held at once stay a small list in one workflow. */
export const FREEZE_REASON_MAX = 200;
export const FREEZE_WINDOWS_MAX = 50;

/** The `by` a rollout's pause and resume carry when a freeze sent them: how a lift finds its own pauses. */
export const FREEZE_ACTOR_PREFIX = 'freeze:';
export function freezeActor(id: string): string {
  return `${FREEZE_ACTOR_PREFIX}${id}`;
}

const POOL_NAME = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;
const FREEZE_ID = /^freeze-[1-9][0-9]{0,8}$/;

function invalid(field: string, value: unknown, why: string): WavegateError {
  return new WavegateError('INVALID_INPUT', `${field} ${JSON.stringify(value)}: ${why}`, { field, value });
}

/** `id` if it names a freeze (`freeze-<n>`), else INVALID_INPUT naming the field. */
export function checkFreezeId(id: unknown, field = 'id'): string {
  if (typeof id !== 'string' || !FREEZE_ID.test(id)) throw invalid(field, id, 'must be a freeze id like freeze-3');
  return id;
}

/** The scope in words: `all`, `profile web`, `pool edge`. */
export function scopeText(scope: FreezeScope): string {
  if (scope === 'all') return 'all';
  return 'profile' in scope ? `profile ${scope.profile}` : `pool ${scope.pool}`;
}

/**
 * A time given on the command line: ISO 8601 (`2026-12-24T00:00:00Z`), or a duration from `base` (`2h`,
 * `30m`, `1d`: from now for --from, from --from for --until). Milliseconds since the epoch, or INVALID_INPUT.
 */
function instantOf(field: string, value: string, base: number): number {
  const duration = parseDurationMs(value);
  if (duration !== undefined && !/^\d+$/.test(value.trim())) return base + duration;
  // A date-time with a zone only: a bare date or a local time means another instant on another machine.
  if (!/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})$/.test(value.trim()))
    throw invalid(field, value, 'must be an ISO 8601 date-time with a zone (2026-12-24T18:00:00Z) or a duration (2h)');
  const ms = Date.parse(value);
  if (!Number.isFinite(ms)) throw invalid(field, value, 'is not a date-time');
  return ms;
}

export interface FreezeFlags {
  /** The positional scope word (`wavegate freeze all`): `all` is the only one. */
  scopeWord?: unknown;
  reason?: unknown;
  profile?: unknown;
  pool?: unknown;
  all?: unknown;
  from?: unknown;
  until?: unknown;
}

/**
 * The request the CLI's flags make, or INVALID_INPUT naming the field and value: a reason of 1-200
 * characters without control characters; at most one of --profile, --pool, --all (none: all); --until after
 * --from and after now. `now` is the caller's clock (ms).
 */
export function freezeRequestOf(flags: FreezeFlags, by: string, now: number): FreezeRequest {
  const reason = typeof flags.reason === 'string' ? flags.reason.trim() : '';
  if (!reason)
    throw invalid('--reason', flags.reason ?? '', 'a freeze needs a reason (it is shown to everyone it stops)');
  if (reason.length > FREEZE_REASON_MAX)
    throw new WavegateError(
      'INVALID_INPUT',
      `--reason: at most ${FREEZE_REASON_MAX} characters (got ${reason.length})`,
      { field: '--reason' },
    );
  // A reason is one line of text, shown on the board and in every refusal.
  if (/[\u0000-\u001f\u007f]/.test(reason))
    throw invalid('--reason', reason, 'must be one line without control characters');
  if (flags.scopeWord !== undefined) {
    if (flags.scopeWord !== 'all')
      throw invalid('scope', flags.scopeWord, 'unknown scope: give all, --all, --profile <name> or --pool <name>');
    flags = { ...flags, all: true, scopeWord: undefined };
  }
  const given = (['profile', 'pool', 'all'] as const).filter((k) => flags[k] !== undefined && flags[k] !== false);
  if (given.length > 1)
    throw new WavegateError(
      'INVALID_INPUT',
      `scope: give one of --profile, --pool, --all (got ${given.map((k) => `--${k}`).join(' and ')})`,
      { field: 'scope', value: given },
    );
  const scope = scopeOf(flags);
  let from: number | undefined;
  if (typeof flags.from === 'string') from = instantOf('--from', flags.from, now);
  else if (flags.from !== undefined) throw invalid('--from', flags.from, 'must be a date-time');
  let until: number | undefined;
  if (typeof flags.until === 'string') until = instantOf('--until', flags.until, from ?? now);
  else if (flags.until !== undefined) throw invalid('--until', flags.until, 'must be a date-time');
  if (until !== undefined && from !== undefined && until <= from)
    throw invalid('--until', flags.until, `must be after --from (${new Date(from).toISOString()})`);
  if (until !== undefined && until <= now)
    throw invalid('--until', flags.until, `is in the past (now ${new Date(now).toISOString()})`);
  return {
    reason,
    scope,
    ...(from !== undefined ? { from: new Date(from).toISOString() } : {}),
    ...(until !== undefined ? { until: new Date(until).toISOString() } : {}),
    by,
  };
}

function scopeOf(flags: FreezeFlags): FreezeScope {
  if (flags.profile !== undefined) {
    if (typeof flags.profile !== 'string') throw invalid('--profile', flags.profile, 'must be a profile name');
    return { profile: checkProfileName(flags.profile, '--profile') };
  }
  if (flags.pool !== undefined) {
    if (typeof flags.pool !== 'string' || !POOL_NAME.test(flags.pool))
      throw invalid('--pool', flags.pool, 'must be a pool name of 1-128 letters, digits, ".", "_", ":" or "-"');
    return { pool: flags.pool };
  }
  return 'all';
}

/**
 * A request as the entity receives it (from any client that can reach the namespace), checked again in full:
 * null when it is well formed, else why. `now` is the entity's clock; `held` the windows it holds.
 */
export function freezeRequestProblem(req: unknown, held: readonly FreezeWindow[], now: number): string | null {
  if (typeof req !== 'object' || req === null) return 'expected { reason, scope, by, from?, until? }';
  const r = req as Record<string, unknown>;
  if (held.length >= FREEZE_WINDOWS_MAX)
    return `at most ${FREEZE_WINDOWS_MAX} freeze windows at once (${held.length} held): lift one first (wavegate unfreeze <id>)`;
  if (typeof r.by !== 'string' || !r.by.trim() || r.by.length > 200)
    return `by: must be a name (got ${JSON.stringify(r.by)})`;
  const scope = r.scope;
  const flags: FreezeFlags = { reason: r.reason };
  if (scope === 'all') flags.all = true;
  else if (typeof scope === 'object' && scope !== null && Object.keys(scope).length === 1 && 'profile' in scope)
    flags.profile = (scope as { profile: unknown }).profile;
  else if (typeof scope === 'object' && scope !== null && Object.keys(scope).length === 1 && 'pool' in scope)
    flags.pool = (scope as { pool: unknown }).pool;
  else return `scope: must be 'all', { profile } or { pool } (got ${JSON.stringify(scope)})`;
  if (r.from !== undefined) flags.from = r.from;
  if (r.until !== undefined) flags.until = r.until;
  try {
    freezeRequestOf(flags, r.by, now);
    return null;
  } catch (err) {
    return (err as Error).message;
  }
}

/**
 * Why a freeze is lifted (the board's lift, `unfreeze --reason`): optional on the CLI, required by the board like
 * its other controls; one line of at most FREEZE_REASON_MAX characters. Recorded in each resume it sends.
 */
export function liftReasonOf(value: unknown, field = 'reason'): string {
  const reason = typeof value === 'string' ? value.trim() : '';
  if (!reason) throw invalid(field, value ?? '', 'a lift needs a reason (it is recorded in each rollout it resumes)');
  if (reason.length > FREEZE_REASON_MAX)
    throw new WavegateError(
      'INVALID_INPUT',
      `${field}: at most ${FREEZE_REASON_MAX} characters (got ${reason.length})`,
      {
        field,
      },
    );
  if (/[\u0000-\u001f\u007f]/.test(reason)) throw invalid(field, reason, 'must be one line without control characters');
  return reason;
}

/** The reason a freeze's resume carries: lifted by whom and why, or ended at its `until`. */
export function releaseReason(window: FreezeWindow, lift?: { by: string; reason?: string }): string {
  if (!lift) return `${window.id} ended (until ${window.until})`;
  return `${window.id} lifted by ${lift.by}${lift.reason ? `: ${lift.reason}` : ''}`;
}

/** When a window starts holding (its `from`, else when it was added), in ms. */
export function startsAt(window: FreezeWindow): number {
  return Date.parse(window.from ?? window.createdAt);
}

/** Is the window in force at `at` (ms)? From `from` (inclusive) to `until` (exclusive). */
export function isActive(window: FreezeWindow, at: number): boolean {
  return startsAt(window) <= at && (window.until === undefined || at < Date.parse(window.until));
}

export function activeWindows(windows: readonly FreezeWindow[], at: number): FreezeWindow[] {
  return windows.filter((w) => isActive(w, at));
}

/** What a start, converge, revert or canary would run over: its profile and the pools of its inventory. */
export interface FreezeTarget {
  profile: string;
  /** The pools the rollout may change devices in; absent: not known, and a pool freeze covers it. */
  pools?: readonly string[];
}

export function scopeCovers(scope: FreezeScope, target: FreezeTarget): boolean {
  if (scope === 'all') return true;
  if ('profile' in scope) return scope.profile === target.profile;
  return target.pools === undefined || target.pools.includes(scope.pool);
}

/** The active freeze that covers the target at `at` (the first added, when several do), or undefined. */
export function coveringFreeze(
  windows: readonly FreezeWindow[],
  target: FreezeTarget,
  at: number,
): FreezeWindow | undefined {
  return activeWindows(windows, at).find((w) => scopeCovers(w.scope, target));
}

export type FrozenAction = 'start' | 'converge' | 'revert' | 'nightly canary';

/** The refusal of an action in scope of a freeze (CONFLICT: exit 2), naming the freeze, its reason and until. */
export function frozenRefusal(window: FreezeWindow, action: FrozenAction, target: FreezeTarget): WavegateError {
  return new WavegateError(
    'CONFLICT',
    `${action} of profile "${target.profile}" refused: ${freezeLine(window)}; lift it with wavegate unfreeze ${window.id}`,
    { freeze: window.id, field: 'freeze', value: window.id },
  );
}

/** One line naming a freeze: `freeze-2 ("release week", profile web, until 2026-12-27T00:00:00.000Z)`. */
export function freezeLine(window: FreezeWindow): string {
  return `frozen by ${window.id} ("${window.reason}", ${scopeText(window.scope)}, ${window.until ? `until ${window.until}` : 'until lifted'})`;
}

/**
 * Is a rollout paused by this freeze now? Its last accepted pause or resume is the freeze's pause: a
 * rollout an operator resumed (and perhaps paused again) since, or that was paused before the freeze
 * (the freeze's pause was then refused), is not.
 */
export function pausedByFreeze(state: string, controls: readonly ControlRecord[], freezeId: string): boolean {
  if (state !== 'paused') return false;
  for (let i = controls.length - 1; i >= 0; i--) {
    const c = controls[i]!;
    if (!c.accepted || (c.control !== 'pause' && c.control !== 'resume')) continue;
    return c.control === 'pause' && c.by === freezeActor(freezeId);
  }
  return false;
}

// ---- the entity's state (workflows/freeze.ts): pure, so the rules are tested without a server ----

/** A window as the entity keeps it: when it held, which rollouts it paused, whether a second sweep is due. */
export interface HeldWindow extends FreezeWindow {
  /** Set once the window's first sweep ran (ISO 8601). */
  heldAt?: string;
  /** The rollouts this freeze paused (workflow ids); the lift resumes those still paused by it. */
  paused: string[];
  /** The next sweep is the second, FREEZE_RESWEEP_MS after the first (rollouts visibility had not listed yet). */
  resweep?: boolean;
}

export interface FreezeState {
  windows: HeldWindow[];
  /** The number of the next id. */
  next: number;
}

/** The second sweep, this long after the first: a rollout started just before the freeze is listed by then. */
export const FREEZE_RESWEEP_MS = 10_000;
/**
 * Then a sweep this often while the window is in force: a rollout started in its scope by a path that does not
 * ask the freeze (the Temporal Web UI's start form, an SDK, an older CLI) is held within a minute. A sweep pauses
 * only rollouts this freeze never paused: one an operator resumed during the freeze stays resumed.
 */
export const FREEZE_SWEEP_EVERY_MS = 60_000;

/** When the window in force is swept next (ms), after its first sweep. */
function nextSweep(w: HeldWindow): number {
  return Date.parse(w.heldAt!) + (w.resweep ? FREEZE_RESWEEP_MS : FREEZE_SWEEP_EVERY_MS);
}

export function addWindow(state: FreezeState, req: FreezeRequest, now: number): HeldWindow {
  const window: HeldWindow = {
    id: `freeze-${state.next}`,
    reason: req.reason.trim(),
    scope: req.scope,
    ...(req.from ? { from: new Date(Date.parse(req.from)).toISOString() } : {}),
    ...(req.until ? { until: new Date(Date.parse(req.until)).toISOString() } : {}),
    by: req.by,
    createdAt: new Date(now).toISOString(),
    paused: [],
  };
  state.next += 1;
  state.windows.push(window);
  return window;
}

/** What is due at `now`: windows to hold (started and not held yet, or a sweep due), and windows ended. */
export function dueWork(state: FreezeState, now: number): { hold: HeldWindow[]; end: HeldWindow[] } {
  const end = state.windows.filter((w) => w.until !== undefined && Date.parse(w.until) <= now);
  const hold = state.windows.filter(
    (w) => !end.includes(w) && startsAt(w) <= now && (!w.heldAt || nextSweep(w) <= now),
  );
  return { hold, end };
}

/** The next instant (ms) something becomes due, or undefined when nothing will without a message. */
export function nextDue(state: FreezeState, now: number): number | undefined {
  const times: number[] = [];
  for (const w of state.windows) {
    if (!w.heldAt) times.push(startsAt(w));
    else times.push(nextSweep(w));
    if (w.until) times.push(Date.parse(w.until));
  }
  const next = Math.min(...times);
  return Number.isFinite(next) ? Math.max(next, now) : undefined;
}

/** The windows a lift names, or why none: an id the entity does not hold is NOT_FOUND in the client. */
export function windowsToLift(state: FreezeState, target: { id?: string; all?: boolean }): HeldWindow[] | string {
  if (target.all) return [...state.windows];
  const found = state.windows.find((w) => w.id === target.id);
  if (found) return [found];
  const ids = state.windows.map((w) => w.id);
  return `no freeze ${JSON.stringify(target.id)} is held (held: ${ids.length ? ids.join(', ') : 'none'})`;
}

/** The window as the entity's memo carries it (contracts/freeze.ts FREEZES_MEMO): what a refusal names, no more. */
export function memoWindow(w: HeldWindow): FreezeWindow {
  const { resweep: _resweep, paused: _paused, heldAt: _heldAt, ...rest } = w;
  return rest;
}

/** The windows read back from the memo: anything but a window-shaped object is dropped, not trusted. */
export function windowsFromMemo(value: unknown): FreezeWindow[] {
  if (!Array.isArray(value)) return [];
  return value
    .slice(0, FREEZE_WINDOWS_MAX)
    .filter(
      (w): w is FreezeWindow =>
        typeof w === 'object' &&
        w !== null &&
        typeof (w as FreezeWindow).id === 'string' &&
        typeof (w as FreezeWindow).reason === 'string' &&
        ((w as FreezeWindow).scope === 'all' ||
          (typeof (w as FreezeWindow).scope === 'object' && (w as FreezeWindow).scope !== null)),
    );
}

/** The window as readers see it (no entity bookkeeping but the rollouts it paused). */
export function publicWindow(w: HeldWindow): FreezeWindow & { paused: string[]; heldAt?: string } {
  const { resweep: _resweep, ...rest } = w;
  return rest;
}
