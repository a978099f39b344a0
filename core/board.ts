import type { AuditRecord } from './audit';
import { WavegateError } from './errors';
import type { CheckResult, GateOutcome } from './health';
import type { RolloutStatus } from './rollout/status';
import {
  proofCounts as countProof,
  proofOf,
  ROLLOUT_STATES,
  type DeviceState,
  type DeviceStatus,
  type RolloutState,
} from './rollout-state';
import { checkProfileName } from './profile-name';
import { phaseCounts } from './rollout/sliced-records';
import { describeWatch } from './rollout/watch';
import { ROLES, type Role } from './approval';

/**
 * What the board (`wavegate board`, cli/board/) decides, as pure functions: a rollout's true outcome in
 * the list, the worst-first device order, the plan-vs-actual progress of phases, the banner's "why", the
 * gate evidence read back from the audit trail, and the checks on what a browser sends. The HTTP layer
 * only reads, calls these and writes JSON. No Node APIs: unit-tested directly.
 */

/** Worst first: what needs an operator's eyes (failures, stuck devices) above what went well. */
export const DEVICE_SEVERITY: readonly DeviceState[] = [
  'failed',
  'rollback-failed',
  'waiting',
  'applying',
  'rolling-back',
  'pending',
  'not-started',
  'skipped',
  'rolled-back',
  'not-for-me',
  'claimed',
  'applied',
];

function severityOf(state: string): number {
  const i = (DEVICE_SEVERITY as readonly string[]).indexOf(state);
  return i < 0 ? DEVICE_SEVERITY.length : i;
}

/** One row of the board's device table: the status's device with what the audit trail adds. */
export interface BoardDevice {
  id: string;
  state: DeviceState;
  phase: number;
  reason?: string;
  /** When the device entered its current state (the audit record that said so), if the trail says. */
  since?: string;
  /** Apply attempts the trail records (a waiting device is retried). */
  attempts: number;
  /** The last failure's text the trail holds, even once the device has moved on. */
  lastError?: string;
  transport?: string;
  /** `proven`: its last answer came with its own verified receipt (the status says so, or its trail entry carries it); `claimed`: at the target on the control plane's word alone. */
  proof?: 'proven' | 'claimed';
}

/** Devices sorted worst first, then by id (a stable order the page can rely on between updates). */
export function sortWorstFirst<T extends { id: string; state: string }>(devices: readonly T[]): T[] {
  return [...devices].sort((a, b) => severityOf(a.state) - severityOf(b.state) || a.id.localeCompare(b.id));
}

export const MAX_PAGE = 500;
export const DEFAULT_PAGE = 100;

export interface DeviceQuery {
  state?: string;
  q?: string;
  offset: number;
  limit: number;
}

/** The device table's query string, checked: a state the rollout knows, an id substring, a page within bounds. */
export function parseDeviceQuery(params: URLSearchParams): DeviceQuery {
  const state = params.get('state') || undefined;
  if (state !== undefined && !(DEVICE_SEVERITY as readonly string[]).includes(state))
    throw new WavegateError(
      'INVALID_INPUT',
      `state ${JSON.stringify(state)}: must be one of ${DEVICE_SEVERITY.join(', ')}`,
      {
        field: 'state',
        value: state,
      },
    );
  const q = params.get('q') ?? undefined;
  if (q !== undefined && q.length > 200)
    throw new WavegateError('INVALID_INPUT', `q: at most 200 characters (got ${q.length})`, { field: 'q' });
  const whole = (name: string, fallback: number, max: number) => wholeParam(params, name, fallback, max);
  return {
    ...(state ? { state } : {}),
    ...(q ? { q } : {}),
    offset: whole('offset', 0, 1_000_000_000),
    limit: Math.max(1, whole('limit', DEFAULT_PAGE, MAX_PAGE)),
  };
}

/** A whole-number query parameter within 0-`max` (`fallback` when absent), else INVALID_INPUT naming it and its value. */
function wholeParam(params: URLSearchParams, name: string, fallback: number, max: number): number {
  const text = params.get(name);
  if (text === null || text === '') return fallback;
  if (!/^\d{1,9}$/.test(text) || Number(text) > max)
    throw new WavegateError(
      'INVALID_INPUT',
      `${name} ${JSON.stringify(text.slice(0, 40))}: must be a whole number 0-${max}`,
      {
        field: name,
        value: text.slice(0, 40),
      },
    );
  return Number(text);
}

/** The rollout list's pages: how many rows a page may ask for, and how many listed rollouts a search reads. */
export const ROLLOUT_LIST = { defaultLimit: 50, maxLimit: 100, maxPage: 1_000, scan: 1_000 } as const;

/** The rollout list's query string, checked (`GET /api/rollouts`). */
export interface RolloutListQuery {
  /** Matched, as a substring and in any case, against a rollout's id, profile, state and outcome. */
  q?: string;
  /** Exact: the visibility query's own filters (cli/client.ts listQuery whitelists them again). */
  state?: RolloutState;
  profile?: string;
  page: number;
  limit: number;
}

/** What a rollout id, a profile or a state is made of: the search box takes nothing else. */
const ROLLOUT_SEARCH = /^[A-Za-z0-9:._@-]{1,100}$/;
const LIST_PARAMS = new Set(['q', 'state', 'profile', 'page', 'limit']);

/**
 * `GET /api/rollouts?q=&state=&profile=&page=&limit=`, checked: every parameter known, a search of the characters
 * ids are made of (1-100), a state wavegate has, a profile name, a page within bounds. `q` is matched in memory;
 * only the whitelisted state and profile reach a visibility query, so nothing typed is ever part of one.
 */
