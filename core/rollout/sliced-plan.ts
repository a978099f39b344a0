import { sha256 } from '@noble/hashes/sha2.js';
import { bytesToHex } from '@noble/hashes/utils.js';
import { utf8Encode } from '../bytes';
import { canonicalize } from '../canonical';
import type { Plan, PlannedPhase, PoolPlan } from '../planner';
import type { DeviceSnapshot, DeviceState } from '../rollout-state';
import type { RolloutInput } from './input';
import { canaryToProbe, planRollout } from './plan';

/**
 * Sliced records (docs/architecture.md "Sliced records"): a rollout whose input says
 * `records: 'slices'` never holds a per-device record of a phase larger than a slice. Its plan is made
 * by an activity from the membership and only the plan's shape reaches the parent; each slice loads
 * its own devices from the same plan (a pure function of the input, the membership and the canary's
 * probed devices, checked by its digest), keeps their states, and answers the parent with counts.
 * Phases of at most one slice (a canary) run in the parent as before, their devices named in the shape.
 */

/** What the sliced plan is a function of, besides the membership's devices. */
export type SlicedPlanInput = Pick<
  RolloutInput,
  'rolloutId' | 'planSeed' | 'spec' | 'poolBudgets' | 'risk' | 'reverts'
> & {
  /** Devices per slice: a phase of more devices than this is sliced, its devices never in the parent. */
  sliceSize: number;
  /** Canary candidates probed so far: what was learned replaces their snapshot entries. */
  probed: readonly DeviceSnapshot[];
};

/** A phase as the parent knows it: counts, its devices only when it runs inline (at most one slice). */
export interface ShapePhase extends Omit<PlannedPhase, 'devices'> {
  /** The phase's devices by id when it runs inline; empty for a sliced phase. */
  devices: string[];
  /** How many devices the phase has. */
  size: number;
  /** How many slices it runs in (0: inline). */
  slices: number;
}

/** The parent's view of a sliced plan: bounded by the number of phases and one slice per inline phase. */
export interface PlanShape {
  /** SHA-256 over the plan (every phase's devices in order, the settled devices): what a slice checks. */
  digest: string;
  seed: string;
  snapshotSize: number;
  canaryClass?: string;
  phases: ShapePhase[];
  pools: PoolPlan[];
  /** The plan's warnings, at most MAX_SHAPE_WARNINGS (the last says how many more). */
  warnings: string[];
  /** Devices the plan settled: already at the target, and not-for-me (left-behind, node-down, ahead). */
  alreadyApplied: number;
  notForMe: number;
  /** Every device of the inline phases, as the snapshot read it (the parent's records of them). */
  inline: DeviceSnapshot[];
  /** Canary devices not probed yet: probe them, then plan again with what was learned. */
  toProbe: DeviceSnapshot[];
  /** Devices in scope reached through their agent (`transport: agent`): a completed rollout may converge them. */
  agents: number;
}

export const MAX_SHAPE_WARNINGS = 50;

/**
 * A rollout over a membership of at least this many devices keeps sliced records (`start`, `converge`
 * and `revert` set it): below it, a phase's records fit the rollout's history comfortably.
 */
export const SLICED_RECORDS_FROM = 5_000;

/**
 * The slice size of sliced records: a hundred slices a fleet (the rollout's history has about 20 events
 * per slice, so it is the same from 2,000 to 30,000 devices), never fewer than 20 devices a slice, never
 * more than 300. A slice runs up to all its devices at once, and the server's cost per activity grows
 * with the activities pending in one execution (slices of 1,000 at 100,000 devices: 13 ms of server CPU
 * a device, against 2.5 ms with slices of 100; bench/README.md `sliced-scale.ts`). At the inventory's
 * limit of 100,000 devices that is 334 slices, about 6,500 events in the rollout's own history.
 */
export function slicedSliceSize(devices: number): number {
  return Math.min(300, Math.max(20, Math.ceil(devices / 100)));
}

/** Slices read per health or converge activity: a handful of queries, at most a few thousand devices. */
export const SLICES_PER_ACTIVITY = 10;

/** The plan over the snapshot, with the probed canary devices' entries replacing what the membership said. */
export function slicedPlan(input: SlicedPlanInput, snapshot: readonly DeviceSnapshot[]): Plan {
  return planRollout(input, withProbed(snapshot, input.probed));
}

function withProbed(snapshot: readonly DeviceSnapshot[], probed: readonly DeviceSnapshot[]): DeviceSnapshot[] {
  if (probed.length === 0) return [...snapshot];
  const byId = new Map(probed.map((d) => [d.id, d]));
  return snapshot.map((d) => byId.get(d.id) ?? d);
}

export function planDigest(plan: Plan): string {
  const text = canonicalize({
    phases: plan.phases.map((p) => [p.index, p.name, p.devices]),
    alreadyApplied: plan.alreadyApplied,
    notForMe: plan.notForMe,
  });
  return bytesToHex(sha256(utf8Encode(text)));
}

/** Whether a phase of `size` devices runs in slices (more than one slice's worth) or inline. */
export function isSliced(size: number, sliceSize: number): boolean {
  return size > sliceSize;
}

