import { WorkflowNotFoundError, WorkflowUpdateFailedError, type Client } from '@temporalio/client';
import { ApplicationFailure, type SignalDefinition } from '@temporalio/common';
import { WavegateError } from '../core/errors';
import {
  emptyView,
  twinWorkflowId,
  withPresence,
  type DesiredRequest,
  type TwinAskAnswer,
  type TwinAskInput,
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
  twinViewQuery,
  type DeviceTwinWorkflow,
  type TwinReportInput,
} from '../contracts/twin';

/**
 * The one client of device twins `device:<id>` (workflows/device-twin.ts; messages in contracts/twin.ts):
 * the rollout's apply, the snapshot, health gates, the fleet board and `fleet status --reverify`
 * (through device/twin/), and the gateway (gateway/views.ts: a device's record, the reports it writes).
 * In the entity clients' one style (docs/architecture.md, "Layers"): a write that needs no answer is
 * signal-with-start (a desire, a report), one that needs an answer is an update that starts nothing (`askTwin`),
 * and a read never starts anything (not found is an answer: null or false). The twin's `twinSync` update, which
 * gateways before r11 synced by, has no client here: no current gateway sends it.
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
