import type { AuditEventName } from '../audit';
import { failureGateTripped, type FailureTally } from '../failure-gate';
import type { GateOutcome } from '../health';
import type { RolloutSpec } from '../spec';
import type { DeadlineKind } from './deadline';
import type { CanaryVerdict, PhaseStage } from './status';

/**
 * The rollout's decisions, as pure functions of what happened and the spec (see docs/architecture.md,
 * "Where each decision lives"). The workflow asks these what to do and only carries the answer out,
 * so every branch is testable without Temporal.
 */

/** What can trip the failure policy: the phase's failure gate, or a failed health gate. */
export type FailureTrigger = 'failure-gate' | 'healthGate-fail';

/** Roll back when `rollback.on` names this trigger (or `both`); otherwise pause for an operator. */
export function failureResponse(
  trigger: FailureTrigger,
  rollbackOn: RolloutSpec['rollback']['on'],
): 'rollback' | 'pause' {
  return rollbackOn === 'both' || rollbackOn === trigger ? 'rollback' : 'pause';
}

export interface FailureGateVerdict {
  tripped: boolean;
  /** The phase's tally, with devices that failed for being offline at snapshot counted as failures. */
  tally: FailureTally;
  evidence: string;
}

/**
 * The failure gate over a finished phase. The batch already tripped it (while running, or once complete)
 * from the devices it applied; devices marked failed at snapshot (`offline: fail`) never ran, so they
 * are added here and the whole phase is judged with the one formula in core/failure-gate.ts.
 */
export function phaseFailureGate(
  phaseName: string,
  batch: { tally: FailureTally; tripped: boolean },
  offlineFailed: number,
  policy: Pick<RolloutSpec, 'maxFailureRatio' | 'minSample'>,
): FailureGateVerdict {
  const tally = { succeeded: batch.tally.succeeded, failed: batch.tally.failed + offlineFailed };
  const tripped = batch.tripped || (offlineFailed > 0 && failureGateTripped(tally, policy, true));
  const evidence = `${tally.failed} of ${tally.succeeded + tally.failed} devices failed in ${phaseName} (max ratio ${policy.maxFailureRatio})`;
  return { tripped, tally, evidence };
}

/** What a health gate's outcome leads to, and the audit event that records it. */
export type HealthGateDecision =
  | { next: 'advance'; stage: 'passed'; event: 'gate.passed' }
  /** The failure policy decides: roll back or pause (see failureResponse with `healthGate-fail`). */
  | { next: 'fail'; stage: 'failed'; event: 'gate.failed' | 'gate.inconclusive' }
  /** Inconclusive never advances: hold for an operator, then check again after a resume. */
  | { next: 'hold'; stage: 'inconclusive'; event: 'gate.inconclusive' };

export function healthGateDecision(
  outcome: GateOutcome,
  onInconclusive: RolloutSpec['onInconclusive'],
): HealthGateDecision {
  if (outcome === 'pass') return { next: 'advance', stage: 'passed', event: 'gate.passed' };
  if (outcome === 'fail') return { next: 'fail', stage: 'failed', event: 'gate.failed' };
  if (onInconclusive === 'fail') return { next: 'fail', stage: 'failed', event: 'gate.inconclusive' };
  return { next: 'hold', stage: 'inconclusive', event: 'gate.inconclusive' };
}

/**
 * A canary whose apply did not fully succeed fails without waiting its gate: there is nothing healthy to
 * measure. Null means the canary applied everywhere and the gate decides.
 */
export function canaryApplyVerdict(tally: FailureTally): { verdict: 'fail'; evidence: string[] } | null {
  if (tally.failed > 0 || tally.succeeded === 0) {
    return {
      verdict: 'fail',
      evidence: [`${tally.failed} of ${tally.failed + tally.succeeded} canary devices failed to apply`],
    };
  }
  return null;
}

/** The canary phase's final stage for its verdict. */
export function canaryStage(verdict: GateOutcome): PhaseStage {
  return verdict === 'pass' ? 'passed' : verdict === 'fail' ? 'failed' : 'inconclusive';
}

/** A canary's verdict when no device needs the revision: nothing was tested, nothing touched. */
export const NOTHING_TO_TEST: CanaryVerdict = 'nothing-to-test';

/**
 * Which waiting phases an abort or a cancel closes as `stopped`. A cancel also closes the phase that was
 * applying (its batch was interrupted); an abort lets that phase's batch end first and closes it itself.
 */
export function stagesClosedBy(stop: 'abort' | 'cancel'): ReadonlySet<PhaseStage> {
  return stop === 'cancel' ? CLOSED_BY_CANCEL : CLOSED_BY_ABORT;
}
const CLOSED_BY_ABORT: ReadonlySet<PhaseStage> = new Set(['pending', 'awaiting-approval', 'gate']);
const CLOSED_BY_CANCEL: ReadonlySet<PhaseStage> = new Set(['pending', 'awaiting-approval', 'gate', 'applying']);

export interface AbortRequest {
  rollback: boolean;
  reason: string;
  by: string;
  /** Set when a deadline under `onDeadline: rollback` stopped the rollout (core/rollout/ending.ts ends it rolled back). */
  deadline?: DeadlineKind;
}

/** How an accepted abort ends the rollout: compensate when asked (the default), then `aborted`. */
export function abortOutcome(abort: AbortRequest): {
  compensate: boolean;
  trigger: string;
  skipReason: string;
  event: AuditEventName;
} {
  // The abort was recorded when it was accepted (rollout.aborted, with who and why): the end is its own record.
  return {
    compensate: abort.rollback,
    trigger: `abort: ${abort.reason}`,
    skipReason: `not started: aborted by ${abort.by}`,
    event: 'rollout.ended',
  };
}

/** A cancel (e.g. Request Cancellation in the Web UI) always puts every changed device back. */
export function cancelOutcome(): {
  compensate: true;
  trigger: string;
  skipReason: string;
  by: string;
  event: AuditEventName;
} {
  return {
    compensate: true,
    trigger: 'cancelled',
    skipReason: 'not started: rollout cancelled',
    by: 'temporal-cancel',
    event: 'rollout.cancelled',
  };
}

/** Why the rollout paused when the failure policy chose to hold rather than roll back. */
export function failurePauseReason(trigger: FailureTrigger, evidence: string): string {
  return `${trigger}: ${evidence} — resume to continue, or abort`;
}

/** Why devices that never started are skipped after the failure policy rolled back. */
export function rolledBackSkipReason(trigger: FailureTrigger): string {
  return `not started: rolled back after ${trigger}`;
}
