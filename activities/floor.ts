import { Context } from '@temporalio/activity';
import { revertUntilOf } from '../core/floor';
import type { DeviceTarget } from '../core/rollout-state';
import { mapLimit } from './map-limit';
import { channelFor } from './channel';

export interface ConfirmFloorInput {
  devices: DeviceTarget[];
  profile: string;
  /** The revision the completed rollout confirmed. */
  revision: number;
  /** The revision it replaced: the one a revert may go back to. */
  from: number;
  rolloutId: string;
  /** How long a revert back to `from` stays allowed (0: never), from now on the worker's clock. */
  revertWindowMs: number;
}

export interface ConfirmFloorResult {
  confirmed: number;
  /** Devices whose floor could not be written, with why: the rollout still completed; these are named. */
  failed: Array<{ id: string; error: string }>;
}

/**
 * Floor writes at once within one confirmFloor activity. A floor write changes no running service (one
 * small file), so the disruption budget does not bound it; this bounds the worker's connections. At 16
 * the floor pass was 17% of a 100-device rollout over sshd (1.35 s of 8.0 s, bench/README.md).
 */
export const FLOOR_WRITES_AT_ONCE = 64;

/**
 * Raise each device's floor once a rollout completed (core/floor.ts): from now on nothing below the
 * confirmed revision is applied there, except a revert to `from` inside the window. A device that cannot
 * be reached keeps its old floor and is reported, never silently passed over.
 */
export function createFloorActivities(deps: { concurrency?: number } = {}) {
  return {
    async confirmFloor(input: ConfirmFloorInput): Promise<ConfirmFloorResult> {
      const revertUntil = revertUntilOf(Date.now(), input.revertWindowMs);
      const failed: ConfirmFloorResult['failed'] = [];
      let done = 0;
      await mapLimit(input.devices, deps.concurrency ?? FLOOR_WRITES_AT_ONCE, async (device) => {
        const floor = { revision: input.revision, from: input.from, revertUntil, rollout: input.rolloutId };
        try {
          // Through the device's channel: over SSH on the connection its apply kept, when this worker ran it.
          await channelFor(device).raiseFloor(device, input.profile, floor);
        } catch (err) {
          failed.push({ id: device.id, error: (err as Error).message.slice(0, 300) });
        } finally {
          Context.current().heartbeat(++done);
        }
      });
      return { confirmed: input.devices.length - failed.length, failed };
    },
  };
}
