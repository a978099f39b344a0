import { mapLimit } from '../../core/map-limit';
import type { DeviceTarget } from '../../core/rollout-state';
import {
  channelFor,
  type ChannelDeps,
  type DeviceChannel,
  type HealthQuestion,
  type Reading,
} from '../../device/channel';
import { TransportError } from '../../device/transport';
import { withoutDevicePrefix } from './evidence';
import type { AskEachDevice, DeviceAnswer, Probe } from './types';

/**
 * The per-device checks' fan-out: each device is asked through its own channel (device/channel, chosen
 * from its transport), `concurrency` at a time, within the check's deadline. A device the deadline
 * passed while it queued is `not-reached`; one that threw is `timeout` (the deadline, or its transport
 * timed out) or `unreachable`; a channel's Reading that is not ok keeps its own kind.
 */
export function deviceAsker(channels: ChannelDeps, concurrency: number, connectTimeoutMs: number): AskEachDevice {
  return async function askEachDevice<T>(
    devices: DeviceTarget[],
    probe: Probe,
    ask: (channel: DeviceChannel, device: DeviceTarget, q: HealthQuestion) => Promise<Reading<T>>,
  ): Promise<DeviceAnswer<T>[]> {
    let done = 0;
    return mapLimit(devices, concurrency, async (device): Promise<DeviceAnswer<T>> => {
      const remainingMs = () => probe.deadline - Date.now();
      try {
        if (remainingMs() <= 0 || probe.signal.aborted)
          return {
            device: device.id,
            ok: false,
            kind: 'not-reached',
            reason: 'not reached before the check timed out',
          };
        const read = await ask(channelFor(device, channels), device, {
          remainingMs,
          signal: probe.signal,
          connectTimeoutMs,
        });
        return read.ok
          ? { device: device.id, ok: true, value: read.value }
          : { device: device.id, ok: false, kind: read.kind, reason: read.reason };
      } catch (err) {
        const reason = withoutDevicePrefix(device.id, (err as Error).message);
        if (probe.signal.aborted || (err instanceof TransportError && err.kind === 'timeout'))
          return { device: device.id, ok: false, kind: 'timeout', reason };
        return { device: device.id, ok: false, kind: 'unreachable', reason };
      } finally {
        probe.progress(++done, devices.length);
      }
    });
  };
}
