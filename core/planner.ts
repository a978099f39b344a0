import { DEFAULT_DISRUPTION_BUDGET, type UpdateClass } from './inventory';
import type { NodeDownMark } from './node-down';
import { ownValue } from './own-keys';
import { prng, seedFrom, seedHex, shuffled } from './random';
import { phaseGate, phaseSize, type PhaseSize, type PhaseSpec, type RolloutSpec } from './spec';

/**
 * The planner (step 2 of a rollout, docs/architecture.md): pure and deterministic from the rollout id. Given the snapshot of
 * the devices in scope, it decides which device goes in which phase:
 *
 * - `left-behind` devices, devices under a node-down verdict that holds (and devices already above the
 *   target) are `not-for-me`, with a reason;
 * - devices whose marker already reads the target are `already-applied` and never touched;
 * - the rest are shuffled by a PRNG seeded from a hash of the rollout id (sorted by id first, so the
 *   input order does not matter);
 * - the canary phase takes devices of the majority class (or `canaryClass`), preferring `required`
 *   and reachable ones; `concurrent` makes it two;
 * - the second phase includes a device of another class (else of another OS) when one remains;
 * - sizes: `n devices`, `p%` of the snapshot, `up to p%` cumulative of the snapshot, `remainder`;
 *   every phase holds at least one device more than the previous while devices remain; devices left
 *   after the last phase form an implicit remainder phase (with a warning);
 * - `risk: safe` collapses everything into one phase (the author's claim, recorded as a warning);
 * - per pool, at most `max(1, floor(pool size × budget))` devices are in flight at once.
 *
 * The output is compact: phases of device ids, the not-for-me and already-applied lists, the pool
 * budgets and every warning. No I/O, no clock, no Math.random: safe in workflow code.
 */
export interface PlanDevice {
  id: string;
  pool: string;
  class: string;
  os?: string;
  updateClass: UpdateClass;
  /** The revision marker read at snapshot time; null or absent when the device has none. */
  current?: number | null;
  /** Reachability at snapshot time (absent = unknown, treated as reachable). */
  reachable?: boolean;
  /** A node-down verdict (core/node-down.ts): while it holds, the device is not-for-me with its text as the reason. */
  nodeDown?: NodeDownMark;
}

export type PlanSpec = Pick<
  RolloutSpec,
  'toRevision' | 'phases' | 'gate' | 'canaryClass' | 'concurrent' | 'disruptionBudget'
> &
  Partial<Pick<RolloutSpec, 'minSample'>>;

export interface PlanInput {
  rolloutId: string;
  /** Seeds the random picks instead of `rolloutId` when given (RolloutInput.planSeed). */
  seedId?: string;
  spec: PlanSpec;
  /** Every device in scope (the snapshot). */
  devices: readonly PlanDevice[];
  /** Pool budgets from the inventory; `size` overrides the count of snapshot devices in the pool. */
  pools?: Readonly<Record<string, { disruptionBudget?: number; size?: number }>>;
  /** The revision's risk; `safe` collapses the phases into one. */
  risk?: 'risky' | 'safe';
  /**
   * A revert (`wavegate revert`) comes down from this revision: a device at it is a candidate, not
   * "ahead" of the (lower) target. Absent for every other rollout.
   */
  revertingFrom?: number;
}

export interface PlannedPhase {
  index: number;
  name: string;
  kind: 'canary' | 'bulk' | 'all';
  /** The spec phase this came from; -1 for an implicit remainder phase. */
  specIndex: number;
  devices: string[];
  gate: number | 'manual';
  healthGate: string[];
}

export interface PoolPlan {
  pool: string;
  size: number;
  budget: number;
  maxInFlight: number;
}

export interface Plan {
  rolloutId: string;
  /** Hex of the 128-bit seed derived from the rollout id. */
  seed: string;
  toRevision: number;
  /** Devices in scope: the base of every percentage. */
  snapshotSize: number;
  /** The class the canary was drawn from (absent without a canary phase). */
  canaryClass?: string;
  phases: PlannedPhase[];
  alreadyApplied: string[];
  notForMe: Array<{ id: string; reason: string }>;
  pools: PoolPlan[];
  warnings: string[];
}

