import { defineQuery } from '@temporalio/workflow';
import type { Counts, DeviceStatus, RolloutState } from '../core/rollout-state';

/** What `status` answers: per-device states and the counts computed from them. */
export interface RolloutStatus {
  rolloutId: string;
  profile: string;
  fromRevision: number;
  toRevision: number;
  state: RolloutState;
  phase: string;
  devices: DeviceStatus[];
  counts: Counts;
}

export const statusQuery = defineQuery<RolloutStatus>('status');
