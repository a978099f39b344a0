import type { Client } from '@temporalio/client';
import { legacyRolloutId, profileLockId } from '../core/rollout-id';

/**
 * The rollout that holds a profile now, read by workflow id (strongly consistent, unlike a visibility
 * search that lags a start): the rollout named by a running lock `profile-lock:<profile>` (its memo,
 * written by the start, or its pending child), else a running `rollout:<profile>` started before
 * per-rollout ids. Undefined when neither runs. A read: it never starts anything (the lock is started by
 * the CLI's start, cli/client.ts), and not found is an answer.
 */
export async function heldRolloutOf(
  client: Client,
  profile: string,
): Promise<{ rolloutId: string; via: 'lock' | 'legacy' } | undefined> {
  const lock = await describeRunning(client, profileLockId(profile));
  if (lock) {
    const child = lock.raw.pendingChildren?.find((c) => c.workflowId)?.workflowId;
    if (child) return { rolloutId: child, via: 'lock' };
    const memo = (lock.memo ?? {}) as { wavegateRollout?: unknown };
    const named = typeof memo.wavegateRollout === 'string' ? memo.wavegateRollout : undefined;
    // No pending child: the rollout is not started yet (held), or has just closed and the lock is
    // closing after it (not held: the lock's next workflow task ends it).
    if (named && !(await describeClosed(client, named))) return { rolloutId: named, via: 'lock' };
  }
  const legacy = await describeRunning(client, legacyRolloutId(profile));
  if (legacy && legacy.type === 'rolloutWorkflow') return { rolloutId: legacy.workflowId, via: 'legacy' };
  return undefined;
}

/** Did the workflow run and close? (Not found: not started yet.) */
async function describeClosed(client: Client, workflowId: string): Promise<boolean> {
  const { WorkflowNotFoundError } = require('@temporalio/client') as typeof import('@temporalio/client');
  try {
    return (await client.workflow.getHandle(workflowId).describe()).status.name !== 'RUNNING';
  } catch (err) {
    if (err instanceof WorkflowNotFoundError) return false;
    throw err;
  }
}

async function describeRunning(client: Client, workflowId: string) {
  // Loaded here, not at the top: `wavegate plan` imports intake/dependencies.ts (and so this file) and
  // never talks to Temporal.
  const { WorkflowNotFoundError } = require('@temporalio/client') as typeof import('@temporalio/client');
  try {
    const described = await client.workflow.getHandle(workflowId).describe();
    return described.status.name === 'RUNNING' ? described : undefined;
  } catch (err) {
    if (err instanceof WorkflowNotFoundError) return undefined;
    throw err;
  }
}
