import type { Client } from '@temporalio/client';
import { readTwin } from '../../clients/twin';
import type { ProfileReport } from '../../core/twin';
import { until } from './until';

/**
 * A device's final answer to one desired request, read from its twin: the profile's report once it names the request
 * and is neither applying nor idle (applied, refused, failed, …). What the tests that desire on a twin directly (no
 * rollout) wait for.
 */
export function twinAnswer(
  client: Client,
  device: string,
  profile: string,
  requestId: string,
  timeoutMs = 120_000,
): Promise<ProfileReport> {
  return until(
    `${device} answering ${requestId}`,
    async () => {
      const r = (await readTwin(client, device))?.report?.profiles[profile];
      return r && r.requestId === requestId && !['applying', 'idle'].includes(r.state) ? r : undefined;
    },
    timeoutMs,
  );
}
