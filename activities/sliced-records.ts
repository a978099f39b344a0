import { sha256 } from '@noble/hashes/sha2.js';
import { bytesToHex } from '@noble/hashes/utils.js';
import type { Client } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import { utf8Encode } from '../core/bytes';
import { canonicalize } from '../core/canonical';
import { devicesInScope } from '../core/gates';
import type { MemberRecord, MembershipRef } from '../core/membership';
import type { Plan } from '../core/planner';
import type { DeviceSnapshot } from '../core/rollout-state';
import {
  planDigest,
  planShape,
  slicedPlan,
  sliceDevicesOf,
  snapshotIndex,
  type PlanShape,
  type SlicedPlanInput,
} from '../core/rollout/sliced-plan';
import { targetOf } from '../device/fleet';
import { sliceRecordsQuery, type SliceRecords } from '../contracts/rollout';
import { convergeCandidate, isHealthTarget } from '../core/rollout/device-outcome';
import type { CheckResult } from '../core/health';
import type { HealthCheckInput } from './health';
import { MAX_CONVERGE_BATCH, type ConvergeInput, type ConvergeResult } from '../device/twin/converge';

/** Where a sliced plan's devices come from: the stored membership, in the rollout's scope. */
export interface SlicedPlanSource {
  membership: MembershipRef;
  scope: Record<string, string>;
  /** Only these devices of the scope (a converge over the devices left behind); absent: all of it. */
  only?: string[];
  plan: SlicedPlanInput;
}

export interface SliceDevicesInput extends SlicedPlanSource {
  /** The plan's digest the parent adopted: a slice never runs devices of another plan. */
  digest: string;
  phase: number;
  slice: number;
}

/**
 * A membership device as a membership-only snapshot has it (no device contacted): left-behind and
 * node-down devices unreachable with why, every other one reachable with its revision unknown, learned
 * by its own apply. The rollout's snapshot activity and the sliced plan read members the same way.
 */
export function memberSnapshot(device: MemberRecord): DeviceSnapshot {
  const mark = device.nodeDown;
  const base = {
    ...targetOf(device),
    updateClass: device.updateClass,
    os: device.os,
    ...(mark ? { nodeDown: mark } : {}),
  };
  if (device.updateClass === 'left-behind')
    return { ...base, current: null, reachable: false, error: 'left-behind: not contacted' };
  if (mark?.holds) return { ...base, current: null, reachable: false, error: 'node-down: not contacted' };
  return { ...base, current: null, reachable: true };
}

/** How many plans a worker keeps: a rollout's slices ask for the same one, one after another. */
const CACHED_PLANS = 2;

export interface SlicedPlanDeps {
  readMembership(
    ref: MembershipRef,
    client: () => Client,
    onPage?: () => void,
    keep?: boolean,
  ): Promise<readonly MemberRecord[]>;
  client: () => Client;
  heartbeat: () => void;
  /** The health gate's one check over devices (activities/health/), run here over slices' devices. */
  runHealthCheck(input: HealthCheckInput): Promise<CheckResult>;
  /** The offline agents' convergence (device/twin/converge.ts), asked here for slices' devices. */
  desireAgentRevision(input: ConvergeInput): Promise<ConvergeResult>;
}

export interface SliceHealthCheckInput extends Omit<HealthCheckInput, 'devices'> {
  /** The slices (workflow ids) whose changed devices the check is about. */
  slices: string[];
}

export interface SliceConvergeInput extends Omit<ConvergeInput, 'devices'> {
  slices: string[];
  /** The rollout's target revision: a device already there is not asked. */
  target: number;
}

/**
 * A plan a worker made, and what its slices ask of it, each worked out once: hashing a 100,000-device
 * plan or passing over its snapshot for every slice made the worker's CPU per device grow with the fleet.
 */
interface MadePlan {
  plan: Plan;
  snapshot: DeviceSnapshot[];
  digest: string;
  /** The snapshot with the probed devices' answers, by id (the cache's key covers the probed devices). */
  index: ReadonlyMap<string, DeviceSnapshot>;
}

/**
 * The sliced plan's two activities (core/rollout/sliced-plan.ts): the shape for the parent, and a
 * slice's devices for the slice. Both make the plan from the membership the same way, and a worker
 * keeps the last plans it made (a 100,000-device plan is made once per worker, not once per slice).
 */
