import { defineQuery, defineSignal, defineUpdate } from '@temporalio/workflow';
import type { AbortControl, ApproveControl, AuditOverrideControl, PauseControl, ResumeControl } from '../core/controls';
import type { RolloutStatus } from '../core/rollout/status';
import type { BudgetHandoff, BudgetRelease } from '../core/rollout/shared-budget';
import type { DeviceSnapshot, DeviceState } from '../core/rollout-state';

/**
 * The messages of a rollout `rollout:<profile>:<stamp>` (workflows/rollout.ts) and of its slice children
 * (workflows/slice.ts): the operator's controls as signals (the Web UI's form) and as updates (the CLI),
 * the status query, and what a parent and its slices tell each other.
 */
export type { ControlRecord, PhaseStatus, RolloutStatus } from '../core/rollout/status';

export const statusQuery = defineQuery<RolloutStatus>('status');

// Signals: usable from the Web UI's signal form. An invalid one is ignored and recorded as such.
export const pauseSignal = defineSignal<[PauseControl]>('pause');
export const resumeSignal = defineSignal<[ResumeControl]>('resume');
export const abortSignal = defineSignal<[AbortControl]>('abort');
export const approveSignal = defineSignal<[ApproveControl]>('approve');
export const overrideAuditSignal = defineSignal<[AuditOverrideControl]>('overrideAudit');

// Updates: the same controls for the CLI; the validator rejects an invalid transition at once.
export const pauseUpdate = defineUpdate<RolloutStatus, [PauseControl]>('pauseRollout');
export const resumeUpdate = defineUpdate<RolloutStatus, [ResumeControl]>('resumeRollout');
export const abortUpdate = defineUpdate<RolloutStatus, [AbortControl]>('abortRollout');
export const approveUpdate = defineUpdate<RolloutStatus, [ApproveControl]>('approvePhase');
/** Carry on past an audit trail that cannot be made whole: a new segment from the last good head, with the reason. */
export const overrideAuditUpdate = defineUpdate<RolloutStatus, [AuditOverrideControl]>('overrideAudit');

/** Parent → slice child: carry the operator's pause/resume/abort to the devices a child runs. */
export const sliceControlSignal = defineSignal<[{ paused: boolean; stop: boolean; ack?: number }]>('sliceControl');
/** Slice → parent: it holds the control numbered `ack` (a control update waits for every live slice's). */
export const sliceControlAckSignal = defineSignal<[{ workflowId: string; ack: number }]>('sliceControlAck');

// Overlapping slices of one phase (workflows/slice-link.ts): the chain that shares the pools' budgets.
/** Parent → slice: the slice that follows it in the phase (null: none will), to hand the budget to. */
export const sliceSuccessorSignal = defineSignal<[{ workflowId: string | null }]>('sliceSuccessor');
/** Slice → its successor: the slots still in use up the chain, and the phase's tally so far. */
export const sliceHandoffSignal = defineSignal<[BudgetHandoff]>('sliceHandoff');
/** Slice → its successor: slots freed since the handoff (devices that ended), with their tally. */
export const sliceReleaseSignal = defineSignal<[BudgetRelease]>('sliceRelease');
/**
 * A slice's records (sliced records, core/rollout/sliced-plan.ts): its devices as loaded, each one's
 * state, and those it started in start order. Answered by a running or a closed slice: the status's
 * device lookup, the health gate, compensation and convergence read a slice's devices from here.
 */
export const sliceRecordsQuery = defineQuery<SliceRecords>('sliceRecords');
export interface SliceRecords {
  devices: DeviceSnapshot[];
  /** Each device's state and reason; `true` fourth when its answer came with its verified receipt (slices before receipts send three). */
  states: Array<[string, DeviceState, string | undefined, true?]>;
  started: string[];
}
/** Slice → parent: it holds the budget now (the parent starts the slice after it). */
export const sliceActiveSignal = defineSignal<[{ workflowId: string }]>('sliceActive');
