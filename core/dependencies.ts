import type { z } from 'zod';
import { PROFILE_NAME, PROFILE_NAME_RULE } from './profile-name';
import { lazySchema, zod } from './lazy-schema';

/**
 * Ordering between profiles (docs/formats.md, "after"): a rollout's devices start only once each of them
 * verifies every profile the spec names at that revision. Pure: the spec schema, the labels the status
 * shows, the workflow's retry backoff and the cycle walk over the `after` declarations of running rollouts.
 */

/** At most this many dependencies per spec: each one is a verify on every device before its apply. */
export const MAX_DEPENDENCIES = 10;

export const Dependency = lazySchema(() =>
  zod()
    .object({
      profile: zod().string().regex(PROFILE_NAME, PROFILE_NAME_RULE),
      revision: zod().number().int().positive(),
    })
    .strict(),
);
export type Dependency = z.output<typeof Dependency>;

/** `inference r15`: how a dependency is named in reasons and errors. */
export function dependencyLabel(dep: Dependency): string {
  return `${dep.profile} r${dep.revision}`;
}

/** The reason a device shows while it waits: `waiting for inference r15`. */
export function waitingReason(unmet: readonly Dependency[]): string {
  return `waiting for ${unmet.map(dependencyLabel).join(', ')}`;
}

/** A problem of a spec's `after` that needs no other file (`index` is the entry's place in the list). */
export interface AfterProblem {
  index: number;
  value: string;
  message: string;
}

/** Problems of a spec's `after` that need no other file: the spec's own profile, or the same profile twice. */
export function afterProblems(profile: string, after: readonly Dependency[]): AfterProblem[] {
  const problems: AfterProblem[] = [];
  const seen = new Set<string>();
  after.forEach((dep, index) => {
    if (dep.profile === profile)
      problems.push({ index, value: dep.profile, message: 'a profile may not depend on itself' });
    else if (seen.has(dep.profile))
      problems.push({ index, value: dep.profile, message: 'named twice; give each profile once' });
    seen.add(dep.profile);
  });
  return problems;
}

/** The first retry of a waiting device after this long, doubling up to DEPENDENCY_RETRY_MAX_MS. */
export const DEPENDENCY_RETRY_MIN_MS = 15_000;
export const DEPENDENCY_RETRY_MAX_MS = 120_000;

/** How long a device waits before its `attempt`-th (1-based) recheck of its dependencies. */
export function dependencyBackoffMs(attempt: number): number {
  const n = Math.max(1, Math.floor(attempt));
  return Math.min(DEPENDENCY_RETRY_MAX_MS, DEPENDENCY_RETRY_MIN_MS * 2 ** Math.min(n - 1, 10));
}

/**
 * The profiles each profile waits for: the spec being started, plus the running rollouts of the
 * profiles it reaches (their `after`). A profile with no running rollout has no edges.
 */
export type DependencyGraph = ReadonlyMap<string, readonly string[]>;

/**
 * A cycle reachable from `root`, as the path that closes it (`['motd', 'inference', 'motd']`), or
 * undefined. Depth-first in declaration order, so the same graph always names the same cycle.
 */
export function findDependencyCycle(root: string, graph: DependencyGraph): string[] | undefined {
  const done = new Set<string>();
  const path: string[] = [];
  const onPath = new Set<string>();
  const visit = (node: string): string[] | undefined => {
    if (onPath.has(node)) return [...path.slice(path.indexOf(node)), node];
    if (done.has(node)) return undefined;
    path.push(node);
    onPath.add(node);
    for (const next of graph.get(node) ?? []) {
      const cycle = visit(next);
      if (cycle) return cycle;
    }
    path.pop();
    onPath.delete(node);
    done.add(node);
    return undefined;
  };
  return visit(root);
}

/** `motd -> inference -> motd`. */
export function describeCycle(cycle: readonly string[]): string {
  return cycle.join(' -> ');
}
