import {
  WithStartWorkflowOperation,
  WorkflowNotFoundError,
  WorkflowUpdateFailedError,
  type Client,
} from '@temporalio/client';
import { ApplicationFailure, type SignalDefinition } from '@temporalio/common';
import { WavegateError } from '../core/errors';
import {
  emptyView,
  twinWorkflowId,
  withPresence,
  type DesiredRequest,
  type TwinAskAnswer,
  type TwinAskInput,
  type TwinSyncInput,
  type TwinView,
} from '../core/twin';
import { readSeenOne } from './presence';
import {
  TWIN_ASKED_NOTHING,
  TWIN_REFUSED,
  TWIN_WORKFLOW,
  twinAskUpdate,
  twinDesireSignal,
  twinReportSignal,
  twinReverifySignal,
  twinSyncUpdate,
  twinViewQuery,
  type DeviceTwinWorkflow,
  type TwinReportInput,
} from '../contracts/twin';

/**
 * The one client of device twins `device:<id>` (workflows/device-twin.ts; messages in contracts/twin.ts):
 * the rollout's apply, the snapshot, health gates, the fleet board and `fleet status --reverify`
 * (through device/twin/), and the gateway (gateway/views.ts: a device's record, the reports it writes).
 * In the entity clients' one style (docs/architecture.md, "Layers"): a write that needs no answer is
 * signal-with-start (a desire, a report), one that needs an answer is update-with-start (`syncTwin`, the
 * update gateways before r11 synced by), and a read never starts anything (not found is an answer: null or
 * false).
 */

/** How a twin is started: an entity that never ends must follow the current build under Worker Versioning. */
export function twinStartOptions(deviceId: string, taskQueue: string) {
  return {
    workflowId: twinWorkflowId(deviceId),
    taskQueue,
    args: [{ deviceId }] as Parameters<DeviceTwinWorkflow>,
    versioningOverride: 'AUTO_UPGRADE' as const,
  };
}

/** Signal a device's twin, starting it if the device has none yet. */
async function signalTwin<A>(
  client: Client,
  taskQueue: string,
  deviceId: string,
  signal: SignalDefinition<[A]>,
  arg: A,
): Promise<void> {
  await client.workflow.signalWithStart<DeviceTwinWorkflow, [A]>(TWIN_WORKFLOW, {
    ...twinStartOptions(deviceId, taskQueue),
    signal,
    signalArgs: [arg],
  });
}

/** Set a device's desired state, starting its twin if it has none yet. */
export async function desireOnTwin(
  client: Client,
  taskQueue: string,
  deviceId: string,
  request: DesiredRequest,
): Promise<void> {
  // Sent with the time it is sent: the twin stamps its change feed with the later of this and its own clock.
  await signalTwin(client, taskQueue, deviceId, twinDesireSignal, { ...request, sentAt: new Date().toISOString() });
}

function isAskedNothing(value: unknown): value is Exclude<TwinAskAnswer, { kind: 'asked' }> {
  const kind = typeof value === 'object' && value !== null ? (value as { kind?: unknown }).kind : undefined;
  return kind === 'answered' || kind === 'offline' || kind === 'ahead';
}

/**
 * Ask a device's twin for a desired state in one round trip (`twinAsk`): the twin makes the checks before asking
 * against its record and takes the request when they pass (core/twin.ts `askDecision`); an ask that asks nothing
 * comes back as the validator's refusal carrying the decision, recorded nowhere. Null when it cannot be
 * asked so: the device has no twin (nothing is started here), or its twin runs on a build without `twinAsk` (an
 * upgrade in progress); the caller then reads and signals as before. A malformed ask is INVALID_INPUT.
 */
export async function askTwin(client: Client, deviceId: string, input: TwinAskInput): Promise<TwinAskAnswer | null> {
  try {
    return await client.workflow.getHandle(twinWorkflowId(deviceId)).executeUpdate(twinAskUpdate, { args: [input] });
  } catch (err) {
    if (err instanceof WorkflowNotFoundError) return null;
    if (err instanceof WorkflowUpdateFailedError) {
      const cause = err.cause;
      const decision =
        cause instanceof ApplicationFailure && cause.type === TWIN_ASKED_NOTHING ? cause.details?.[0] : null;
      if (isAskedNothing(decision)) return decision;
      if (cause instanceof ApplicationFailure && cause.type === TWIN_REFUSED)
        throw new WavegateError('INVALID_INPUT', cause.message.slice(0, 400), { deviceId });
      // An older build's twin has no such handler: the SDK refuses the update, nothing was recorded.
      return null;
    }
    throw err;
  }
}

