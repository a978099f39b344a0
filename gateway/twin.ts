import { setTimeout as sleep } from 'node:timers/promises';
import { WorkflowNotFoundError, WorkflowUpdateFailedError, type Client } from '@temporalio/client';
import { twinWorkflowId, type TwinSyncInput, type TwinView } from '../core/twin';
import { twinStartOptions } from '../activities/agent/twin-client';
import { twinSyncUpdate } from '../workflows/twin-messages';
import { HttpRefusal } from './http';

/**
 * The gateway's one way into Temporal: the device's own twin `device:<id>`, by the id from the
 * verified Authorization header only. A device that never synced has no twin yet: its first sync
 * starts it (an existing one is used) and runs `onStarted` (the enrolment hook, gateway/enrolled.ts).
 */
export async function syncTwin(client: Client, taskQueue: string, deviceId: string, input: TwinSyncInput, signal?: AbortSignal, onStarted?: (deviceId: string) => Promise<void>): Promise<TwinView> {
  // Bounded: with no worker to take the update it would wait for good, and the agent has given up long
  // before (its request times out at waitMs + 20 s). Cut too when the agent's connection closes.
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), input.waitMs + 15_000);
  const onClose = () => abort.abort();
  signal?.addEventListener('abort', onClose);
  try {
    return await client.withAbortSignal(abort.signal, () => syncOnce(client, taskQueue, deviceId, input, onStarted));
  } finally {
    clearTimeout(timer);
    signal?.removeEventListener('abort', onClose);
  }
}

async function syncOnce(client: Client, taskQueue: string, deviceId: string, input: TwinSyncInput, onStarted?: (deviceId: string) => Promise<void>): Promise<TwinView> {
  for (let tries = 0; ; tries++) {
    try {
      return await client.workflow.getHandle(twinWorkflowId(deviceId)).executeUpdate(twinSyncUpdate, { args: [input] });
    } catch (err) {
      // The twin's validator said no: the agent sent something malformed, named in the message.
      if (err instanceof WorkflowUpdateFailedError) throw new HttpRefusal(400, 'INVALID_INPUT', (err.cause?.message ?? err.message).slice(0, 400));
      if (tries >= 3) throw err;
      if (err instanceof WorkflowNotFoundError || /not found/i.test((err as Error).message)) {
        await client.workflow.start('deviceTwinWorkflow', { ...twinStartOptions(deviceId, taskQueue), workflowIdConflictPolicy: 'USE_EXISTING' });
        // A device's first sync: before its answer, it is given what the fleet already converged to.
        await onStarted?.(deviceId);
      } else if (/already completed|completed/i.test((err as Error).message)) {
        // Caught between a run and its continue-as-new: the next run takes the update.
        await sleep(200);
      } else throw err;
    }
  }
}