export function parseRolloutListQuery(params: URLSearchParams): RolloutListQuery {
  for (const key of params.keys())
    if (!LIST_PARAMS.has(key))
      throw new WavegateError(
        'INVALID_INPUT',
        `${JSON.stringify(key.slice(0, 40))}: not a parameter of the rollout list (allowed: ${[...LIST_PARAMS].join(', ')})`,
        { field: key.slice(0, 40) },
      );
  const q = params.get('q') || undefined;
  if (q !== undefined && !ROLLOUT_SEARCH.test(q))
    throw new WavegateError(
      'INVALID_INPUT',
      `q ${JSON.stringify(q.slice(0, 40))}: a search is 1-100 letters, digits, ":", ".", "_", "@" or "-" (what rollout ids, profiles and states are made of)`,
      { field: 'q', value: q.slice(0, 40) },
    );
  const state = params.get('state') || undefined;
  if (state !== undefined && !(ROLLOUT_STATES as readonly string[]).includes(state))
    throw new WavegateError(
      'INVALID_INPUT',
      `state ${JSON.stringify(state.slice(0, 40))}: must be one of ${ROLLOUT_STATES.join(', ')}`,
      { field: 'state', value: state.slice(0, 40) },
    );
  const profile = params.get('profile') || undefined;
  if (profile !== undefined) checkProfileName(profile.slice(0, 100), 'profile');
  return {
    ...(q ? { q } : {}),
    ...(state ? { state: state as RolloutState } : {}),
    ...(profile ? { profile } : {}),
    page: wholeParam(params, 'page', 0, ROLLOUT_LIST.maxPage),
    limit: Math.max(1, wholeParam(params, 'limit', ROLLOUT_LIST.defaultLimit, ROLLOUT_LIST.maxLimit)),
  };
}

/** One page of the rollout list: the rows that match, failures first, and where the page is in them. */
export interface RolloutPage<T> {
  rows: T[];
  /** Rollouts that match among those read (at most ROLLOUT_LIST.scan, the newest). */
  matching: number;
  page: number;
  limit: number;
  pages: number;
}

/** The matching rows, failures first (sortFailuresFirst), and the page of them asked for. */
export function pageOfRollouts<
  T extends { workflowId: string; profile?: string; state?: string; outcome: BoardOutcome; startTime: string },
>(rows: readonly T[], query: Pick<RolloutListQuery, 'q' | 'page' | 'limit'>): RolloutPage<T> {
  const needle = query.q?.toLowerCase();
  const matching = sortFailuresFirst(
    needle
      ? rows.filter((r) =>
          [r.workflowId, r.profile ?? '', r.state ?? '', r.outcome].some((f) => f.toLowerCase().includes(needle)),
        )
      : rows,
  );
  const start = query.page * query.limit;
  return {
    rows: matching.slice(start, start + query.limit),
    matching: matching.length,
    page: query.page,
    limit: query.limit,
    pages: Math.ceil(matching.length / query.limit),
  };
}

export interface DevicePage {
  total: number;
  matching: number;
  offset: number;
  limit: number;
  devices: BoardDevice[];
}

/** One page of the filtered, worst-first table: a rollout of thousands of devices sends a page, not all. */
export function pageOfDevices(devices: readonly BoardDevice[], query: DeviceQuery): DevicePage {
  const needle = query.q?.toLowerCase();
  const matching = sortWorstFirst(
    devices.filter(
      (d) => (!query.state || d.state === query.state) && (!needle || d.id.toLowerCase().includes(needle)),
    ),
  );
  return {
    total: devices.length,
    matching: matching.length,
    offset: query.offset,
    limit: query.limit,
    devices: matching.slice(query.offset, query.offset + query.limit),
  };
}

/** What the audit trail adds to each device: when it entered its state, how many apply attempts, its last error. */
export function deviceHistory(
  records: readonly AuditRecord[],
): Map<string, Omit<BoardDevice, 'id' | 'state' | 'phase'> & { receipt?: true }> {
  const out = new Map<
    string,
    { since?: string; attempts: number; lastError?: string; state?: string; receipt?: boolean }
  >();
  for (const r of records) {
    if (r.event !== 'devices.outcome' && r.event !== 'devices.skipped') continue;
    const evidence = r.evidence as { mode?: string; devices?: unknown } | null;
    const list = Array.isArray(evidence?.devices) ? evidence.devices : [];
    for (const item of list) {
      const d = (typeof item === 'string' ? { id: item, state: 'not-started' } : item) as {
        id?: unknown;
        state?: unknown;
        reason?: unknown;
        receipt?: unknown;
      };
      if (typeof d.id !== 'string') continue;
      const seen = out.get(d.id) ?? { attempts: 0 };
      const state = typeof d.state === 'string' ? d.state : undefined;
      if (state !== seen.state) seen.since = r.at;
      seen.state = state;
      // The latest entry naming the device says whether its answer came with its receipt.
      seen.receipt = typeof d.receipt === 'string';
      // The trail records each batch after it ran: every apply record naming a device is one attempt.
      if (evidence?.mode === 'apply') seen.attempts += 1;
      if ((state === 'failed' || state === 'rollback-failed' || state === 'waiting') && typeof d.reason === 'string')
        seen.lastError = d.reason;
      out.set(d.id, seen);
    }
  }
  return new Map(
    [...out].map(([id, h]) => [
      id,
      {
        attempts: h.attempts,
        ...(h.since ? { since: h.since } : {}),
        ...(h.lastError ? { lastError: h.lastError } : {}),
        ...(h.receipt ? { receipt: true as const } : {}),
      },
    ]),
  );
}

/** A device's proof as the board shows it: its status's word, or the receipt its latest trail entry carries. */
function boardProof(d: Pick<DeviceStatus, 'state' | 'proven'>, receiptInTrail: boolean): Pick<BoardDevice, 'proof'> {
  const proof = proofOf({ state: d.state, ...(d.proven || receiptInTrail ? { proven: true as const } : {}) });
  return proof ? { proof } : {};
}

/** The board's proof line over its devices (core/rollout-state.ts proofCounts, as `status` counts it). */
export function proofCounts(devices: readonly Pick<BoardDevice, 'state' | 'proof'>[]): {
  proven: number;
  applied: number;
} {
  return countProof(devices.map((d) => ({ state: d.state, proven: d.proof === 'proven' })));
}

/** The status's devices with the trail's history and the inventory's transport. */
export function boardDevices(
  status: Pick<RolloutStatus, 'devices'>,
  records: readonly AuditRecord[],
  transports: ReadonlyMap<string, string> = new Map(),
): BoardDevice[] {
  const history = deviceHistory(records);
  return status.devices.map((d) => {
    const h = history.get(d.id);
    const transport = transports.get(d.id);
    return {
      id: d.id,
      state: d.state,
      phase: d.phase,
      ...(d.reason ? { reason: d.reason } : {}),
      attempts: h?.attempts ?? 0,
      ...(h?.since ? { since: h.since } : {}),
      ...(h?.lastError ? { lastError: h.lastError } : {}),
      ...(transport ? { transport } : {}),
      ...boardProof(d, h?.receipt === true),
    };
  });
}

