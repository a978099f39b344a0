import type { ExecResult } from './types';

/**
 * The two ways a device operation fails. A TransportError means we could not talk to the device (or
 * must not: a wrong host key); a StepFailed means the device ran a command and said no. Activities map
 * them to Temporal failures (activities/index.ts `toFailure`), so the kinds and the step names are part
 * of what workflows and operators see.
 */
export type TransportErrorKind = 'host-key' | 'auth' | 'config' | 'connect' | 'timeout' | 'dropped';

export class TransportError extends Error {
  constructor(
    readonly kind: TransportErrorKind,
    message: string,
  ) {
    super(message);
    this.name = 'TransportError';
  }

  /** Connection trouble may pass; a wrong host key, a refused login or a bad config will not. */
  get retryable(): boolean {
    return this.kind === 'connect' || this.kind === 'timeout' || this.kind === 'dropped';
  }
}

/**
 * A device step that ran and exited non-zero: the revision's apply or verify, or one of the session's
 * own steps (staging the payload, its digest check, writing the marker). Never retried: the same
 * command on the same device says no again.
 */
export class StepFailed extends Error {
  constructor(
    readonly step: string,
    readonly result: ExecResult,
    device: string,
  ) {
    super(
      `${device}: ${step} exited ${result.code}: ${(result.stderr || result.stdout).trim().slice(-400) || '(no output)'}`,
    );
    this.name = 'StepFailed';
  }
}