export function createSlicedPlanActivities(deps: SlicedPlanDeps) {
  const cache = new Map<string, MadePlan>();

  async function planOf(source: SlicedPlanSource): Promise<MadePlan> {
    const key = bytesToHex(
      sha256(
        utf8Encode(
          canonicalize({
            membership: source.membership.digest,
            scope: source.scope,
            only: source.only ?? null,
            plan: source.plan,
          }),
        ),
      ),
    );
    const cached = cache.get(key);
    if (cached) {
      cache.delete(key);
      cache.set(key, cached);
      return cached;
    }
    // Not kept by the reader as well: the plan cache holds what is made of it, and 100,000 records need not stay twice.
    const members = await deps.readMembership(source.membership, deps.client, deps.heartbeat, false);
    const only = source.only ? new Set(source.only) : undefined;
    const scoped = devicesInScope(source.scope, members);
    const snapshot = (only ? scoped.filter((d) => only.has(d.id)) : scoped).map(memberSnapshot);
    const plan = slicedPlan(source.plan, snapshot);
    const made: MadePlan = {
      plan,
      snapshot,
      digest: planDigest(plan),
      index: snapshotIndex(snapshot, source.plan.probed),
    };
    cache.set(key, made);
    while (cache.size > CACHED_PLANS) cache.delete(cache.keys().next().value!);
    return made;
  }

  async function recordsOf(workflowId: string): Promise<SliceRecords> {
    const records = await deps.client().workflow.getHandle(workflowId).query(sliceRecordsQuery);
    deps.heartbeat();
    return records;
  }

  return {
    /**
     * The devices a slice started, in start order, with the state each has there (what a rollback slice
     * puts back, last first, and whose states its own replace).
     */
    async sliceTouched(input: { workflowId: string }): Promise<Pick<SliceRecords, 'devices' | 'states'>> {
      const { devices, states, started } = await recordsOf(input.workflowId);
      const byId = new Map(devices.map((d) => [d.id, d]));
      const stateOf = new Map(states.map((s) => [s[0], s]));
      return { devices: started.map((id) => byId.get(id)!), states: started.map((id) => stateOf.get(id)!) };
    },

    /** One health check over the devices these slices changed (core/rollout/device-outcome.ts isHealthTarget). */
    async sliceHealthCheck(input: SliceHealthCheckInput): Promise<CheckResult> {
      const { slices, ...check } = input;
      const devices: DeviceSnapshot[] = [];
      for (const id of slices) {
        const { devices: all, states } = await recordsOf(id);
        const state = new Map(states.map(([d, s]) => [d, s]));
        for (const d of all) if (isHealthTarget(d, state.get(d.id))) devices.push(d);
      }
      return deps.runHealthCheck({ ...check, devices });
    },

    /** The agent devices these slices skipped as offline get the revision as desired state (workflows/agent-converge.ts). */
    async desireAgentRevisionInSlices(input: SliceConvergeInput): Promise<ConvergeResult> {
      const { slices, target, ...ask } = input;
      let asked = 0;
      let atOrAbove = 0;
      for (const id of slices) {
        const { devices: all, states } = await recordsOf(id);
        const state = new Map(states.map(([d, s, reason]) => [d, { state: s, reason }]));
        const ids = all
          .filter((d) => convergeCandidate(d, state.get(d.id)?.state, state.get(d.id)?.reason, target))
          .map((d) => d.id);
        for (let i = 0; i < ids.length; i += MAX_CONVERGE_BATCH) {
          const r = await deps.desireAgentRevision({ ...ask, devices: ids.slice(i, i + MAX_CONVERGE_BATCH) });
          asked += r.asked;
          atOrAbove += r.atOrAbove ?? 0;
        }
      }
      return { asked, atOrAbove };
    },

    /** A sliced rollout's plan, as its parent holds it: counts, inline phases' devices, canary devices to probe. */
    async planSlices(source: SlicedPlanSource): Promise<PlanShape> {
      const { plan, snapshot } = await planOf(source);
      return planShape(source.plan, plan, snapshot);
    },

    /** One slice's devices, from the plan its parent adopted (refused, not retried, if the plan is another now). */
    async sliceDevices(input: SliceDevicesInput): Promise<DeviceSnapshot[]> {
      const { plan, digest, index } = await planOf(input);
      if (digest !== input.digest)
        throw ApplicationFailure.create({
          type: 'PlanMismatch',
          message: `slice ${input.slice} of phase ${input.phase}: the plan made now (${digest.slice(0, 12)}…) is not the one the rollout adopted (${input.digest.slice(0, 12)}…): the planner or the membership changed under the rollout`,
          nonRetryable: true,
        });
      try {
        return sliceDevicesOf(plan, index, input.phase, input.slice, input.plan.sliceSize);
      } catch (err) {
        throw ApplicationFailure.create({ type: 'PlanMismatch', message: (err as Error).message, nonRetryable: true });
      }
    },
  };
}