/** A rollout's outcome as the list shows it: never "Completed" for a rollout that rolled back or was aborted. */
export type BoardOutcome =
  | 'running'
  | 'paused'
  /** Every phase passed; the spec's watch after promotion is checking the changed devices. */
  | 'watching'
  | 'completed'
  | 'completed-pending'
  | 'rolled-back'
  | 'aborted'
  | 'cancelled'
  | 'failed'
  | 'terminated'
  | 'unknown';

/** Failures first in the list: the order an operator triages in. */
const OUTCOME_ORDER: readonly BoardOutcome[] = [
  'failed',
  'terminated',
  'rolled-back',
  'aborted',
  'paused',
  'running',
  'watching',
  'completed-pending',
  'cancelled',
  'unknown',
  'completed',
];

/**
 * The true outcome of a listed rollout: the workflow's own state (the WavegateState search attribute, or
 * its status when known), not Temporal's execution status (a workflow that rolled back returns normally,
 * so Temporal says Completed). A run Temporal ended from outside (terminated, timed out) says so, whatever
 * state it last published. A completed rollout with devices short of the target is pending work.
 */
export function boardOutcome(
  temporalStatus: string,
  state: string | undefined,
  status?: Pick<RolloutStatus, 'state' | 'counts'>,
): BoardOutcome {
  if (temporalStatus === 'TERMINATED' || temporalStatus === 'TIMED_OUT') return 'terminated';
  const s = status?.state ?? state;
  if (temporalStatus === 'FAILED' && (s === undefined || s === 'running' || s === 'paused' || s === 'watching'))
    return 'failed';
  if (temporalStatus === 'CANCELED' && (s === undefined || s === 'running' || s === 'paused' || s === 'watching'))
    return 'cancelled';
  switch (s) {
    case 'running':
    case 'paused':
    case 'watching':
    case 'rolled-back':
    case 'aborted':
    case 'cancelled':
    case 'failed':
      return s;
    case 'completed': {
      if (!status) return 'completed';
      // The counts, not the devices listed: a large rollout lists its sliced phases' devices in its slices only.
      const c = status.counts;
      return c.total - c.applied - c.claimed - c['not-for-me'] > 0 ? 'completed-pending' : 'completed';
    }
    default:
      return temporalStatus === 'RUNNING' ? 'running' : 'unknown';
  }
}

export function sortFailuresFirst<T extends { outcome: BoardOutcome; startTime: string }>(rows: readonly T[]): T[] {
  return [...rows].sort(
    (a, b) =>
      OUTCOME_ORDER.indexOf(a.outcome) - OUTCOME_ORDER.indexOf(b.outcome) || b.startTime.localeCompare(a.startTime),
  );
}

/** One phase as the board shows it: its plan (devices planned) against what happened to them. */
export interface PhaseProgress {
  index: number;
  name: string;
  stage: string;
  gate: number | 'manual';
  gateOutcome?: GateOutcome;
  planned: number;
  done: number;
  failed: number;
  inFlight: number;
  notForMe: number;
}

export function phaseProgress(status: Pick<RolloutStatus, 'phases' | 'devices' | 'slices'>): PhaseProgress[] {
  return status.phases.map((p) => {
    // A large rollout's sliced phase is counted from its slices (core/rollout/sliced-records.ts).
    const counts = phaseCounts(status, p.index);
    const count = (...states: DeviceState[]) => states.reduce((n, s) => n + counts[s], 0);
    return {
      index: p.index,
      name: p.name,
      stage: p.stage,
      gate: p.gate,
      ...(p.gateOutcome ? { gateOutcome: p.gateOutcome } : {}),
      planned: p.devices,
      done: count('applied', 'claimed'),
      failed: count('failed', 'rollback-failed'),
      inFlight: count('applying', 'rolling-back', 'waiting'),
      notForMe: count('not-for-me'),
    };
  });
}

/** The banner: the rollout's state and, in one line each, why it is in it. */
export interface Banner {
  state: string;
  headline: string;
  why: string[];
}

export function bannerOf(status: RolloutStatus): Banner {
  const why: string[] = [];
  if (status.pausedReason) why.push(`${status.state === 'paused' ? 'paused' : 'was paused'}: ${status.pausedReason}`);
  if (status.deadline) {
    const d = status.deadline;
    why.push(
      `deadline: ${d.kind} passed at ${d.at}${d.phase ? ` in ${d.phase}` : ''} → ${d.action}; ${d.unconfirmedCount} device(s) unconfirmed`,
    );
  }
  const gated = [...status.phases].reverse().find((p) => p.gateOutcome);
  if (gated)
    why.push(
      `gate of phase ${gated.name}: ${gated.gateOutcome}${gated.evidence?.length ? ` (${gated.evidence.join('; ')})` : ''}`,
    );
  const waiting = status.phases.find((p) => p.stage === 'awaiting-approval');
  if (waiting) why.push(`phase ${waiting.name} waits for a manual approval`);
  if (status.verdict) why.push(`canary verdict: ${status.verdict}`);
  if (status.watch) why.push(describeWatch(status.watch));
  const last = status.controls.at(-1);
  if (last)
    why.push(
      `last control: ${last.control} by ${last.by}${last.reason ? ` ("${last.reason}")` : ''}, ${last.accepted ? 'accepted' : `refused${last.note ? `: ${last.note}` : ''}`}`,
    );
  const c = status.counts;
  const headline = `${status.rolloutId}: ${status.state}, phase ${status.phase}, ${c.applied + c.claimed}/${c.total} at r${status.toRevision}${c.failed ? `, ${c.failed} failed` : ''}`;
  return { state: status.state, headline, why };
}

/** A gate decision with the evidence behind it, read from the audit trail. */
export interface GateEvidence {
  /** The audit record's seq: the page links it. */
  seq: number;
  at: string;
  phase: string | null;
  kind: 'health' | 'failure-gate' | 'manual';
  outcome: GateOutcome | 'approved';
  by: string;
  /** Health gate: each check run, its result, and the devices that made it fail. */
  checks?: CheckResult[];
  /** Failure gate and each applied phase: succeeded, failed, the ratio and the sample it was taken over. */
  tally?: { succeeded: number; failed: number; ratio: number; sample: number };
  reason?: string;
}

