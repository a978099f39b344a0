import type { WebhookDeliveryStatus } from '../events';
import type { PhaseTiming } from '../eta';
import type { GateOutcome } from '../health';
import type { DeadlineStatus } from './deadline';
import type { Counts, DeviceStatus, RolloutState } from '../rollout-state';
import type { SliceUnit } from './sliced-records';
import type { WatchStatus } from './watch';

export const PHASE_STAGES = [
  'pending',
  'applying',
  'gate',
  'awaiting-approval',
  'passed',
  'failed',
  'inconclusive',
  'stopped',
] as const;
export type PhaseStage = (typeof PHASE_STAGES)[number];

export type CanaryVerdict = GateOutcome | 'nothing-to-test';

export interface PhaseStatus {
  index: number;
  name: string;
  devices: number;
  gate: number | 'manual';
  /** Where the phase is: waiting to start, applying, in its gate, done. */
  stage: PhaseStage;
  gateOutcome?: GateOutcome;
  evidence?: string[];
  /** When its devices started and ended, its gate began, it ended: what its estimated end is made from (core/eta.ts). */
  timing?: PhaseTiming;
}

export interface ControlRecord {
  control: 'pause' | 'resume' | 'abort' | 'approve' | 'override-audit' | 'cancel';
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
  /** The current phase's name, or the stage before/after the phases (`snapshot`, `rollback`, `done`). */
  phase: string;
  pausedReason?: string;
  phases: PhaseStatus[];
  devices: DeviceStatus[];
  counts: Counts;
  controls: ControlRecord[];
  warnings: string[];
  /** The last audit record written: lets `wavegate audit --verify --head` catch records cut off the end. */
  auditHead?: { seq: number; hash: string };
  /** How many devices this rollout has started changing so far: what an abort or a cancel puts back. */
  changedDevices?: number;
  /** A canary run's verdict (nightly canary). */
  verdict?: CanaryVerdict;
  /** The last progress deadline that passed: which, where, when, the required devices still unconfirmed, and what it did. */
  deadline?: DeadlineStatus;
  /** A revert: the completed rollout (id and run) it undoes. */
  reverts?: { rolloutId: string; runId: string };
  /** Deliveries to the spec's webhooks (core/events.ts): counts and the events not delivered, never a secret. */
  webhooks?: WebhookDeliveryStatus;
  /**
   * Sliced records (core/rollout/sliced-plan.ts): the slices, in start order, where the sliced phases'
   * device records are (`devices` then holds the inline phases' devices only).
   */
  slices?: SliceUnit[];
  /** The watch after promotion (the spec's `watch`, core/rollout/watch.ts): its checks, outcome and alerts. */
  watch?: WatchStatus;
}
