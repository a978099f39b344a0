import type { DeviceTarget } from '../../core/rollout-state';
import { sshTransport } from './ssh-session';
import type { ConnectOptions, DeviceSession } from './types';

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
 * Dial a device: an SSH session (./ssh-session.ts), the one transport that dials. Which devices are dialled is
 * the device channel's choice, by the inventory's `transport` (device/channel/index.ts `channelFor`, the one
 * table of transport names): only the SSH channel, and the device steps it runs, call this. An agent device is
 * never dialled, and its target carries no ssh settings, so a session to one is refused here as a config error
 * naming the device. Every failure is a rejection (TransportError; `retryable` says whether another attempt can help).
 */
export async function connectDevice(target: DeviceTarget, opts?: ConnectOptions): Promise<DeviceSession> {
  return sshTransport.connect(target, opts);
}