function tallyOf(value: unknown): GateEvidence['tally'] | undefined {
  const t = (value as { tally?: { succeeded?: unknown; failed?: unknown } } | null)?.tally;
  if (!t || typeof t.succeeded !== 'number' || typeof t.failed !== 'number') return undefined;
  const sample = t.succeeded + t.failed;
  return { succeeded: t.succeeded, failed: t.failed, sample, ratio: sample === 0 ? 0 : t.failed / sample };
}

function checksOf(value: unknown): CheckResult[] | undefined {
  if (!Array.isArray(value)) return undefined;
  return value.filter(
    (c): c is CheckResult =>
      !!c &&
      typeof c === 'object' &&
      typeof (c as CheckResult).check === 'string' &&
      typeof (c as CheckResult).outcome === 'string',
  );
}

/**
 * Every gate decision in a trail, with its evidence: the health gate's checks (`gate.passed`,
 * `gate.failed`, `gate.inconclusive` carrying the check results), the failure gate's tally (`gate.failed`
 * with reason `failure-gate`), a manual approval (`rollout.approved`); each phase's applied tally is
 * attached to the gate of that phase as the failure ratio and its sample.
 */
export function gateEvidenceOf(records: readonly AuditRecord[]): GateEvidence[] {
  const out: GateEvidence[] = [];
  const appliedTally = new Map<string, GateEvidence['tally']>();
  for (const r of records) {
    if (r.event === 'phase.applied' && r.phase) {
      const t = tallyOf(r.evidence);
      if (t) appliedTally.set(r.phase, t);
      continue;
    }
    const base = { seq: r.seq, at: r.at, phase: r.phase, by: r.by };
    if (r.event === 'gate.failed' && r.reason === 'failure-gate') {
      out.push({
        ...base,
        kind: 'failure-gate',
        outcome: 'fail',
        ...(tallyOf(r.evidence) ? { tally: tallyOf(r.evidence) } : {}),
        reason: 'failure-gate',
      });
    } else if (r.event === 'gate.passed' || r.event === 'gate.failed' || r.event === 'gate.inconclusive') {
      const outcome: GateOutcome =
        r.event === 'gate.passed' ? 'pass' : r.event === 'gate.failed' ? 'fail' : 'inconclusive';
      const tally = r.phase ? appliedTally.get(r.phase) : undefined;
      out.push({
        ...base,
        kind: 'health',
        outcome,
        checks: checksOf(r.evidence) ?? [],
        ...(tally ? { tally } : {}),
        ...(r.reason ? { reason: r.reason } : {}),
      });
    } else if (r.event === 'rollout.approved') {
      out.push({ ...base, kind: 'manual', outcome: 'approved', ...(r.reason ? { reason: r.reason } : {}) });
    }
  }
  return out;
}

/** One moment of a rollout's timeline: a phase, a gate, a control (with who), a rollback, the watch, the end. */
export interface TimelineEntry {
  at: string;
  kind: 'rollout' | 'phase' | 'gate' | 'control' | 'rollback' | 'watch' | 'deadline';
  text: string;
  by?: string;
  phase?: string | null;
  reason?: string;
  /** The audit record it was read from (the page links it); none for a refused control (from the status). */
  seq?: number;
  /** A gate's or a watch check's outcome; a control's acceptance. */
  outcome?: string;
}

/** The timeline keeps the newest this many entries (a rollout paused and resumed for weeks stays one page). */
export const MAX_TIMELINE = 500;

type TimelineKind = TimelineEntry['kind'];
/** The trail's events on the timeline, each with its kind and what it says; a device batch's records are the device table's. */
const TIMELINE_EVENTS: Partial<Record<AuditRecord['event'], [TimelineKind, (r: AuditRecord) => string]>> = {
  'rollout.started': ['rollout', () => 'rollout started'],
  'phase.started': ['phase', (r) => `phase ${r.phase} started`],
  'phase.applied': [
    'phase',
    (r) => {
      const t = tallyOf(r.evidence);
      return `phase ${r.phase} applied${t ? ` (${t.succeeded} succeeded, ${t.failed} failed)` : ''}`;
    },
  ],
  'gate.passed': ['gate', (r) => `gate of ${r.phase}: pass`],
  'gate.failed': ['gate', (r) => `gate of ${r.phase}: fail${r.reason === 'failure-gate' ? ' (failure gate)' : ''}`],
  'gate.inconclusive': ['gate', (r) => `gate of ${r.phase}: inconclusive`],
  'rollout.paused': ['control', () => 'paused'],
  'rollout.resumed': ['control', () => 'resumed'],
  'rollout.approved': ['control', (r) => `approved${r.phase ? ` ${r.phase}` : ''}`],
  'rollout.aborted': ['control', () => 'aborted'],
  'rollout.cancelled': ['control', () => 'cancelled'],
  'audit.override': ['control', () => 'audit trail overridden'],
  'rollback.started': ['rollback', () => 'rollback started'],
  'rollback.completed': ['rollback', () => 'rollback completed'],
  'deadline.passed': ['deadline', () => 'deadline passed'],
  'watch.started': ['watch', () => 'watch started'],
  'watch.passed': ['watch', () => 'watch check: pass'],
  'watch.inconclusive': ['watch', () => 'watch check: inconclusive'],
  'watch.failed': ['watch', () => 'watch check: fail'],
  'watch.completed': ['watch', () => 'watch completed'],
  'canary.verdict': ['rollout', () => 'canary verdict'],
  'floor.confirmed': ['rollout', () => 'floor confirmed'],
  'rollout.completed': ['rollout', () => 'rollout completed'],
  'rollout.ended': ['rollout', () => 'rollout ended'],
  'rollout.failed': ['rollout', () => 'rollout failed'],
};

const GATE_OUTCOME: Partial<Record<AuditRecord['event'], string>> = {
  'gate.passed': 'pass',
  'gate.failed': 'fail',
  'gate.inconclusive': 'inconclusive',
  'watch.passed': 'pass',
  'watch.failed': 'fail',
  'watch.inconclusive': 'inconclusive',
};

/**
 * A rollout's timeline, oldest first: its trail's phases, gates, controls, rollback, watch and end (each
 * with its record's seq), and the controls the workflow refused (the status's, which the trail does not
 * hold but as a refused approval; so refusals are read from the status alone). Without a readable trail,
 * every control from the status. The newest MAX_TIMELINE entries; `omitted` says how many older ones are not.
 */
