import type { Client } from '@temporalio/client';
import { WavegateError } from '../core/errors';
import type { TwinSyncInput, TwinView } from '../core/twin';
import * as twins from '../clients/twin';
import { HttpRefusal } from './http';

/**
 * The gateway's one way into Temporal: the device's own twin `device:<id>`, by the id from the
 * verified Authorization header only (clients/twin.ts `syncTwin`). A device that never synced has no
 * twin yet: its first sync runs `onStarted` (the enrolment hook, gateway/enrolled.ts) and starts it.
 */
export async function syncTwin(
  client: Client,
  taskQueue: string,
  deviceId: string,
  input: TwinSyncInput,
  signal?: AbortSignal,
  onStarted?: (deviceId: string) => Promise<void>,
): Promise<TwinView> {
  // Bounded: with no worker to take the update it would wait for good, and the agent has given up long
  // before (its request times out at waitMs + 20 s). Cut too when the agent's connection closes.
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), input.waitMs + 15_000);
  const onClose = () => abort.abort();
  signal?.addEventListener('abort', onClose);
  try {
    return await client.withAbortSignal(abort.signal, () =>
      twins.syncTwin(client, taskQueue, deviceId, input, onStarted),
    );
  } catch (err) {
    // The twin's validator said no: the agent sent something malformed, named in the message.
    if (err instanceof WavegateError && err.code === 'INVALID_INPUT')
      throw new HttpRefusal(400, 'INVALID_INPUT', err.message);
    throw err;
  } finally {
    clearTimeout(timer);
    signal?.removeEventListener('abort', onClose);
  }
}
