import { planPhases, type Plan, type PlanDevice, type PlanInput } from '../planner';
import type { RolloutInput } from './input';

/**
 * What the planner is given for a rollout: its id as the seed, the spec, the devices found, the pools'
 * budgets and the revision's risk. The workflow builds it after its snapshot; `wavegate plan` builds it
 * over the devices it read, with the same function, so the preview is the plan.
 */
export function plannerInputOf(
  input: Pick<RolloutInput, 'rolloutId' | 'planSeed' | 'spec' | 'poolBudgets' | 'risk' | 'reverts'>,
  devices: readonly PlanDevice[],
): PlanInput {
  return {
    rolloutId: input.rolloutId,
    ...(input.planSeed !== undefined ? { seedId: input.planSeed } : {}),
    spec: input.spec,
    devices: devices.map((d) => ({
      id: d.id,
      pool: d.pool,
      class: d.class,
      os: d.os,
      updateClass: d.updateClass,
      current: d.current,
      reachable: d.reachable,
      ...(d.nodeDown ? { nodeDown: d.nodeDown } : {}),
    })),
    pools: Object.fromEntries(
      Object.entries(input.poolBudgets).map(([pool, budget]) => [pool, { disruptionBudget: budget }]),
    ),
    risk: input.risk,
    // A revert goes down from fromRevision on purpose: its devices there are what it is for.
    ...(input.reverts ? { revertingFrom: input.spec.fromRevision } : {}),
  };
}

/** The plan of a rollout from its input and the devices it found. */
export function planRollout(
  input: Pick<RolloutInput, 'rolloutId' | 'planSeed' | 'spec' | 'poolBudgets' | 'risk' | 'reverts'>,
  devices: readonly PlanDevice[],
): Plan {
  return planPhases(plannerInputOf(input, devices));
}

/**
 * The canary's devices whose marker and reachability are not yet known (`probed` holds those that
 * are): with a membership-only snapshot, only these few are probed, and the plan is made again until
 * the canary is devices that need the change. Empty when the first phase is not a canary.
 */
export function canaryToProbe(plan: Plan, probed: ReadonlySet<string>): string[] {
  const first = plan.phases[0];
  if (first?.kind !== 'canary') return [];
  return first.devices.filter((id) => !probed.has(id));
}
