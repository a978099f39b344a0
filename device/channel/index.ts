import type { DeviceTarget } from '../../core/rollout-state';
import { TransportError } from '../transport';
import { agentChannel } from './agent';
import { sshChannel } from './ssh';
import type { ChannelDeps, DeviceChannel } from './types';

export { twinReader, type TwinReader } from '../twin/board';
export { NO_TWIN_READER } from './agent';
export { refusalOf } from './refusal';
export type * from './types';

/**
 * The channels this worker (or CLI) has, by the name inventories give them: the one table of transport names
 * (device/transport/ only dials, for the SSH channel). A new transport is one more entry here, and it passes the
 * channel conformance suite (test/conformance/).
 */
const CHANNELS: ReadonlyMap<string, (deps: ChannelDeps) => DeviceChannel> = new Map([
  ['ssh', sshChannel],
  ['agent', agentChannel],
]);

/**
 * The name of a target's transport. A target without one is ssh: snapshots in histories recorded before the field
 * existed carry none, and they must replay and apply as before.
 */
export function transportName(target: Pick<DeviceTarget, 'transport'>): NonNullable<DeviceTarget['transport']> {
  return target.transport ?? 'ssh';
}

/**
 * The channel a device is reached by, chosen once from its `transport` (transportName). A name this worker has no
 * channel for is a non-retryable config error (Transport.config): retrying cannot add one.
 */
export function channelFor(target: Pick<DeviceTarget, 'id' | 'transport'>, deps: ChannelDeps = {}): DeviceChannel {
  // Typed, but read from histories and inputs: anything may stand here.
  const name: unknown = transportName(target);
  const make = typeof name === 'string' ? CHANNELS.get(name) : undefined;
  if (!make) {
    const allowed = [...CHANNELS.keys()].map((n) => JSON.stringify(n)).join(', ');
    throw new TransportError(
      'config',
      `${target.id}: transport ${JSON.stringify(name)}: not a transport this worker knows; allowed: ${allowed} (set transport on the device in the inventory)`,
    );
  }
  return make(deps);
}

/**
 * The devices that have a twin to read (their channel's `hasTwin`: agent devices): the CLI reads them with a
 * Temporal client it opens only for them, and the board their presence marks. A device with no channel here has
 * none; using it fails elsewhere, naming it.
 */
export function devicesWithTwins<D extends Pick<DeviceTarget, 'id' | 'transport'>>(devices: readonly D[]): D[] {
  return devices.filter((device) => {
    try {
      return channelFor(device).hasTwin;
    } catch {
      return false;
    }
  });
}
