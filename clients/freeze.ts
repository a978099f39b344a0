import type { Client } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import { WavegateError, type WavegateErrorCode } from '../core/errors';
import {
  coveringFreeze,
  frozenRefusal,
  windowsFromMemo,
  type FreezeRequest,
  type FreezeTarget,
  type FreezeWindow,
  type FrozenAction,
} from '../core/freeze';
import {
  FREEZES_MEMO,
  FREEZE_REFUSED,
  FREEZE_WORKFLOW,
  FREEZE_WORKFLOW_ID,
  addFreezeUpdate,
  freezesQuery,
  liftFreezeUpdate,
  type AddFreezeResult,
  type FreezeWorkflow,
  type LiftFreezeRequest,
  type LiftFreezeResult,
  type ListedFreeze,
} from '../contracts/freeze';

/**
 * The one client of the freeze entity `wavegate-freeze` (workflows/freeze.ts; messages in contracts/freeze.ts), in
 * the entity clients' style: adding a window is update-with-start (the first freeze creates the entity), a lift is
 * an update that starts nothing, a read is a query that never starts anything (no entity: no freeze); the check
 * before a start reads the entity's memo instead (freezeCoveringNow).
 */

// Loaded where a call needs them: `wavegate plan` and the board's pages import this file's importers.
const sdk = () => require('@temporalio/client') as typeof import('@temporalio/client');

function freezeError(err: unknown): unknown {
  const { WorkflowUpdateFailedError } = sdk();
  if (err instanceof WorkflowUpdateFailedError && err.cause instanceof ApplicationFailure) {
    const cause = err.cause;
    if (cause.type === FREEZE_REFUSED) {
      const code = ((cause.details?.[0] as { code?: string } | undefined)?.code ??
        'INVALID_INPUT') as WavegateErrorCode;
      return new WavegateError(code, cause.message);
    }
  }
  return err;
}

/** Add a freeze window, creating the entity on first use; one in force now returns once its rollouts are held. */
export async function addFreeze(client: Client, taskQueue: string, req: FreezeRequest): Promise<AddFreezeResult> {
  const start = new (sdk().WithStartWorkflowOperation)<FreezeWorkflow>(FREEZE_WORKFLOW, {
    workflowId: FREEZE_WORKFLOW_ID,
    taskQueue,
    args: [{}],
    workflowIdConflictPolicy: 'USE_EXISTING',
    staticSummary: 'change freezes of this namespace (wavegate freeze list)',
    // It never ends: under Worker Versioning it follows the current build (docs/architecture.md, "Upgrading workers").
    versioningOverride: 'AUTO_UPGRADE',
  });
  try {
    return await client.workflow.executeUpdateWithStart(addFreezeUpdate, {
      args: [req],
      startWorkflowOperation: start,
    });
  } catch (err) {
    throw freezeError(err);
  }
}

/** Lift one freeze (or all): NOT_FOUND when none such is held. Answers once its rollouts are resumed. */
export async function liftFreeze(client: Client, req: LiftFreezeRequest): Promise<LiftFreezeResult> {
  try {
    return await client.workflow.getHandle(FREEZE_WORKFLOW_ID).executeUpdate(liftFreezeUpdate, { args: [req] });
  } catch (err) {
    if (err instanceof sdk().WorkflowNotFoundError)
      throw new WavegateError('NOT_FOUND', `no freeze ${req.all ? 'at all' : JSON.stringify(req.id)} is held`);
    throw freezeError(err);
  }
}

/** Every window held, in the order added (none: the entity was never started). */
export async function listFreezes(client: Client): Promise<ListedFreeze[]> {
  try {
    return (await client.workflow.getHandle(FREEZE_WORKFLOW_ID).query(freezesQuery)).windows;
  } catch (err) {
    if (err instanceof sdk().WorkflowNotFoundError) return [];
    throw err;
  }
}

/**
 * The freeze in force now that covers the target, or undefined. Read from the entity's memo by a describe, which
 * the server answers with no worker polling: a start or a converge must not wait on a worker that is down.
 */
export async function freezeCoveringNow(client: Client, target: FreezeTarget): Promise<FreezeWindow | undefined> {
  let memo: Record<string, unknown> | undefined;
  try {
    memo = (await client.workflow.getHandle(FREEZE_WORKFLOW_ID).describe()).memo;
  } catch (err) {
    if (err instanceof sdk().WorkflowNotFoundError) return undefined;
    throw err;
  }
  return coveringFreeze(windowsFromMemo(memo?.[FREEZES_MEMO]), target, Date.now());
}

/** Refuse (CONFLICT, exit 2, naming the freeze, its reason and end) an action in scope of a freeze in force. */
export async function refuseWhileFrozen(client: Client, action: FrozenAction, target: FreezeTarget): Promise<void> {
  const window = await freezeCoveringNow(client, target);
  if (window) throw frozenRefusal(window, action, target);
}
