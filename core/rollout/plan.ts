import { planPhases, type Plan, type PlanDevice } from '../planner';
import type { RolloutInput } from './input';

/**
 * The plan of a rollout from its input and the devices it found: the one call the workflow makes after
 * its snapshot, and the one `wavegate plan` makes over the devices it read, so the preview is the plan.
 */
export function planRollout(input: Pick<RolloutInput, 'rolloutId' | 'spec' | 'poolBudgets' | 'risk'>, snapshot: readonly PlanDevice[]): Plan {
  return planPhases({
    rolloutId: input.rolloutId,
    spec: input.spec,
    devices: snapshot.map((d) => ({ id: d.id, pool: d.pool, class: d.class, os: d.os, updateClass: d.updateClass, current: d.current, reachable: d.reachable })),
    pools: Object.fromEntries(Object.entries(input.poolBudgets).map(([pool, budget]) => [pool, { disruptionBudget: budget }])),
    risk: input.risk,
  });
}