/** The shape the parent adopts of `plan` (made by slicedPlan over `snapshot`): counts and inline devices only. */
export function planShape(input: SlicedPlanInput, plan: Plan, snapshot: readonly DeviceSnapshot[]): PlanShape {
  const entries = withProbed(snapshot, input.probed);
  const byId = new Map<string, DeviceSnapshot>();
  for (const d of entries) if (!byId.has(d.id)) byId.set(d.id, d);
  const inline: DeviceSnapshot[] = [];
  const phases = plan.phases.map((p): ShapePhase => {
    const sliced = isSliced(p.devices.length, input.sliceSize);
    if (!sliced) for (const id of p.devices) inline.push(byId.get(id)!);
    return {
      index: p.index,
      name: p.name,
      kind: p.kind,
      specIndex: p.specIndex,
      gate: p.gate,
      healthGate: p.healthGate,
      devices: sliced ? [] : p.devices,
      size: p.devices.length,
      slices: sliced ? Math.ceil(p.devices.length / input.sliceSize) : 0,
    };
  });
  const probedIds = new Set(input.probed.map((d) => d.id));
  const warnings =
    plan.warnings.length > MAX_SHAPE_WARNINGS
      ? [
          ...plan.warnings.slice(0, MAX_SHAPE_WARNINGS - 1),
          `… and ${plan.warnings.length - MAX_SHAPE_WARNINGS + 1} more warnings`,
        ]
      : plan.warnings;
  return {
    digest: planDigest(plan),
    seed: plan.seed,
    snapshotSize: plan.snapshotSize,
    ...(plan.canaryClass !== undefined ? { canaryClass: plan.canaryClass } : {}),
    phases,
    pools: plan.pools,
    warnings,
    alreadyApplied: plan.alreadyApplied.length,
    notForMe: plan.notForMe.length,
    inline,
    toProbe: canaryToProbe(plan, probedIds).map((id) => byId.get(id)!),
    agents: [...byId.values()].filter((d) => d.transport === 'agent').length,
  };
}

/**
 * A sliced plan's devices by id (the probed canary devices' answers over the snapshot's, the first of each
 * id): made once per plan, so each slice finds its devices without a pass over the whole fleet.
 */
export function snapshotIndex(
  snapshot: readonly DeviceSnapshot[],
  probed: readonly DeviceSnapshot[],
): ReadonlyMap<string, DeviceSnapshot> {
  const byId = new Map<string, DeviceSnapshot>();
  for (const d of withProbed(snapshot, probed)) if (!byId.has(d.id)) byId.set(d.id, d);
  return byId;
}

/** Slice `k` of a sliced phase: its devices in plan order, as the snapshot read them (`snapshotIndex`). */
export function sliceDevicesOf(
  plan: Plan,
  index: ReadonlyMap<string, DeviceSnapshot>,
  phaseIndex: number,
  k: number,
  sliceSize: number,
): DeviceSnapshot[] {
  const phase = plan.phases[phaseIndex];
  if (!phase) throw new Error(`plan: no phase ${phaseIndex} (the plan has ${plan.phases.length})`);
  const ids = phase.devices.slice(k * sliceSize, (k + 1) * sliceSize);
  if (ids.length === 0) throw new Error(`plan: phase ${phase.name} has no slice ${k}`);
  return ids.map((id) => index.get(id)!);
}

/** Where a device stands in a sliced plan: settled by the plan, in an inline phase, or in a slice. */
export type DeviceLocation =
  | { kind: 'settled'; state: Extract<DeviceState, 'applied' | 'not-for-me'>; reason: string }
  | { kind: 'inline'; phase: number }
  | { kind: 'slice'; phase: number; slice: number }
  | { kind: 'absent' };

export function locateDevice(plan: Plan, id: string, sliceSize: number): DeviceLocation {
  for (const p of plan.phases) {
    const at = p.devices.indexOf(id);
    if (at < 0) continue;
    return isSliced(p.devices.length, sliceSize)
      ? { kind: 'slice', phase: p.index, slice: Math.floor(at / sliceSize) }
      : { kind: 'inline', phase: p.index };
  }
  if (plan.alreadyApplied.includes(id)) return { kind: 'settled', state: 'applied', reason: 'already at target' };
  const nfm = plan.notForMe.find((n) => n.id === id);
  if (nfm) return { kind: 'settled', state: 'not-for-me', reason: nfm.reason };
  return { kind: 'absent' };
}

/**
 * A planned device's first state, before anything is applied: one that refused us at snapshot fails
 * (its kind named), one found offline follows the spec's offline policy, the rest are pending. The
 * parent's model and a slice both start their devices from this.
 */
export function plannedState(
  d: Pick<DeviceSnapshot, 'refusal' | 'reachable' | 'error'>,
  offline: 'skip' | 'wait' | 'fail',
): { state: DeviceState; reason?: string } {
  if (d.refusal) return { state: 'failed', reason: `refused at snapshot (${d.refusal}): ${d.error ?? 'refused'}` };
  if (!d.reachable && offline !== 'wait')
    return {
      state: offline === 'fail' ? 'failed' : 'skipped',
      reason: `offline at snapshot: ${d.error ?? 'unreachable'}`,
    };
  return { state: 'pending' };
}
