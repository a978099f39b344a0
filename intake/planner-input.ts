import type { Device } from '../core/inventory';
import type { PlanDevice, PlanInput } from '../core/planner';
import type { RolloutInput } from '../core/rollout/input';

/**
 * What the planner is given for a rollout input and the devices of its snapshot: the pools' budgets
 * from the input, the revision's risk, the rollout id as the seed. The rollout workflow builds the
 * same (workflows/rollout.ts, step 2); `plan` calls this with the inventory's devices and their markers.
 */
export function plannerInput(input: Pick<RolloutInput, 'rolloutId' | 'spec' | 'poolBudgets' | 'risk'>, devices: readonly PlanDevice[]): PlanInput {
  return {
    rolloutId: input.rolloutId,
    spec: input.spec,
    devices,
    pools: Object.fromEntries(Object.entries(input.poolBudgets).map(([pool, budget]) => [pool, { disruptionBudget: budget }])),
    risk: input.risk,
  };
}

/** Inventory devices as the planner sees them, with the revision each is at (null: unknown). */
export function planDevices(devices: readonly Device[], current: ReadonlyMap<string, number> = new Map()): PlanDevice[] {
  return devices.map((d) => ({ id: d.id, pool: d.pool, class: d.class, os: d.os, updateClass: d.updateClass, current: current.get(d.id) ?? null }));
}
