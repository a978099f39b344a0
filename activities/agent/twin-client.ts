import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import { twinWorkflowId, type DesiredRequest, type TwinView } from '../../core/twin';
import { twinDesireSignal, twinReverifySignal, twinViewQuery } from '../../workflows/twin-messages';
import type { deviceTwinWorkflow } from '../../workflows/device-twin';

/**
 * The control plane's reads and writes of device twins `device:<id>` (workflows/device-twin.ts): the
 * rollout's apply, the snapshot, health gates, the fleet board and `fleet status --reverify` all go
 * through here. A twin is started by whoever first needs it (signal-with-start: an existing one is used).
 */

/** How a twin is started: an entity that never ends must follow the current build under Worker Versioning. */
export function twinStartOptions(deviceId: string, taskQueue: string) {
  return {
    workflowId: twinWorkflowId(deviceId),
    taskQueue,
    args: [{ deviceId }] as Parameters<typeof deviceTwinWorkflow>,
    versioningOverride: 'AUTO_UPGRADE' as const,
  };
}

/** Set a device's desired state, starting its twin if it has none yet. */
export async function desireOnTwin(client: Client, taskQueue: string, deviceId: string, request: DesiredRequest): Promise<void> {
  await client.workflow.signalWithStart<typeof deviceTwinWorkflow, [DesiredRequest]>('deviceTwinWorkflow', {
    ...twinStartOptions(deviceId, taskQueue),
    signal: twinDesireSignal,
    signalArgs: [request],
  });
}

/** The twin's view, or null when the device has no twin (its agent never synced, nothing was asked of it). */
export async function readTwin(client: Client, deviceId: string): Promise<TwinView | null> {
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
