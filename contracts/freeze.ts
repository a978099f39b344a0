import * as wf from '@temporalio/workflow';
import type { FreezeRequest, FreezeState, FreezeWindow } from '../core/freeze';

/**
 * The messages of the freeze entity `wavegate-freeze` (workflows/freeze.ts; the rules are core/freeze.ts): what
 * the workflow handles and what its client (clients/freeze.ts) and activities send and read.
 */
export const FREEZE_WORKFLOW = 'freezeWorkflow';
/** One per namespace: every freeze of the fleet is in it. */
export const FREEZE_WORKFLOW_ID = 'wavegate-freeze';

export interface FreezeInput {
  /** Carried over by continue-as-new. */
  carried?: FreezeState;
}
export type FreezeWorkflow = (input: FreezeInput) => Promise<never>;

/** A window as listed: the window, when it held, and the rollouts it paused. */
export type ListedFreeze = FreezeWindow & { paused: string[]; heldAt?: string };

export interface AddFreezeResult {
  window: ListedFreeze;
  /** The rollouts the freeze paused when it took effect at once (empty for a window that starts later). */
  paused: string[];
}

export interface LiftFreezeRequest {
  id?: string;
  all?: boolean;
  by: string;
  /** Why (recorded in each resume it sends); optional. */
  reason?: string;
}
export interface LiftFreezeResult {
  lifted: string[];
  /** Rollouts resumed: paused by a lifted freeze and still paused by it. */
  resumed: string[];
  /** Rollouts the freeze had paused and left as they are, with why (an operator paused or resumed them since, or they ended). */
  left: Array<{ rolloutId: string; why: string }>;
}

/** The failure type of a refused add or lift (details[0]: `{ code }`, a WavegateError code). */
export const FREEZE_REFUSED = 'FreezeRefused';

export const addFreezeUpdate = wf.defineUpdate<AddFreezeResult, [FreezeRequest]>('addFreeze');
export const liftFreezeUpdate = wf.defineUpdate<LiftFreezeResult, [LiftFreezeRequest]>('liftFreeze');
/**
 * The entity's memo key for its windows (without the rollouts each paused): written with every change, so that a
 * start, a converge or a revert reads the freezes by a describe, which the server answers with no worker polling
 * (a query would wait for one, and a start must not hang on a worker that is down).
 */
export const FREEZES_MEMO = 'freezes';

/** Every window held (scheduled or in force), in the order added, with the entity's clock. */
export const freezesQuery = wf.defineQuery<{ windows: ListedFreeze[]; now: string }>('freezes');

// ---- the entity's activities (activities/freeze.ts) ----

export interface HoldInput {
  freezeId: string;
  reason: string;
  scope: FreezeWindow['scope'];
  /** Rollouts this freeze paused before: not paused again (one an operator resumed since stays resumed). */
  skip?: string[];
}
export interface HoldResult {
  /** Rollouts paused now by this freeze. */
  paused: string[];
  /** Rollouts in scope not paused (already paused, aborting, ended), with why. */
  skipped: Array<{ rolloutId: string; why: string }>;
}
export interface ReleaseInput {
  freezeId: string;
  rollouts: string[];
  /** The resumes' reason: who lifted it and why, or that it ended. */
  reason: string;
}
export type ReleaseResult = Pick<LiftFreezeResult, 'resumed' | 'left'>;
