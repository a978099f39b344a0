/**
 * A nightly canary and the rollouts of its profile exclude each other: a canary never
 * runs while a rollout of the profile does (it records `skipped: rollout running`), and a start is
 * refused while a canary of the profile runs. Pure: given the workflows Temporal says are running for
 * the profile, which ones stand in the way. The lookups are activities/canary.ts (for the canary) and
 * cli/commands/rollout.ts (for start).
 */

export interface RunningWorkflow {
  workflowId: string;
  /** The workflow type: `rolloutWorkflow` or `nightlyCanaryWorkflow`. */
  type: string;
}

/** The rollout a nightly canary runs its canary phase in: `canary:<profile>:<nightly workflow id>`. */
export function canaryRolloutId(profile: string, nightlyWorkflowId: string): string {
  return `${canaryPrefix(profile)}${nightlyWorkflowId}`;
}

function canaryPrefix(profile: string): string {
  return `canary:${profile}:`;
}

/** A nightly canary, or the canary rollout one runs. */
export function isCanary(profile: string, w: RunningWorkflow): boolean {
  return w.type === 'nightlyCanaryWorkflow' || w.workflowId.startsWith(canaryPrefix(profile));
}

/** The rollouts (not canaries) of the profile that keep a canary from running: `rollout:<profile>`, converges. */
export function rolloutsBlockingCanary(profile: string, running: readonly RunningWorkflow[]): string[] {
  return unique(running.filter((w) => w.type === 'rolloutWorkflow' && !isCanary(profile, w)).map((w) => w.workflowId));
}

/**
 * What keeps `start` of `rolloutId` from starting: a canary of the profile (the nightly run or its
 * canary rollout), or another rollout of the profile (a converge). `rolloutId` itself is left to the
 * start (one running `rollout:<profile>`, and an idempotent retry of it, is decided there).
 */
export function blockingStart(
  profile: string,
  rolloutId: string,
  running: readonly RunningWorkflow[],
): { canaries: string[]; rollouts: string[] } {
  const others = running.filter((w) => w.workflowId !== rolloutId);
  return {
    canaries: unique(others.filter((w) => isCanary(profile, w)).map((w) => w.workflowId)),
    rollouts: unique(
      others.filter((w) => w.type === 'rolloutWorkflow' && !isCanary(profile, w)).map((w) => w.workflowId),
    ),
  };
}

/** The reason a canary gives when it skips: recorded as its verdict's reason, its audit and its result. */
export function skippedReason(blocking: readonly string[]): string {
  return `skipped: rollout running (${blocking.join(', ')})`;
}

function unique(ids: string[]): string[] {
  return [...new Set(ids)].sort();
}