export function timelineOf(
  status: Pick<RolloutStatus, 'controls'>,
  records: readonly AuditRecord[],
): { entries: TimelineEntry[]; omitted: number } {
  const out: TimelineEntry[] = [];
  for (const r of records) {
    const known = TIMELINE_EVENTS[r.event];
    if (!known) continue;
    const outcome = GATE_OUTCOME[r.event];
    out.push({
      at: r.at,
      kind: known[0],
      text: known[1](r),
      by: r.by,
      phase: r.phase,
      seq: r.seq,
      ...(r.reason ? { reason: r.reason } : {}),
      ...(outcome ? { outcome } : {}),
    });
  }
  for (const c of status.controls)
    if (!c.accepted || records.length === 0)
      out.push({
        at: c.at,
        kind: 'control',
        text: `${c.control} ${c.accepted ? 'accepted' : 'refused'}${c.note ? `: ${c.note}` : ''}`,
        by: c.by,
        ...(c.reason ? { reason: c.reason } : {}),
        outcome: c.accepted ? 'accepted' : 'refused',
      });
  const sorted = out.sort((a, b) => a.at.localeCompare(b.at) || (a.seq ?? 0) - (b.seq ?? 0));
  const omitted = Math.max(0, sorted.length - MAX_TIMELINE);
  return { entries: sorted.slice(omitted), omitted };
}

/** A value a health check read and the threshold it was judged against, as its evidence words them. */
export interface MetricReading {
  value: number;
  op: string;
  threshold: number;
}

const NUM = '(-?\\d+(?:\\.\\d+)?(?:e[+-]?\\d+)?)';
const OP = '(<=|<)';
/** A Prometheus check's evidence (activities/health/evidence.ts judged): `[max of N series ]V[ at {…}] is [not ]op T`. */
const JUDGED_EVIDENCE = new RegExp(`^(?:max of \\d+ series )?${NUM}(?: at .*)? is (?:not )?${OP} ${NUM}$`);
/** errorRate passed: `max error rate V (device) over N devices is op T`. */
const RATE_PASSED = new RegExp(`^max error rate ${NUM} \\(.*\\) over \\d+ devices? is (?:not )?${OP} ${NUM}$`);
/** errorRate failed: `error rate not op T on dev-1 (V1), dev-2 (V2)…`: the worst value counts. */
const RATE_FAILED = new RegExp(`^error rate not ${OP} ${NUM} on (.*)$`);

/**
 * The value a check read, from its evidence: the health checks record their reading as words, not numbers,
 * so the chart reads back the phrasings of the threshold checks (Prometheus, errorRate) and nothing else.
 * Undefined for any other check or wording (an http status, devices online, an inconclusive read).
 */
export function metricReading(evidence: string): MetricReading | undefined {
  const judged = JUDGED_EVIDENCE.exec(evidence) ?? RATE_PASSED.exec(evidence);
  if (judged) return { value: Number(judged[1]), op: judged[2]!, threshold: Number(judged[3]) };
  const failed = RATE_FAILED.exec(evidence);
  if (!failed) return undefined;
  const values = [...failed[3]!.matchAll(new RegExp(`\\(${NUM}\\)`, 'g'))].map((m) => Number(m[1]));
  return values.length ? { value: Math.max(...values), op: failed[1]!, threshold: Number(failed[2]) } : undefined;
}

/** One check's readings over the rollout's gates and watch checks, oldest first: what the page draws. */
export interface MetricSeries {
  check: string;
  op: string;
  threshold: number;
  points: { at: string; value: number; outcome: string; phase: string | null; seq: number }[];
}

/** Points a series keeps (the newest). */
export const MAX_SERIES_POINTS = 200;

/** Every threshold check's readings in a trail: the health gates' (`gate.*`) and the watch's (`watch.*`). */
export function metricSeriesOf(records: readonly AuditRecord[]): MetricSeries[] {
  const byCheck = new Map<string, MetricSeries>();
  for (const r of records) {
    const outcome = GATE_OUTCOME[r.event];
    if (!outcome) continue;
    const ev = r.evidence as { results?: unknown } | unknown[] | null;
    const checks = checksOf(Array.isArray(ev) ? ev : (ev as { results?: unknown } | null)?.results) ?? [];
    for (const c of checks) {
      const reading = metricReading(c.evidence);
      if (!reading) continue;
      const series = byCheck.get(c.check) ?? {
        check: c.check,
        op: reading.op,
        threshold: reading.threshold,
        points: [],
      };
      series.threshold = reading.threshold;
      series.points.push({ at: r.at, value: reading.value, outcome: c.outcome, phase: r.phase, seq: r.seq });
      byCheck.set(c.check, series);
    }
  }
  return [...byCheck.values()].map((s) => ({ ...s, points: s.points.slice(-MAX_SERIES_POINTS) }));
}

/** A device's history: how many listed rollouts are looked in (the newest), and how many rows are answered. */
export const DEVICE_HISTORY = { scan: 200, rows: 50 } as const;

/** A device id as the inventory allows it (core/inventory.ts): what the history's URL may name. */
const DEVICE_ID = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;

export function checkDeviceId(id: string): string {
  if (!DEVICE_ID.test(id))
    throw new WavegateError(
      'INVALID_INPUT',
      `device id ${JSON.stringify(id.slice(0, 80))}: must be 1-128 letters, digits, ".", "_", ":" or "-" (as in the inventory)`,
      { field: 'device', value: id.slice(0, 80) },
    );
  return id;
}

/** One rollout in a device's history: what it did to the device (its state there), between which revisions, when. */
export interface DeviceHistoryRow {
  rolloutId: string;
  runId: string;
  profile: string;
  outcome: BoardOutcome;
  /** The device's state in that rollout: applied, rolled-back, failed, skipped, not-for-me… */
  state: DeviceState;
  phase: string | null;
  reason?: string;
  fromRevision: number;
  toRevision: number;
  startTime: string;
  closeTime?: string;
}

