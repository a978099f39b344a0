import { WorkflowExecutionAlreadyStartedError } from '@temporalio/common';
import * as wf from '@temporalio/workflow';
import type { RolloutInput } from '../core/rollout/input';
import type { RolloutStatus } from '../core/rollout/status';
import {
  WavegateKey,
  WavegatePhase,
  WavegateProfile,
  WavegateRevision,
  WavegateState,
} from '../contracts/search-attributes';
import { rolloutWorkflow } from './rollout';
import { holderQuery, type LockHolder } from '../contracts/profile-lock';

/**
 * The per-profile lock: workflow `profile-lock:<profile>`, started by the CLI with id
 * conflict policy FAIL, so while it runs no second start of the profile gets past Temporal (strongly
 * consistent, unlike a visibility search). It starts the rollout as its child under the rollout's own id
 * and completes when the child closes, whatever its end.
 *
 * The child is ABANDONed when the lock closes: terminating or cancelling `profile-lock:<profile>` never
 * stops a rollout; it only releases the lock, an operator's choice (a second rollout of the profile may
 * then start beside the first). The rollout itself is the same rolloutWorkflow as before, with the same
 * input: only its parent is new.
 */
export interface ProfileLockInput {
  /** The rollout's input; its `rolloutId` is the id to try first (`-2`, `-3`, … when that one is taken). */
  rollout: RolloutInput;
  /** The rollout's memo: the spec fingerprint and the idempotency key (cli/client.ts). */
  memo: Record<string, string>;
  /** The idempotency key, stored as the WavegateKey search attribute (searchable). */
  key?: string;
  staticSummary?: string;
  staticDetails?: string;
}

export interface ProfileLockResult extends LockHolder {
  /** How the rollout's run closed: completed (its status is its result), or the failure's message. */
  closed: 'completed' | 'failed';
  state?: string;
  failure?: string;
}

/** Ids tried for one rollout: the one given, then with `-2` … `-9` (a second taken is rare: one start per profile at a time). */
const ID_ATTEMPTS = 9;

export async function profileLockWorkflow(input: ProfileLockInput): Promise<ProfileLockResult> {
  let holder: LockHolder | null = null;
  wf.setHandler(holderQuery, () => holder);
  const { rollout } = input;
  const base = rollout.rolloutId;
  let child: wf.ChildWorkflowHandle<typeof rolloutWorkflow> | undefined;
  for (let attempt = 1; !child; attempt++) {
    const rolloutId = attempt === 1 ? base : `${base}-${attempt}`;
    try {
      child = await wf.startChild(rolloutWorkflow, {
        workflowId: rolloutId,
        args: [{ ...rollout, rolloutId }],
        // The lock's end never reaches the rollout (see above), and an id is never re-used for a second rollout.
        parentClosePolicy: 'ABANDON',
        cancellationType: 'ABANDON',
        workflowIdReusePolicy: 'REJECT_DUPLICATE',
        memo: { ...input.memo, wavegateLock: wf.workflowInfo().workflowId },
        typedSearchAttributes: [
          { key: WavegateProfile, value: rollout.spec.profile },
          { key: WavegateState, value: 'running' },
          { key: WavegatePhase, value: 'snapshot' },
          { key: WavegateRevision, value: rollout.spec.toRevision },
          ...(input.key ? [{ key: WavegateKey, value: input.key }] : []),
        ],
        ...(input.staticSummary ? { staticSummary: input.staticSummary } : {}),
        ...(input.staticDetails ? { staticDetails: input.staticDetails } : {}),
      });
    } catch (err) {
      if (err instanceof WorkflowExecutionAlreadyStartedError && attempt < ID_ATTEMPTS) continue;
      throw err;
    }
    holder = { rolloutId, runId: child.firstExecutionRunId };
  }
  const held = holder!;
  // The lock's memo names the rollout that holds it: a retried start with the same key finds it here
  // before visibility lists the rollout (cli/client.ts).
  wf.upsertMemo({ wavegateRollout: held.rolloutId });
  try {
    const status = (await child.result()) as RolloutStatus;
    return { ...held, closed: 'completed', state: status.state };
  } catch (err) {
    // The lock itself cancelled: it ends as cancelled (the rollout, abandoned, runs on). A rollout
    // cancelled on its own (the Web UI) is a closed rollout like any other: the lock completes.
    if (wf.isCancellation(err) && wf.CancellationScope.current().consideredCancelled) throw err;
    // Failed, terminated, timed out, or cancelled: the rollout is closed either way, and the lock is free.
    return { ...held, closed: 'failed', failure: (err as Error).message };
  }
}