export type DeviceClassification =
  | { status: 'planned'; phase: number }
  | { status: 'already-applied' }
  | { status: 'not-for-me'; reason: string }
  | { status: 'not-in-plan' };

/** At most this many devices of a pool of `size` devices are in flight at once. */
export function maxInFlight(size: number, budget: number): number {
  return Math.max(1, Math.floor(size * budget + 1e-9));
}

/** `p%` of `n` devices, rounded up (at least one when n > 0). */
export function percentOf(n: number, percent: number): number {
  if (n <= 0) return 0;
  return Math.max(1, Math.ceil((n * percent) / 100 - 1e-9));
}

export function describeSize(size: PhaseSize): string {
  switch (size.kind) {
    case 'count':
      return `${size.count} device${size.count === 1 ? '' : 's'}`;
    case 'percent':
      return `${size.percent}%`;
    case 'cumulative':
      return `up to ${size.percent}%`;
    case 'remainder':
      return 'remainder';
  }
}

function phaseName(phase: PhaseSpec): string {
  if (phase.name) return phase.name;
  return phase.canary !== undefined ? `canary ${describeSize(phase.canary)}` : `bulk ${describeSize(phase.bulk!)}`;
}

function majorityClass(devices: readonly PlanDevice[]): string | undefined {
  const counts = new Map<string, number>();
  for (const d of devices) counts.set(d.class, (counts.get(d.class) ?? 0) + 1);
  let best: string | undefined;
  let bestCount = 0;
  for (const [cls, count] of [...counts].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
    if (count > bestCount) [best, bestCount] = [cls, count];
  }
  return best;
}

/** Stable sort by a numeric preference key (lower first). */
function preferring<T>(items: readonly T[], key: (item: T) => number): T[] {
  return items
    .map((item, i) => ({ item, i, k: key(item) }))
    .sort((a, b) => a.k - b.k || a.i - b.i)
    .map((x) => x.item);
}

export function planPhases(input: PlanInput): Plan {
  const { spec } = input;
  const warnings: string[] = [];
  const seed = seedFrom(input.seedId ?? input.rolloutId);
  const random = prng(seed);
  const devices = snapshotDevices(input.devices, warnings);
  const snapshotSize = devices.length;
  const { notForMe, alreadyApplied, candidates } = sortSnapshot(
    devices,
    spec.toRevision,
    input.revertingFrom,
    warnings,
  );
  const pools = poolPlans(devices, input, warnings);
  const remaining = shuffled(candidates, random);
  let phases: PlannedPhase[] = [];
  let canaryClass: string | undefined;
  if (candidates.length === 0) {
    warnings.push('nothing to roll out: every device in scope is already applied or not-for-me');
  } else if (input.risk === 'safe') {
    phases = [safePhase(spec, remaining, warnings)];
  } else {
    ({ phases, canaryClass } = specPhases(spec, remaining, devices, warnings));
  }

  warnIfSampleUnreachable(spec, phases, warnings);
  return {
    rolloutId: input.rolloutId,
    seed: seedHex(seed),
    toRevision: spec.toRevision,
    snapshotSize,
    ...(canaryClass !== undefined ? { canaryClass } : {}),
    phases,
    alreadyApplied,
    notForMe,
    pools,
    warnings,
  };
}

/** The snapshot by id (the input order does not matter), each id once: a second entry is dropped, with a warning. */
function snapshotDevices(snapshot: readonly PlanDevice[], warnings: string[]): PlanDevice[] {
  const byId = new Map<string, PlanDevice>();
  for (const d of [...snapshot].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0))) {
    if (byId.has(d.id)) {
      warnings.push(`device ${d.id} appears twice in the snapshot; the first entry is used`);
      continue;
    }
    byId.set(d.id, d);
  }
  return [...byId.values()];
}

/**
 * Each device of the snapshot not-for-me (left behind, down, ahead of the target), already applied, or a
 * candidate; the warnings say how many of each, the node-down verdicts lifted and the unreachable candidates.
 */
