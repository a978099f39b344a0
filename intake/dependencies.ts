import type { Client } from '@temporalio/client';
import { dependencyLabel, describeCycle, findDependencyCycle, type Dependency } from '../core/dependencies';
import { WavegateError } from '../core/errors';
import { devicesInScope } from '../core/gates';
import type { Inventory } from '../core/inventory';
import type { Profile } from '../core/revision';
import type { RolloutInput } from '../core/rollout/input';
import type { RolloutSpec } from '../core/spec';
import type { SignedRevision } from './envelope';
import { loadProfile } from './profile';
import { fileRevision } from './revisions';
import { loadProfileTrust } from './trust';
import { heldRolloutOf } from '../clients/profile-lock';

/** One `after` entry, found in the profiles root: its profile and the revision (verified when it has pins). */
export interface LoadedDependency {
  dep: Dependency;
  profile: Profile;
  revision: SignedRevision;
}

/**
 * Each profile the spec's `after` names, from the profiles root: the profile must exist and hold that
 * revision (a signed envelope verified against its pins when it has pins). INVALID_INPUT naming
 * `rollout.after[i].profile` or `.revision` and the value otherwise; nothing is started.
 */
export function loadDependencies(
  spec: Pick<RolloutSpec, 'after'>,
  profilesRoot: string,
  specSource: string,
): LoadedDependency[] {
  return (spec.after ?? []).map((dep, i) => {
    const field = (name: string) => `${specSource}: rollout.after[${i}].${name}`;
    const { layout, profile } = loadProfile(profilesRoot, dep.profile, field('profile'));
    const revision = fileRevision(layout, loadProfileTrust(layout), dep.revision, field('revision'));
    return { dep, profile, revision };
  });
}

/**
 * Devices of this rollout outside a dependency's scope: nothing would ever roll the dependency out to
 * them, so they would wait until it is verified there some other way. Plan and start say so (not a refusal).
 */
export function dependencyScopeNotes(
  deps: readonly LoadedDependency[],
  inventory: Inventory,
  inScope: readonly string[],
): string[] {
  return deps.flatMap(({ dep, profile }) => {
    const covered = new Set(devicesInScope(profile.scope, inventory.devices).map((d) => d.id));
    const outside = inScope.filter((id) => !covered.has(id));
    if (!outside.length) return [];
    const shown = outside.slice(0, 10).join(', ') + (outside.length > 10 ? `, … (${outside.length} in all)` : '');
    return [
      `rollout.after: ${shown} not in the scope of profile "${dep.profile}": each waits until ${dependencyLabel(dep)} is verified on it some other way`,
    ];
  });
}

/** What plan says of the cycle check it cannot make: it contacts nothing. */
export const PLAN_CYCLE_NOTE =
  'rollout.after: a cycle through running rollouts is checked by start (plan contacts no Temporal server)';

/** The `after` of the rollout that holds the profile now (clients/profile-lock.ts; its workflow input), or undefined when none runs. */
export async function runningRolloutAfter(client: Client, profile: string): Promise<Dependency[] | undefined> {
  // Loaded here, not at the top: `wavegate plan` imports this file and never talks to Temporal (the SDK
  // client is over a second of its start-up).
  const { WorkflowNotFoundError } = require('@temporalio/client') as typeof import('@temporalio/client');
  const { decodeFromPayloadsAtIndex } =
    require('@temporalio/common/lib/internal-non-workflow') as typeof import('@temporalio/common/lib/internal-non-workflow');
  const held = await heldRolloutOf(client, profile);
  if (!held) return undefined;
  const workflowId = held.rolloutId;
  const handle = client.workflow.getHandle(workflowId);
  try {
    const described = await handle.describe();
    if (described.status.name !== 'RUNNING') return undefined;
    // The input is in the first event only: one page of one event, however long the history is.
    const page = await client.workflowService.getWorkflowExecutionHistory({
      namespace: client.options.namespace,
      execution: { workflowId, runId: described.runId },
      maximumPageSize: 1,
    });
    const payloads = page.history?.events?.[0]?.workflowExecutionStartedEventAttributes?.input?.payloads;
    const input = await decodeFromPayloadsAtIndex<RolloutInput>(client.options.loadedDataConverter, 0, payloads);
    return input?.spec?.after ?? [];
  } catch (err) {
    if (err instanceof WorkflowNotFoundError) return undefined;
    throw err;
  }
}

/**
 * Refuse a start whose `after` closes a cycle with the running rollouts of the profiles it reaches
 * (transitively): such rollouts would wait for each other forever. INVALID_INPUT naming the cycle.
 */
export async function checkDependencyCycle(
  client: Client,
  spec: Pick<RolloutSpec, 'profile' | 'after'>,
  specSource: string,
  readAfter = runningRolloutAfter,
): Promise<void> {
  if (!spec.after?.length) return;
  const graph = new Map<string, string[]>([[spec.profile, spec.after.map((d) => d.profile)]]);
  const queue = [...graph.get(spec.profile)!];
  while (queue.length) {
    const profile = queue.shift()!;
    if (graph.has(profile)) continue;
    const after = (await readAfter(client, profile)) ?? [];
    graph.set(
      profile,
      after.map((d) => d.profile),
    );
    queue.push(...after.map((d) => d.profile));
  }
  const cycle = findDependencyCycle(spec.profile, graph);
  if (cycle) {
    throw new WavegateError(
      'INVALID_INPUT',
      `${specSource}: invalid\n  rollout.after: cycle ${describeCycle(cycle)} (through the running rollouts of ${[
        ...new Set(cycle),
      ]
        .filter((p) => p !== spec.profile)
        .map((p) => `"${p}"`)
        .join(', ')}); the rollouts would wait for each other forever`,
      {
        field: 'rollout.after',
        value: cycle,
      },
    );
  }
}
