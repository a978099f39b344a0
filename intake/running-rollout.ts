import type { Client } from '@temporalio/client';
import { legacyRolloutId, profileLockId } from '../core/rollout-id';

/**
 * The rollout that holds a profile now, read by workflow id (strongly consistent, unlike a visibility
 * search that lags a start): the rollout named by a running lock `profile-lock:<profile>` (its memo,
 * written by the start, or its pending child), else a running `rollout:<profile>` started before
 * issue 23. Undefined when neither runs.
 */
export async function heldRolloutOf(client: Client, profile: string): Promise<{ rolloutId: string; via: 'lock' | 'legacy' } | undefined> {
  const lock = await describeRunning(client, profileLockId(profile));
  if (lock) {
    const child = lock.raw.pendingChildren?.find((c) => c.workflowId)?.workflowId;
    const memo = (lock.memo ?? {}) as { wavegateRollout?: unknown };
    const rolloutId = child ?? (typeof memo.wavegateRollout === 'string' ? memo.wavegateRollout : undefined);
    if (rolloutId) return { rolloutId, via: 'lock' };
  }
  const legacy = await describeRunning(client, legacyRolloutId(profile));
  if (legacy && legacy.type === 'rolloutWorkflow') return { rolloutId: legacy.workflowId, via: 'legacy' };
  return undefined;
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