function sortSnapshot(
  devices: readonly PlanDevice[],
  toRevision: number,
  revertingFrom: number | undefined,
  warnings: string[],
): { notForMe: Plan['notForMe']; alreadyApplied: string[]; candidates: PlanDevice[] } {
  const notForMe: Plan['notForMe'] = [];
  const alreadyApplied: string[] = [];
  const candidates: PlanDevice[] = [];
  for (const d of devices) {
    if (d.updateClass === 'left-behind')
      notForMe.push({ id: d.id, reason: 'left-behind: the device is excluded from updates (updateClass)' });
    else if (d.nodeDown?.holds) notForMe.push({ id: d.id, reason: d.nodeDown.text });
    else if (typeof d.current === 'number' && d.current > toRevision && d.current !== revertingFrom) {
      notForMe.push({
        id: d.id,
        reason: `ahead: the device is at revision ${d.current}, above the target ${toRevision}`,
      });
    } else if (d.current === toRevision) alreadyApplied.push(d.id);
    else candidates.push(d);
  }
  if (notForMe.length) warnings.push(`${notForMe.length} device(s) not-for-me: ${some(notForMe.map((n) => n.id))}`);
  // A verdict that no longer holds (expired, or lifted by its recheck) brings its device back: say so.
  for (const d of devices)
    if (d.nodeDown && !d.nodeDown.holds && d.updateClass !== 'left-behind')
      warnings.push(`device ${d.id}: ${d.nodeDown.text}`);
  if (alreadyApplied.length)
    warnings.push(
      `${alreadyApplied.length} device(s) already at revision ${toRevision}, counted as applied and not touched: ${some(alreadyApplied)}`,
    );
  const unreachable = candidates.filter((d) => d.reachable === false);
  if (unreachable.length)
    warnings.push(`${unreachable.length} device(s) unreachable at snapshot: ${some(unreachable.map((d) => d.id))}`);
  return { notForMe, alreadyApplied, candidates };
}

/** `risk: safe`: every candidate in one phase, with every phase's health checks, and the claim on the record. */
function safePhase(spec: PlanSpec, candidates: readonly PlanDevice[], warnings: string[]): PlannedPhase {
  const healthGate = [...new Set(spec.phases.flatMap((p) => p.healthGate))];
  warnings.push(
    'risk: safe — the phases are collapsed into one; "safe" is the revision author\'s claim, on the record',
  );
  return {
    index: 0,
    name: 'all (risk: safe)',
    kind: 'all',
    specIndex: 0,
    devices: candidates.map((d) => d.id),
    gate: phaseGate(spec, spec.phases[0]!),
    healthGate,
  };
}

/**
 * The spec's phases filled from the shuffled candidates, in order: the canary (its class picked), the
 * second phase with a device of another class or OS, the rest from the front; a phase with no device left
 * is dropped, and devices left after the last one form an implicit remainder phase.
 */
function specPhases(
  spec: PlanSpec,
  candidates: readonly PlanDevice[],
  devices: readonly PlanDevice[],
  warnings: string[],
): { phases: PlannedPhase[]; canaryClass: string | undefined } {
  const byId = new Map(devices.map((d) => [d.id, d]));
  const phases: PlannedPhase[] = [];
  let remaining = candidates;
  let canaryClass: string | undefined;
  let assigned = 0;
  let previous = 0;
  spec.phases.forEach((phase, specIndex) => {
    const size = phaseSize(phase);
    const name = phaseName(phase);
    if (remaining.length === 0) {
      warnings.push(`phase "${name}" has no devices left and is dropped`);
      return;
    }
    const isCanary = phase.canary !== undefined && specIndex === 0;
    const count = phaseCount(
      size,
      name,
      {
        snapshotSize: devices.length,
        assigned,
        previous,
        remaining: remaining.length,
        atLeastTwo: isCanary && !!spec.concurrent,
      },
      warnings,
    );
    let chosen: PlanDevice[];
    if (isCanary) {
      canaryClass = pickCanaryClass(remaining, spec.canaryClass, warnings);
      chosen = canaryDevices(remaining, count, canaryClass, warnings);
    } else if (phases.length === 1) {
      chosen = withDifferentDevice(
        remaining,
        count,
        phases[0]!.devices.map((id) => byId.get(id)!),
        warnings,
        name,
      );
    } else {
      chosen = remaining.slice(0, count);
    }
    const taken = new Set(chosen.map((d) => d.id));
    remaining = remaining.filter((d) => !taken.has(d.id));
    phases.push({
      index: phases.length,
      name,
      kind: isCanary ? 'canary' : 'bulk',
      specIndex,
      devices: chosen.map((d) => d.id),
      gate: phaseGate(spec, phase),
      healthGate: phase.healthGate,
    });
    assigned += chosen.length;
    previous = chosen.length;
  });
  if (remaining.length) phases.push(remainderPhase(spec, remaining, phases, warnings));
  return { phases, canaryClass };
}

