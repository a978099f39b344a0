import type { Device } from '../../core/inventory';
import type { DeviceTarget } from '../../core/rollout-state';

/** What every channel's target keeps of an inventory device: who it is, where, and its transport's name. */
export function baseTarget(device: Device): DeviceTarget {
  return {
    id: device.id,
    host: device.host,
    port: device.port,
    user: device.user,
    pool: device.pool,
    class: device.class,
    transport: device.transport,
  };
}