/** A rollout's row in a device's history, from its listing, its status and the device's record in it (findDevice). */
export function deviceHistoryRow(
  listing: { workflowId: string; runId: string; status: string; state?: string; startTime: string; closeTime?: string },
  status: Pick<RolloutStatus, 'profile' | 'fromRevision' | 'toRevision' | 'phases' | 'state' | 'counts'>,
  device: Pick<DeviceStatus, 'state' | 'phase' | 'reason'>,
): DeviceHistoryRow {
  return {
    rolloutId: listing.workflowId,
    runId: listing.runId,
    profile: status.profile,
    outcome: boardOutcome(listing.status, listing.state, status),
    state: device.state,
    phase: status.phases[device.phase]?.name ?? null,
    ...(device.reason ? { reason: device.reason } : {}),
    fromRevision: status.fromRevision,
    toRevision: status.toRevision,
    startTime: listing.startTime,
    ...(listing.closeTime ? { closeTime: listing.closeTime } : {}),
  };
}

/** What the abort dialog says a rollback would touch, either way the operator ticks its box. */
export interface AbortPreview {
  /** The devices this rollout changed so far (the status's changedDevices): what a rollback puts back. */
  devices: number;
  rollback: string;
  keep: string;
}

/**
 * The abort dialog's count, from the status's changedDevices (what the workflow's rollback walks, last
 * changed first), so the operator sees what a confirm does before confirming. A device in flight at the
 * confirm finishes and is put back too: the count is "so far".
 */
export function abortPreview(changed: number | undefined): AbortPreview {
  const n = changed ?? 0;
  const devices = `${n} device${n === 1 ? '' : 's'}`;
  return {
    devices: n,
    rollback:
      n === 0
        ? 'With rollback: nothing to put back, this rollout has changed no device so far.'
        : `With rollback, the ${devices} this rollout changed so far ${n === 1 ? 'is' : 'are'} put back (last changed first), and any device in flight when you confirm.`,
    keep:
      n === 0
        ? 'Without rollback no device is put back; this rollout has changed none so far.'
        : `Without rollback no device is put back: the ${devices} this rollout changed stay${n === 1 ? 's' : ''} as ${n === 1 ? 'it is' : 'they are'}.`,
  };
}

/** The controls the board sends, and what each body may hold. */
export const BOARD_CONTROLS = ['pause', 'resume', 'approve', 'abort'] as const;
export type BoardControl = (typeof BOARD_CONTROLS)[number];
export const MAX_REASON = 500;

export interface ControlBody {
  reason: string;
  rollback?: boolean;
  phase?: number | string;
}

/** A reason as an operator typed it: 1-500 characters, no control characters; trimmed. */
function parseReason(name: string, reason: unknown, where: string): string {
  if (typeof reason !== 'string' || reason.trim() === '')
    throw new WavegateError('INVALID_INPUT', `reason: ${name} needs a reason (${where})`, { field: 'reason' });
  if (reason.length > MAX_REASON)
    throw new WavegateError('INVALID_INPUT', `reason: at most ${MAX_REASON} characters (got ${reason.length})`, {
      field: 'reason',
    });
  if (/[\u0000-\u0008\u000b-\u001f\u007f]/.test(reason))
    throw new WavegateError('INVALID_INPUT', 'reason: control characters are not allowed', { field: 'reason' });
  return reason.trim();
}

/** A control's JSON body, checked: a reason (1-500 characters, said in the audit trail), `rollback` only on an abort. */
export function parseControlBody(name: BoardControl, body: Record<string, unknown>): ControlBody {
  const allowed = new Set([
    'reason',
    ...(name === 'abort' ? ['rollback'] : []),
    ...(name === 'approve' ? ['phase'] : []),
  ]);
  for (const key of Object.keys(body))
    if (!allowed.has(key))
      throw new WavegateError('INVALID_INPUT', `${key}: not a field of ${name} (allowed: ${[...allowed].join(', ')})`, {
        field: key,
      });
  const out: ControlBody = { reason: parseReason(name, body.reason, 'it is recorded in the audit trail') };
  if (body.rollback !== undefined) {
    if (typeof body.rollback !== 'boolean')
      throw new WavegateError(
        'INVALID_INPUT',
        `rollback: must be true or false (got ${JSON.stringify(body.rollback)})`,
        {
          field: 'rollback',
        },
      );
    out.rollback = body.rollback;
  }
  if (body.phase !== undefined) {
    if (!(typeof body.phase === 'string' && body.phase.length <= 100) && !Number.isSafeInteger(body.phase))
      throw new WavegateError('INVALID_INPUT', 'phase: must be a phase index or name', { field: 'phase' });
    out.phase = body.phase as number | string;
  }
  return out;
}

/** A rollout id as the board accepts it in a URL: what rollout ids, converges and reverts are made of. */
export const BOARD_ROLLOUT_ID = /^[A-Za-z0-9][A-Za-z0-9:._@-]{0,199}$/;

export function checkRolloutId(id: string): string {
  if (!BOARD_ROLLOUT_ID.test(id))
    throw new WavegateError(
      'INVALID_INPUT',
      `rollout id ${JSON.stringify(id.slice(0, 80))}: must be 1-200 letters, digits, ":", ".", "_", "@" or "-"`,
      { field: 'id', value: id.slice(0, 80) },
    );
  return id;
}

/** A token of the board's: its name is who the controls it sends are recorded as; its role, what it may send. */
export interface BoardToken {
  name: string;
  token: string;
  role: Role;
}

/** A role a line may name: viewer, operator or approver. */
const ROLE_WORD = `(${ROLES.join('|')})`;
/** The role of a line that names none: what every token could do before roles (send every control). */
export const DEFAULT_ROLE: Role = 'operator';

/**
 * The board's token file (docs/cli.md "wavegate board"): `<name> <token> [role]` per line, and `cert:<CN>
 * <role>` for a client certificate's role (`#` comments, blank lines). A role is viewer (reads only),
 * operator (also pause, resume, abort, revert, converge, approve where the two-person rule does not apply)
 * or approver (also approvals that count under it); none given: operator, as every token was before roles.
 * Names (a CN counts as one) and tokens unique, every token strong (tokenWeakness): a weak one is refused
 * naming its line and its name, never its value.
 */
