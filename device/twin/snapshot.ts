import type { Client } from '@temporalio/client';
import { describeAge, isOffline } from '../../core/twin';
import type { DeviceSnapshot } from '../../core/rollout-state';
import { readTwin } from '../../clients/twin';

/**
 * An agent device in the rollout's snapshot: never dialled. Its marker is the one its agent last
 * reported to its twin, and it is reachable while the agent syncs (offline past TWIN_OFFLINE_AFTER_MS,
 * or never seen), so the rollout's offline policy treats it as it treats an unreachable SSH device.
 */
export async function agentSnapshot(
  client: Client,
  base: Omit<DeviceSnapshot, 'current' | 'reachable'>,
  profile: string,
  nowMs = Date.now(),
): Promise<DeviceSnapshot> {
  const view = await readTwin(client, base.id);
  const reported = view?.report?.profiles;
  const current = reported && Object.hasOwn(reported, profile) ? reported[profile]!.revision : null;
  if (!view || isOffline(view, nowMs)) {
    return {
      ...base,
      current,
      reachable: false,
      error: `agent offline: last seen ${describeAge(view?.lastSeenAt ?? null, nowMs)}`,
    };
  }
  return { ...base, current, reachable: true };
}
