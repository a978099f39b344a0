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
 * The channels this worker (or CLI) has, by the name inventories give them. A new transport is one
 * more entry here, and it passes the channel conformance suite (test/conformance/).
 */
const CHANNELS: ReadonlyMap<string, (deps: ChannelDeps) => DeviceChannel> = new Map([
  ['ssh', sshChannel],
  ['agent', agentChannel],
]);

/**
 * The channel a device is reached by, chosen once from its `transport`. A target without one is ssh:
 * snapshots in histories recorded before the field existed carry none. A name this worker has no
 * channel for is a non-retryable config error (Transport.config): retrying cannot add one.
 */
export function channelFor(target: Pick<DeviceTarget, 'id' | 'transport'>, deps: ChannelDeps = {}): DeviceChannel {
  const name: unknown = target.transport ?? 'ssh';
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
 * Whether a device is reached through Temporal (its twin) rather than dialled: such a target carries no
 * ssh settings. A transport with no channel here is dialled as far as this says; using it fails, naming it.
 */
export function throughTemporal(target: Pick<DeviceTarget, 'id' | 'transport'>): boolean {
  try {
    return channelFor(target).throughTemporal;
  } catch {
    return false;
  }
}