/**
 * Write an agent's report to its twin (the gateway, when what the report says changed), starting the twin if the
 * device has none yet (its first sync). Durable once this returns: the gateway answers the agent only then.
 */
export async function reportToTwin(
  client: Client,
  taskQueue: string,
  deviceId: string,
  input: TwinReportInput,
): Promise<void> {
  await signalTwin(client, taskQueue, deviceId, twinReportSignal, input);
}

/**
 * The twin's own record, or null when the device has no twin (its agent never synced, nothing was asked of it).
 * Its lastSeenAt is the last sync that wrote to it: the gateway's cache reads this; every other reader wants
 * `readTwin`, which adds the device's presence.
 */
export async function readTwinRecord(client: Client, deviceId: string): Promise<TwinView | null> {
  try {
    return await client.workflow.getHandle(twinWorkflowId(deviceId)).query(twinViewQuery);
  } catch (err) {
    if (err instanceof WorkflowNotFoundError) return null;
    throw err;
  }
}

/** Ask a device's agent to re-verify now; false when the device has no twin to ask. */
export async function reverifyTwin(client: Client, deviceId: string): Promise<boolean> {
  try {
    await client.workflow.getHandle(twinWorkflowId(deviceId)).signal(twinReverifySignal, {});
    return true;
  } catch (err) {
    if (err instanceof WorkflowNotFoundError) return false;
    throw err;
  }
}

/**
 * An agent's sync (the gateway's, by the device id it verified): the twin's answer. A device whose twin
 * is not found is new: `onFirstSync` (the gateway's enrolment hook) runs first, so what it asks of the
 * device (by signal-with-start, which may start the twin) is in the first answer, then the sync is an
 * update-with-start (conflict policy USE_EXISTING: a twin started meanwhile is used). The twin's
 * validator refusing the sync is INVALID_INPUT, its message naming what is malformed.
 */
export async function syncTwin(
  client: Client,
  taskQueue: string,
  deviceId: string,
  input: TwinSyncInput,
  onFirstSync?: (deviceId: string) => Promise<void>,
): Promise<TwinView> {
  try {
    try {
      return await client.workflow.getHandle(twinWorkflowId(deviceId)).executeUpdate(twinSyncUpdate, { args: [input] });
    } catch (err) {
      // Not found: no twin yet, or caught between a run and its continue-as-new (the hook is
      // idempotent, by request id, and the next run takes the update).
      if (!(err instanceof WorkflowNotFoundError)) throw err;
    }
    await onFirstSync?.(deviceId);
    const startWorkflowOperation = new WithStartWorkflowOperation<DeviceTwinWorkflow>(TWIN_WORKFLOW, {
      ...twinStartOptions(deviceId, taskQueue),
      workflowIdConflictPolicy: 'USE_EXISTING',
    });
    return await client.workflow.executeUpdateWithStart(twinSyncUpdate, { args: [input], startWorkflowOperation });
  } catch (err) {
    if (err instanceof WorkflowUpdateFailedError)
      throw new WavegateError('INVALID_INPUT', (err.cause?.message ?? err.message).slice(0, 400), { deviceId });
    throw err;
  }
}

/**
 * The twin's view as every reader wants it (snapshot, health gates, the board, the apply's offline check): its
 * record with the device's presence merged in (core/twin.ts `withPresence`), since an idle agent's syncs stay in
 * the gateway and only mark it seen. Null when the device has no twin.
 */
export async function readTwin(client: Client, deviceId: string): Promise<TwinView | null> {
  // The presence read is batched with other readers' (clients/presence.ts `readSeenOne`).
  const [view, mark] = await Promise.all([readTwinRecord(client, deviceId), readSeenOne(client, deviceId)]);
  // A device seen but never asked anything has no twin yet: its view is an empty one, seen when it was.
  if (!view) return mark ? withPresence(emptyView(deviceId), mark) : null;
  return withPresence(view, mark);
}
