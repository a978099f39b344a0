import * as wf from '@temporalio/workflow';

/** The messages of the profile lock `profile-lock:<profile>` (workflows/profile-lock.ts). */

/** Who holds the lock: the rollout it started (its id and first run), once started. */
export interface LockHolder {
  rolloutId: string;
  runId: string;
}

export const holderQuery = wf.defineQuery<LockHolder | null>('holder');