/**
 * How many devices a phase takes: its size (of the snapshot; `up to p%` less what earlier phases took), two
 * for a concurrent canary, at least one more than the phase before (said when raised), at most what remains.
 */
function phaseCount(
  size: PhaseSize,
  name: string,
  at: { snapshotSize: number; assigned: number; previous: number; remaining: number; atLeastTwo: boolean },
  warnings: string[],
): number {
  let desired: number;
  switch (size.kind) {
    case 'count':
      desired = size.count;
      break;
    case 'percent':
      desired = percentOf(at.snapshotSize, size.percent);
      break;
    case 'cumulative':
      desired = percentOf(at.snapshotSize, size.percent) - at.assigned;
      break;
    case 'remainder':
      desired = at.remaining;
      break;
  }
  if (at.atLeastTwo && desired < 2) desired = 2;
  const count = Math.max(desired, at.previous + 1);
  if (count > desired && desired < at.remaining) {
    warnings.push(
      `phase "${name}": ${Math.max(desired, 0)} device(s) raised to ${Math.min(count, at.remaining)} (each phase holds at least one device more than the one before)`,
    );
  }
  return Math.min(count, at.remaining);
}

/** The canary's `count` devices: of its class, required and reachable first; each one that is not is said. */
function canaryDevices(
  remaining: readonly PlanDevice[],
  count: number,
  canaryClass: string,
  warnings: string[],
): PlanDevice[] {
  const ordered = preferring(
    remaining,
    (d) => (d.class === canaryClass ? 0 : 4) + (d.updateClass === 'required' ? 0 : 2) + (d.reachable === false ? 1 : 0),
  );
  const chosen = ordered.slice(0, count);
  for (const d of chosen) {
    if (d.class !== canaryClass)
      warnings.push(
        `canary ${d.id} is of class "${d.class}", not "${canaryClass}": not enough "${canaryClass}" devices`,
      );
    else if (d.updateClass !== 'required')
      warnings.push(`canary ${d.id} is best-effort: its gate does not wait for it`);
    else if (d.reachable === false) warnings.push(`canary ${d.id} was unreachable at snapshot`);
  }
  return chosen;
}

/** Devices left after the spec's last phase: an implicit phase of their own, with the last phase's health checks. */
function remainderPhase(
  spec: PlanSpec,
  remaining: readonly PlanDevice[],
  phases: readonly PlannedPhase[],
  warnings: string[],
): PlannedPhase {
  const last = spec.phases[spec.phases.length - 1]!;
  warnings.push(`${remaining.length} device(s) remain after the last phase; they form an implicit "remainder" phase`);
  const chosen =
    phases.length === 1 ? withDifferentDevice(remaining, remaining.length, [], warnings, 'remainder') : remaining;
  return {
    index: phases.length,
    name: 'remainder (implicit)',
    kind: 'bulk',
    specIndex: -1,
    devices: chosen.map((d) => d.id),
    gate: spec.gate,
    healthGate: last.healthGate,
  };
}

