import type { DeviceTarget } from '../../core/rollout-state';
import { TransportError } from './errors';
import { sshTransport } from './ssh-session';
import type { ConnectOptions, DeviceSession, DeviceTransport } from './types';

export { StepFailed, TransportError, type TransportErrorKind } from './errors';
export { deviceValue } from './apply-lock';
export type {
  ApplyHolder,
  ApplyLockClaim,
  ApplyLockRecord,
  ConnectOptions,
  DeviceSession,
  DeviceTransport,
  ExecOptions,
  ExecResult,
  StagedFile,
  StageOptions,
} from './types';

/**
 * The transports this worker can dial, by the name inventories give them. `agent` devices are never
 * dialled: they pull from their twin `device:<id>`, and their channel reaches them there
 * (device/channel/agent.ts); a session to one is refused.
 */
const TRANSPORTS: ReadonlyMap<string, DeviceTransport> = new Map([[sshTransport.name, sshTransport]]);

/**
 * The transport a device is reached by. A target without a `transport` field is ssh: snapshots in
 * histories recorded before the field existed carry none, and they must replay and apply as before.
 * A name this worker has no transport for is a non-retryable config error: retrying cannot add one.
 */
export function transportFor(target: DeviceTarget): DeviceTransport {
  const name: unknown = target.transport ?? 'ssh';
  const transport = typeof name === 'string' ? TRANSPORTS.get(name) : undefined;
  if (!transport) {
    const allowed = [...TRANSPORTS.keys()].map((n) => JSON.stringify(n)).join(', ');
    const why =
      name === 'agent'
        ? 'an agent device is never dialled (it pulls from its twin device:<id>; rollouts, health gates and the fleet board read it there)'
        : 'not a transport this worker knows';
    throw new TransportError(
      'config',
      `${target.id}: transport ${JSON.stringify(name)}: ${why}; allowed: ${allowed} (set transport on the device in the inventory)`,
    );
  }
  return transport;
}

/** Open a session to a device over its own transport; every failure, a bad transport name included, is a rejection. */
export async function connectDevice(target: DeviceTarget, opts?: ConnectOptions): Promise<DeviceSession> {
  return transportFor(target).connect(target, opts);
}
