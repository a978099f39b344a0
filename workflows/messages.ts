import { defineQuery, defineSignal, defineUpdate } from '@temporalio/workflow';
import type { AbortControl, ApproveControl, PauseControl, ResumeControl } from '../core/controls';
import type { Counts, DeviceStatus, RolloutState } from '../core/rollout-state';

export interface PhaseStatus {
  index: number;
  name: string;
  devices: number;
  gate: number | 'manual';
  /** Where the phase is: waiting to start, applying, in its gate, done. */
  stage: 'pending' | 'applying' | 'gate' | 'awaiting-approval' | 'passed' | 'failed' | 'inconclusive' | 'stopped';
  gateOutcome?: 'pass' | 'fail' | 'inconclusive';
  evidence?: string[];
}

export interface ControlRecord {
  control: 'pause' | 'resume' | 'abort' | 'approve' | 'cancel';
  by: string;
  reason?: string;
  at: string;
  accepted: boolean;
  note?: string;
}

/** What `status` answers: per-device states, the counts computed from them, phases and controls. */
export interface RolloutStatus {
  rolloutId: string;
  profile: string;
  fromRevision: number;
  toRevision: number;
  state: RolloutState;
  /** The current phase's name, or the stage before/after the phases (`snapshot`, `done`). */
  phase: string;
  pausedReason?: string;
  phases: PhaseStatus[];
  devices: DeviceStatus[];
  counts: Counts;
  controls: ControlRecord[];
  warnings: string[];
  /** The last audit record written: lets `wavegate audit --verify --head` catch records cut off the end. */
  auditHead?: { seq: number; hash: string };
  /** A canary run's verdict (nightly canary). */
  verdict?: 'pass' | 'fail' | 'inconclusive' | 'nothing-to-test';
}

export const statusQuery = defineQuery<RolloutStatus>('status');

// Signals: usable from the Web UI's signal form. An invalid one is ignored and recorded as such.
export const pauseSignal = defineSignal<[PauseControl]>('pause');
export const resumeSignal = defineSignal<[ResumeControl]>('resume');
export const abortSignal = defineSignal<[AbortControl]>('abort');
export const approveSignal = defineSignal<[ApproveControl]>('approve');

// Updates: the same controls for the CLI; the validator rejects an invalid transition at once.
export const pauseUpdate = defineUpdate<RolloutStatus, [PauseControl]>('pauseRollout');
export const resumeUpdate = defineUpdate<RolloutStatus, [ResumeControl]>('resumeRollout');
export const abortUpdate = defineUpdate<RolloutStatus, [AbortControl]>('abortRollout');
export const approveUpdate = defineUpdate<RolloutStatus, [ApproveControl]>('approvePhase');

/** Parent → slice child: carry the operator's pause/resume/abort to the devices a child runs. */
export const sliceControlSignal = defineSignal<[{ paused: boolean; stop: boolean }]>('sliceControl');