export function parseAccessFile(text: string, source: string): { tokens: BoardToken[]; certRoles: Map<string, Role> } {
  const tokens: BoardToken[] = [];
  const certRoles = new Map<string, Role>();
  const taken = (name: string) => tokens.some((t) => t.name === name) || certRoles.has(name);
  for (const [i, raw] of text.split('\n').entries()) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) continue;
    const refuse = (why: string, value?: string) =>
      new WavegateError('INVALID_INPUT', `${source} line ${i + 1}: ${why}`, {
        field: '--token-file',
        ...(value !== undefined ? { value } : {}),
      });
    const cert = new RegExp(`^cert:(${NAME_PATTERN})\\s+${ROLE_WORD}$`).exec(line);
    if (cert) {
      if (taken(cert[1]!)) throw refuse('a name or token given twice');
      certRoles.set(cert[1]!, cert[2] as Role);
      continue;
    }
    const m = new RegExp(`^(${NAME_PATTERN})\\s+(\\S{1,256})(?:\\s+(\\S+))?$`).exec(line);
    if (!m)
      throw refuse(
        'expected "<name> <token> [role]" or "cert:<CN> <role>" (a name of letters, digits, ".", "_", "@", "-"; a token of at most 256 non-blank characters)',
      );
    if (m[3] !== undefined && !(ROLES as readonly string[]).includes(m[3]))
      throw refuse(`the role of "${m[1]}" is ${JSON.stringify(m[3].slice(0, 40))}: one of ${ROLES.join(', ')}`, m[1]);
    const weak = tokenWeakness(m[2]!);
    if (weak) throw refuse(`the token of "${m[1]}" is weak (${weak}); ${TOKEN_RULE}`, m[1]);
    if (taken(m[1]!) || tokens.some((t) => t.token === m[2])) throw refuse('a name or token given twice');
    tokens.push({ name: m[1]!, token: m[2]!, role: (m[3] as Role | undefined) ?? DEFAULT_ROLE });
  }
  if (tokens.length === 0 && certRoles.size === 0)
    throw new WavegateError('INVALID_INPUT', `${source}: no "<name> <token>" line`, { field: '--token-file' });
  return { tokens, certRoles };
}

/** The tokens of a token file that must hold at least one (parseAccessFile, without certificate lines' roles). */
export function parseTokenFile(text: string, source: string): BoardToken[] {
  const { tokens } = parseAccessFile(text, source);
  if (tokens.length === 0)
    throw new WavegateError('INVALID_INPUT', `${source}: no "<name> <token>" line`, { field: '--token-file' });
  return tokens;
}

const NAME_PATTERN = '[A-Za-z0-9][A-Za-z0-9._@-]{0,63}';

/** What a board token must be, said in every refusal of one. */
export const TOKEN_RULE =
  'a token needs at least 32 characters, of at least two kinds (lower case, upper case, digits, others), at least 8 of them distinct: e.g. `openssl rand -hex 24`';

/**
 * Why a token is too weak to guard the board, or undefined: under 32 characters, one kind of character,
 * or fewer than 8 distinct ones. Tokens are compared as given (no hashing that slows a guess down), so a
 * token must be out of reach of guessing by itself; `openssl rand -hex 16` (128 bits) is the floor.
 */
export function tokenWeakness(token: string): string | undefined {
  if (token.length < 32) return `${token.length} characters`;
  const kinds = [/[a-z]/, /[A-Z]/, /[0-9]/, /[^A-Za-z0-9]/].filter((k) => k.test(token)).length;
  if (kinds < 2) return 'one kind of character';
  const distinct = new Set(token).size;
  if (distinct < 8) return `${distinct} distinct characters`;
  return undefined;
}

/**
 * Wrong tokens per source (a client address): a burst of `burst` guesses, then one per `refillMs`. A
 * source past it is refused every login and bearer token, right or wrong, until its budget refills:
 * otherwise a right guess would still be told apart. At most `maxSources` are remembered (the least
 * recently wrong forgotten first). The clock is the caller's.
 */
export class GuessBudget {
  private readonly sources = new Map<string, { left: number; at: number }>();

  constructor(
    private readonly burst: number,
    private readonly refillMs: number,
    private readonly maxSources = 10_000,
  ) {}

  private left(source: string, now: number): number {
    const s = this.sources.get(source);
    if (!s) return this.burst;
    return Math.min(this.burst, s.left + (now - s.at) / this.refillMs);
  }

  /** Milliseconds until `source` may try a token again; 0 when it may now. */
  waitMs(source: string, now: number): number {
    const left = this.left(source, now);
    return left >= 1 ? 0 : Math.ceil((1 - left) * this.refillMs);
  }

  /** A wrong token from `source`: one guess of its budget spent. */
  spend(source: string, now: number): void {
    const left = this.left(source, now) - 1;
    this.sources.delete(source);
    if (this.sources.size >= this.maxSources) this.sources.delete(this.sources.keys().next().value!);
    this.sources.set(source, { left, at: now });
  }
}

/**
 * `--public-url`: the origin a browser reaches the board at through a proxy (`https://board.example.com`,
 * a port if not the scheme's own). Only an origin: the board is served at the root of it.
 */
export function parsePublicUrl(text: string): URL {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new WavegateError('INVALID_INPUT', `--public-url ${JSON.stringify(text)}: not a URL`, {
      field: '--public-url',
      value: text,
    });
  }
  if (
    (url.protocol !== 'https:' && url.protocol !== 'http:') ||
    url.username ||
    url.password ||
    url.pathname !== '/' ||
    url.search ||
    url.hash
  )
    throw new WavegateError(
      'INVALID_INPUT',
      `--public-url ${JSON.stringify(text)}: must be an origin, http(s)://host[:port] with no path, query or user (the board is served at its root)`,
      { field: '--public-url', value: text },
    );
  return url;
}

/** Listen addresses that only this host reaches: a board there answers only to its own names. */
export const LOOPBACK = new Set(['127.0.0.1', '::1', 'localhost']);

/** Where the board listens and who reaches it through a proxy: what its request checks compare against. */
export interface BoardAddress {
  listenHost: string;
  port: number;
  tls: boolean;
  publicUrl?: URL;
}

/** A loopback board answers only to its own names (and --public-url's): a DNS-rebinding page gets none. */
export function boardHostAllowed(host: string | undefined, board: BoardAddress): boolean {
  if (!host) return false;
  if (!LOOPBACK.has(board.listenHost)) return true;
  const h = host.toLowerCase();
  if (board.publicUrl && h === board.publicUrl.host) return true;
  const p = board.port;
  return [`127.0.0.1:${p}`, `localhost:${p}`, `[::1]:${p}`].includes(h);
}

/** The origin the request's page is at: --public-url's when asked by its Host, else the board's own. */
export function boardOriginOf(host: string | undefined, board: Pick<BoardAddress, 'tls' | 'publicUrl'>): string {
  const h = (host ?? '').toLowerCase();
  if (board.publicUrl && h === board.publicUrl.host) return board.publicUrl.origin;
  return `${board.tls ? 'https' : 'http'}://${h}`;
}

