import * as wf from '@temporalio/workflow';
import type {
  AgentReport,
  DesiredRequest,
  TwinAskAnswer,
  TwinAskInput,
  TwinState,
  TwinSyncInput,
  TwinView,
} from '../core/twin';

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
/**
 * A rollout's apply asking for a desired state in one round trip (since r12): the twin decides the checks before
 * asking against its own record (core/twin.ts `askDecision`), takes the request when they pass, and answers what it
 * did. It replaces a query then a `twinDesire` signal: one workflow task instead of a query and a task, and no
 * second read of a twin the worker no longer caches. Its validator refuses a malformed ask (TWIN_REFUSED) and
 * answers an ask that asks nothing (TWIN_ASKED_NOTHING), so neither reaches history.
 */
export const twinAskUpdate = wf.defineUpdate<TwinAskAnswer, [TwinAskInput]>('twinAsk');
/**
 * The agent's sync as gateways before the change feed sent it: records its report, waits up to waitMs for news,
 * answers the view. Current gateways answer syncs from their own memory and write reports by `twinReport`; this
 * stays for gateways not yet upgraded (docs/operations.md, "Upgrading the gateway").
 */
export const twinSyncUpdate = wf.defineUpdate<TwinView, [TwinSyncInput]>('twinSync');
/**
 * A report the gateway writes because what it says changed (core/twin.ts `forwardDecision`): recorded as a sync
 * that does not wait. The gateway answers the agent only once this signal is accepted, so no report is lost.
 */
export const twinReportSignal = wf.defineSignal<[TwinReportInput]>('twinReport');
export interface TwinReportInput {
  report: AgentReport;
  /** The desired version the agent knew when it sent the report (answers a pending re-verify). */
  knownVersion: number;
  /** When the gateway sent it (its clock, ISO): the twin's feed stamp is the later of this and its own clock. */
  sentAt?: string;
  /**
   * The gateway completes every apply this report answers (gateway/answers.ts): the rollout needs no word from the
   * change feed, so the twin stamps no `reported` change for it. Absent (gateways before r11, or a report answering
   * a request the gateway did not know awaited): stamped as before.
   */
  answersDelivered?: boolean;
}
/** The twin as it is now. */
export const twinViewQuery = wf.defineQuery<TwinView>('twinView');
/** Ask the agent to re-verify every profile and report (bumps the version). */
export const twinReverifySignal = wf.defineSignal<[Record<string, never>?]>('twinReverify');

export const TWIN_REFUSED = 'TwinRefused';
/**
 * A `twinAsk` that asks nothing (the agent already answered the request, or it is offline or ahead) is answered by
 * its validator refusing it with this type and the decision as its one detail: nothing is recorded in history.
 */
export const TWIN_ASKED_NOTHING = 'TwinAskedNothing';