/**
 * `minSample` above every phase's size means the failure gate never judges a phase while it runs: each
 * phase goes to its end however many of its devices fail (the gate looks only once the phase is done).
 * That is a safety switched off, so it is said.
 */
function warnIfSampleUnreachable(spec: PlanSpec, phases: readonly PlannedPhase[], warnings: string[]): void {
  if (spec.minSample === undefined || phases.length === 0) return;
  const largest = Math.max(...phases.map((p) => p.devices.length));
  if (spec.minSample > largest) {
    warnings.push(
      `minSample ${spec.minSample} is larger than every phase (the largest has ${largest} device(s)): the failure gate is effectively disabled while phases run and only judges a phase once all of its devices are done; lower minSample to at most ${largest}`,
    );
  }
}

/** A list for a warning line: the first ten ids, then a count (a 10,000-device plan stays compact). */
function some(ids: readonly string[]): string {
  return ids.length > 10 ? `${ids.slice(0, 10).join(', ')} and ${ids.length - 10} more` : ids.join(', ');
}

function pickCanaryClass(remaining: readonly PlanDevice[], wanted: string | undefined, warnings: string[]): string {
  const required = remaining.filter((d) => d.updateClass === 'required');
  const majority = majorityClass(required.length ? required : remaining)!;
  if (wanted === undefined) return majority;
  if (remaining.some((d) => d.class === wanted)) return wanted;
  warnings.push(
    `canaryClass "${wanted}": no device of that class needs the update; the majority class "${majority}" is used`,
  );
  return majority;
}

/**
 * Take `count` devices from the front of `remaining`, making sure one of them has a class not seen in
 * `earlier` (or, when every remaining device shares the earlier classes, another OS).
 */
function withDifferentDevice(
  remaining: readonly PlanDevice[],
  count: number,
  earlier: readonly PlanDevice[],
  warnings: string[],
  name: string,
): PlanDevice[] {
  const chosen = remaining.slice(0, count);
  const classes = new Set(earlier.map((d) => d.class));
  const oses = new Set(earlier.map((d) => d.os ?? ''));
  const tests: Array<[string, (d: PlanDevice) => boolean]> = [
    ['class', (d) => !classes.has(d.class)],
    ['OS', (d) => !oses.has(d.os ?? '')],
  ];
  for (const [what, differs] of tests) {
    if (chosen.some(differs)) return chosen;
    const swap = remaining.slice(count).find(differs);
    if (swap) {
      chosen[chosen.length - 1] = swap;
      return chosen;
    }
    if (what === 'class' && earlier.length) {
      warnings.push(
        `phase "${name}": no remaining device has a class other than ${[...classes].map((c) => `"${c}"`).join(', ')}`,
      );
    }
  }
  return chosen;
}

function poolPlans(devices: readonly PlanDevice[], input: PlanInput, warnings: string[]): PoolPlan[] {
  const sizes = new Map<string, number>();
  for (const d of devices) sizes.set(d.pool, (sizes.get(d.pool) ?? 0) + 1);
  const plans: PoolPlan[] = [];
  for (const pool of [...sizes.keys()].sort()) {
    const known = ownValue(input.pools, pool);
    const size = known?.size ?? sizes.get(pool)!;
    const budget = ownValue(input.spec.disruptionBudget, pool) ?? known?.disruptionBudget ?? DEFAULT_DISRUPTION_BUDGET;
    plans.push({ pool, size, budget, maxInFlight: maxInFlight(size, budget) });
    if (budget === 0) warnings.push(`pool ${pool}: disruption budget 0 still allows one device in flight at a time`);
  }
  return plans;
}

/** Where a device stands in a plan. */
export function classifyDevice(plan: Plan, id: string): DeviceClassification {
  const phase = plan.phases.find((p) => p.devices.includes(id));
  if (phase) return { status: 'planned', phase: phase.index };
  if (plan.alreadyApplied.includes(id)) return { status: 'already-applied' };
  const nfm = plan.notForMe.find((n) => n.id === id);
  if (nfm) return { status: 'not-for-me', reason: nfm.reason };
  return { status: 'not-in-plan' };
}
