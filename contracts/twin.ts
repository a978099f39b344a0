import * as wf from '@temporalio/workflow';
import type { DesiredRequest, TwinState, TwinSyncInput, TwinView } from '../core/twin';

/**
 * The messages of the device twin `device:<id>` (workflows/device-twin.ts; state and checks in
 * core/twin.ts). Importable by clients (clients/twin.ts: the gateway, the rollout's activities, the
 * CLI) without pulling in the workflow itself.
 */
export const TWIN_WORKFLOW = 'deviceTwinWorkflow';

export interface DeviceTwinInput {
  deviceId: string;
  /** The state the previous run carried over continue-as-new. */
  carried?: TwinState;
}

export type DeviceTwinWorkflow = (input: DeviceTwinInput) => Promise<never>;

/** Set the device's desired revision of one profile (idempotent by requestId; bumps the version). */
export const twinDesireSignal = wf.defineSignal<[DesiredRequest]>('twinDesire');
/** The agent's sync (through the gateway): records its report, waits up to waitMs for news, answers the view. */
export const twinSyncUpdate = wf.defineUpdate<TwinView, [TwinSyncInput]>('twinSync');
/** The twin as it is now. */
export const twinViewQuery = wf.defineQuery<TwinView>('twinView');
/** Ask the agent to re-verify every profile and report (bumps the version). */
export const twinReverifySignal = wf.defineSignal<[Record<string, never>?]>('twinReverify');

export const TWIN_REFUSED = 'TwinRefused';
