import type { Dependency } from '../core/dependencies';
import type { ApplyLockRecord } from './transport/types';

/**
 * What a device's apply answers, and the refusals that end it (re-exported by ./device-steps.ts). Kept apart from the
 * steps themselves so that what only maps an answer (gateway/answers.ts, ./apply-failure.ts) loads no transport.
 */

/**
 * `dependency-unmet`: the device does not verify a profile the rollout waits for (`after`); nothing else ran.
 * `offline` (only asked for with ApplyInput.reportOffline): the device could not be reached at first contact; nothing ran.
 */
export type ApplyOutcome = 'applied' | 'already-applied' | 'dependency-unmet' | 'offline' | 'ahead';

export interface ApplyResult {
  device: string;
  outcome: ApplyOutcome;
  /** Which steps ran, in order: the evidence for the audit trail. */
  steps: string[];
  /** With `dependency-unmet`: the dependencies the device does not verify, and what was found. */
  unmet?: Dependency[];
  detail?: string;
  /** The device's own receipt of this answer (core/receipt.ts receiptText), checked once by the worker as it arrived. */
  receipt?: string;
  /** The apply activity's id: the request the receipt answers (set by activities/apply.ts with a receipt). */
  request?: string;
  /** A receipt came but failed the worker's check (or the device could not make one): why, in a few words. */
  receiptProblem?: string;
}

/**
 * The worker refused the revision's envelope before touching the device: a compromised control plane
 * (or a tampered history) cannot push content the worker's own pins did not sign, nor make it read or
 * send a file the signed revision does not name (PAYLOAD_* reasons). Never retried.
 */
export class EnvelopeRejected extends Error {
  constructor(
    readonly reason: string,
    detail: string,
  ) {
    super(`EnvelopeRejected (${reason}): ${detail}`);
    this.name = 'EnvelopeRejected';
  }
}

/**
 * The device's apply lock is held by another unit (another rollout, or another step of this one) whose
 * holder is not provably gone: nothing was run. Never retried; the message names the holder.
 */
export class ApplyLockHeld extends Error {
  constructor(
    readonly device: string,
    readonly record: ApplyLockRecord,
    profile: string,
  ) {
    super(
      `${device}: CONFLICT: the apply lock for profile "${profile}" is held by ${describeHolder(record)}; nothing was run. It is released when that apply ends; if its rollout is gone and the lock stays, inspect $HOME/.wavegate/profiles/${profile}/apply.lock on the device`,
    );
    this.name = 'ApplyLockHeld';
  }
}

function describeHolder(record: ApplyLockRecord): string {
  const h = record.holder;
  const who = h
    ? `rollout ${h.rollout} (run ${h.run}, activity ${h.activity}, attempt ${h.attempt})`
    : 'an unnamed holder (the lock is being taken, or its owner file is damaged)';
  const what = record.outcome
    ? `its ${record.step ?? 'apply'} of r${record.revision ?? '?'} ended with exit ${record.outcome.code}`
    : record.running
      ? `its ${record.step ?? 'apply'} of r${record.revision ?? '?'} is running (pid ${record.pid ?? '?'})`
      : record.launched
        ? 'its apply was started'
        : 'its apply has not started';
  return `${who}, taken ${record.takenAt ?? '?'}; ${what}`;
}
