import { readdirSync } from 'node:fs';
import type { Client } from '@temporalio/client';
import {
  cachedLatestRollout,
  convergeEnrolledDevice,
  latestRolloutLookup,
  type ProfileScope,
} from '../device/twin/enrolled';
import { hasProfile, loadProfile } from '../intake/profile';
import type { AgentPins } from './pins';

/**
 * What the gateway does when a device's first sync starts its twin: the device converges to the
 * revision of the latest completed rollout of every profile (under the gateway's profiles root) whose
 * scope it is in (device/twin/enrolled.ts). Best effort: a failure is logged and the device simply
 * waits for the next rollout; the sync itself is answered either way.
 */
export function enrolmentHook(opts: {
  client: Client;
  taskQueue: string;
  pins: AgentPins;
  profilesRoot: string;
  log: (line: string) => void;
}): (deviceId: string) => Promise<boolean> {
  // One lookup per profile every 15 s, however many devices sync for the first time meanwhile.
  const latest = cachedLatestRollout(latestRolloutLookup(opts.client), 15_000);
  return async (deviceId) => {
    const device = opts.pins.deviceOf(deviceId);
    if (!device) return false;
    try {
      const asked = await convergeEnrolledDevice(
        opts.client,
        opts.taskQueue,
        device,
        profilesUnder(opts.profilesRoot),
        latest,
      );
      if (asked.length)
        opts.log(`${deviceId}: first sync: converging to the latest completed rollout of ${asked.join(', ')}`);
      return asked.length > 0;
    } catch (err) {
      opts.log(
        `${deviceId}: first sync: could not look up the latest completed rollouts (${(err as Error).message.slice(0, 200)}); the device waits for the next rollout`,
      );
      // It may have asked one profile before failing on another: read the twin to know.
      return true;
    }
  };
}

/** Every profile under the root, with its scope; a profile that does not load is left out. */
export function profilesUnder(root: string): ProfileScope[] {
  const out: ProfileScope[] = [];
  let names: string[];
  try {
    names = readdirSync(root, { withFileTypes: true })
      .filter((d) => d.isDirectory())
      .map((d) => d.name);
  } catch {
    return out;
  }
  for (const name of names.sort()) {
    if (!hasProfile(root, name)) continue;
    try {
      out.push({ name, scope: loadProfile(root, name).profile.scope });
    } catch {
      /* a broken profile.yaml is the CLI's to report; it is no profile to converge on */
    }
  }
  return out;
}