/** What a browser says of the page a request comes from (its Sec-Fetch-Site and Origin headers). */
export interface PageHeaders {
  secFetchSite?: string | readonly string[];
  origin?: string;
}

/**
 * Why the API does not answer this request (403), or undefined: a cross-site or same-site fetch (another
 * port of 127.0.0.1 is the same site) or a foreign Origin. The board's own page (same-origin) and the
 * address bar (none) are answered.
 */
export function crossSiteProblem(page: PageHeaders, expected: string): string | undefined {
  const site = page.secFetchSite;
  if (site !== undefined && site !== 'same-origin' && site !== 'none')
    return `Sec-Fetch-Site ${JSON.stringify(site)}: the board's API answers only its own page (${expected})`;
  if (page.origin !== undefined && page.origin !== expected)
    return `Origin ${JSON.stringify(page.origin)}: the board's API answers only its own page (${expected})`;
  return undefined;
}

/** Why a state-changing request is not the board's own page's (403), or undefined: its Origin, or without one Sec-Fetch-Site. */
export function stateChangeProblem(page: PageHeaders, expected: string): string | undefined {
  const own = page.origin !== undefined ? page.origin === expected : page.secFetchSite === 'same-origin';
  if (own) return undefined;
  return `Origin ${JSON.stringify(page.origin ?? null)}: a state-changing request must come from the board's own page (${expected})`;
}

/** Why a state-changing request's body is not JSON by its Content-Type (415), or undefined. */
export function jsonTypeProblem(contentType: string | undefined): string | undefined {
  const type = (contentType ?? '').split(';')[0]!.trim().toLowerCase();
  return type === 'application/json' ? undefined : `Content-Type ${JSON.stringify(type)}: must be application/json`;
}

/** One device of the fleet view: its verified state for the profile's revision, drift, verdict, last sync. */
export interface FleetDevice {
  id: string;
  pool: string;
  class: string;
  transport?: string;
  /** applied / claimed / pending / not-for-me, verified now (`wavegate fleet status`). */
  state: string;
  /** An applied or claimed device: `proven` by its own receipt of the revision, or `claimed` (device/fleet.ts BoardRow). */
  proof?: 'proven' | 'claimed';
  marker?: number | null;
  reason?: string;
  evidence?: string;
  /** `wavegate drift`: ok, drifted, no-marker, unreachable, refused, unknown-revision. */
  drift?: string;
  driftDetail?: string;
  /** The node-down verdict on the device, holding or expired, with its expiry. */
  verdict?: {
    standing: string;
    text: string;
    reason: string;
    by: string;
    since: string;
    expiresAt: string;
    lastCheckResult?: string;
  };
  /** An agent device's last sync through a gateway (its presence). */
  lastSeen?: string;
  /** Its marker names a revision the profile's signers revoked (device/fleet.ts BoardRow): listed first. */
  revoked?: { revision: number; reason: string };
}

const FLEET_SEVERITY = ['refused', 'drifted', 'pending', 'claimed', 'not-for-me', 'ahead', 'applied'];

/** Worst first: a device refused or drifted, then one short of the revision, then the rest. */
export function fleetSeverity(d: Pick<FleetDevice, 'state' | 'drift' | 'revoked'>): number {
  // A device running what its signers revoked is the worst news on the page.
  if (d.revoked) return -1;
  if (d.drift === 'refused' || d.drift === 'drifted') return FLEET_SEVERITY.indexOf(d.drift);
  const i = FLEET_SEVERITY.indexOf(d.state);
  return i < 0 ? FLEET_SEVERITY.length : i;
}

export function sortFleetWorstFirst<T extends FleetDevice>(rows: readonly T[]): T[] {
  return [...rows].sort((a, b) => fleetSeverity(a) - fleetSeverity(b) || a.id.localeCompare(b.id));
}

/**
 * A revert's JSON body: `devices` and `digest`, the count and the fingerprint (deviceSetDigest) of the set
 * the page showed (compared with the set read again before starting), and `fast`.
 */
export function parseRevertBody(body: Record<string, unknown>): { fast: boolean; devices: number; digest: string } {
  for (const key of Object.keys(body))
    if (key !== 'fast' && key !== 'devices' && key !== 'digest')
      throw new WavegateError('INVALID_INPUT', `${key}: not a field of revert (allowed: fast, devices, digest)`, {
        field: key,
      });
  const shown = parseShownSet(body);
  if (body.fast !== undefined && typeof body.fast !== 'boolean')
    throw new WavegateError('INVALID_INPUT', `fast: must be true or false (got ${JSON.stringify(body.fast)})`, {
      field: 'fast',
    });
  return { fast: body.fast === true, ...shown };
}

/** The set of devices a page showed: their number and their fingerprint (64 hex digits). */
function parseShownSet(body: Record<string, unknown>): { devices: number; digest: string } {
  if (!Number.isSafeInteger(body.devices) || (body.devices as number) < 1)
    throw new WavegateError(
      'INVALID_INPUT',
      `devices: the number of devices the page showed is required (got ${JSON.stringify(body.devices ?? null)})`,
      { field: 'devices' },
    );
  if (typeof body.digest !== 'string' || !/^[0-9a-f]{64}$/.test(body.digest))
    throw new WavegateError(
      'INVALID_INPUT',
      `digest: the fingerprint of the devices the page showed is required (64 hex digits; got ${JSON.stringify(typeof body.digest === 'string' ? body.digest.slice(0, 80) : (body.digest ?? null))})`,
      { field: 'digest' },
    );
  return { devices: body.devices as number, digest: body.digest };
}

/**
 * A converge's JSON body: `devices` and `digest`, the count and the fingerprint (deviceSetDigest) of
 * the set the page showed (compared with the set read again before starting), and a reason.
 */
export function parseConvergeBody(body: Record<string, unknown>): { devices: number; digest: string; reason: string } {
  for (const key of Object.keys(body))
    if (key !== 'devices' && key !== 'digest' && key !== 'reason')
      throw new WavegateError('INVALID_INPUT', `${key}: not a field of converge (allowed: devices, digest, reason)`, {
        field: key,
      });
  return {
    ...parseShownSet(body),
    reason: parseReason('converge', body.reason, "it is written to the board's log with your name"),
  };
}
