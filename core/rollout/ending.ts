import type { AuditEventName } from '../audit';
import type { GateOutcome } from '../health';
import type { RolloutState } from '../rollout-state';
import { deadlineSkipReason, type DeadlineKind } from './deadline';
import {
  abortOutcome,
  cancelOutcome,
  rolledBackSkipReason,
  stagesClosedBy,
  type AbortRequest,
  type FailureTrigger,
} from './policy';
import type { PhaseStage } from './status';

/**
 * How a rollout ends, decided once from what ended it (docs/architecture.md, "Endings"). The workflow's
 * one `end()` stage carries an Ending out, in one order for every cause (ENDING_ORDER); this file only
 * decides what each part is. Pure: no Temporal, no clock.
 */

/** What ended the rollout. */
export type EndingCause =
  /** `reason`: what the end record says of a completion, e.g. the alerts of a watch under `onFail: alert`. */
  | { kind: 'completed'; reason?: string }
  /** An operator's abort, or a deadline under `onDeadline: abort` (an abort by wavegate, without rollback). */
  | { kind: 'abort'; abort: AbortRequest }
  /** A deadline under `onDeadline: rollback`: recorded on the model by the watcher, ended by the story. */
  | { kind: 'deadline-rollback'; deadline: DeadlineKind; reason: string }
  /** The failure policy chose to roll back: after the failure gate tripped, or a failed health gate. */
  | { kind: 'failure-rollback'; trigger: FailureTrigger; evidence: string; phaseName: string }
  /** A check of the watch after promotion failed under `onFail: revert` (core/rollout/watch.ts): `reason` says which, where, what it read. */
  | { kind: 'watch-revert'; reason: string }
  | { kind: 'cancel' }
  /** A nightly canary run's verdict: the canary is kept on the revision, or put back. */
  | { kind: 'canary-verdict'; verdict: GateOutcome; keep: boolean }
  | { kind: 'canary-nothing-to-test' }
  /** Anything the story did not expect (a bug, an activity that failed past its retries). */
  | { kind: 'error'; message: string };

/** The parts of an ending, each carried out by end() when the ending has it. */
export type EndingPart = 'close' | 'skip' | 'compensate' | 'finish';

/**
 * The one order: close the phases still waiting, name the devices never started, put back what this
 * rollout changed, then the final state and record. An abort with rollback, a deadline rollback, a
 * failure-policy rollback and a cancel leave identically ordered audit trails.
 */
export const ENDING_ORDER: readonly EndingPart[] = ['close', 'skip', 'compensate', 'finish'];

export interface Ending {
  cause: EndingCause['kind'];
  /** Phases in these stages close as `stopped` (null: none). */
  closes: ReadonlySet<PhaseStage> | null;
  /** Devices still pending become not-started with this reason (null: none are skipped). */
  skips: { reason: string } | null;
  /** Put back every device this rollout changed, last changed first (null: nothing is put back). */
  compensation: { trigger: string; by: string } | null;
  state: RolloutState;
  /** The last audit record. */
  event: AuditEventName;
  reason: string | null;
  /** Who the last record names (absent: wavegate). */
  by?: string;
  /**
   * The rollout failed for a reason the story did not expect, perhaps in the audit trail itself: its last
   * record is tried but not waited for, and the status keeps the phase it failed in.
   */
  failed: boolean;
  /**
   * The order executions recorded before the one ending (patch `one-ending`) carried this cause out in;
   * end() follows it only when replaying them. Retire with the patch.
   */
  legacyOrder: readonly EndingPart[];
}

const NO_PARTS = { closes: null, skips: null, compensation: null, failed: false } as const;

/** An ending that stops the rollout early: it closes the phases `stop` closes and names the devices never started. */
function stopping(
  cause: EndingCause['kind'],
  stop: 'abort' | 'cancel',
  skipReason: string,
  rest: Pick<Ending, 'compensation' | 'state' | 'event' | 'reason' | 'legacyOrder' | 'by'>,
): Ending {
  return { cause, ...NO_PARTS, closes: stagesClosedBy(stop), skips: { reason: skipReason }, ...rest };
}

/** A rollback wavegate decided (a deadline, the failure policy): it puts back what it changed and ends rolled-back. */
function rollingBack(
  cause: EndingCause['kind'],
  skipReason: string,
  trigger: string,
  reason: string,
  legacyOrder: readonly EndingPart[],
): Ending {
  return stopping(cause, 'abort', skipReason, {
    compensation: { trigger, by: 'wavegate' },
    state: 'rolled-back',
    event: 'rollout.failed',
    reason,
    legacyOrder,
  });
}

/** The ending for a cause. */
export function endingOf(cause: EndingCause): Ending {
  switch (cause.kind) {
    case 'completed':
      return {
        cause: cause.kind,
        ...NO_PARTS,
        state: 'completed',
        event: 'rollout.completed',
        reason: cause.reason ?? null,
        legacyOrder: ['finish'],
      };
    case 'watch-revert':
      // Only executions with a watch reach it, all after the one ending: its legacy order is never taken.
      return rollingBack(
        cause.kind,
        'not started: rolled back after its watch failed',
        `watch failed: ${cause.reason}`,
        `watch failed: ${cause.reason}`,
        ['close', 'skip', 'compensate', 'finish'],
      );
    case 'abort': {
      const { abort } = cause;
      const outcome = abortOutcome(abort);
      return stopping(cause.kind, 'abort', outcome.skipReason, {
        compensation: outcome.compensate ? { trigger: outcome.trigger, by: abort.by } : null,
        state: 'aborted',
        event: outcome.event,
        reason: abort.reason,
        legacyOrder: ['close', 'skip', 'compensate', 'finish'],
      });
    }
    case 'deadline-rollback':
      // workflows/deadlines.ts rollBack() put back first, then named the devices never started.
      return rollingBack(cause.kind, deadlineSkipReason(cause.deadline), cause.reason, cause.reason, [
        'close',
        'compensate',
        'skip',
        'finish',
      ]);
    case 'failure-rollback': {
      // The failed phase keeps `failed`; later phases close as an abort closes them.
      const reason =
        cause.trigger === 'failure-gate'
          ? `failure gate: ${cause.evidence}`
          : `health gate failed after ${cause.phaseName}`;
      // RolloutStages.onFailure put back, then named the devices never started; later phases stayed `pending`.
      return rollingBack(
        cause.kind,
        rolledBackSkipReason(cause.trigger),
        `${cause.trigger}: ${cause.evidence}`,
        reason,
        ['compensate', 'skip', 'finish'],
      );
    }
    case 'cancel': {
      const cancel = cancelOutcome();
      return stopping(cause.kind, 'cancel', cancel.skipReason, {
        compensation: { trigger: cancel.trigger, by: cancel.by },
        state: 'cancelled',
        event: cancel.event,
        reason: null,
        by: cancel.by,
        legacyOrder: ['close', 'skip', 'compensate', 'finish'],
      });
    }
    case 'canary-verdict':
      // The run closed its later phases and named their devices when it started (only the canary phase runs).
      return {
        cause: cause.kind,
        ...NO_PARTS,
        compensation: cause.keep
          ? null
          : { trigger: `canary verdict ${cause.verdict}: put the canary back`, by: 'wavegate' },
        state: 'completed',
        event: 'rollout.completed',
        reason: `canary verdict: ${cause.verdict}`,
        legacyOrder: ['compensate', 'finish'],
      };
    case 'canary-nothing-to-test':
      return {
        cause: cause.kind,
        ...NO_PARTS,
        state: 'completed',
        event: 'rollout.completed',
        reason: 'canary: nothing to test',
        legacyOrder: ['finish'],
      };
    case 'error':
      // No compensation: an unexpected error says the workflow's own view of the devices may be wrong (an
      // activity failed past its retries, a bug), and putting devices back on a wrong view could change
      // devices this rollout never touched or undo a half-known state. The devices stay as they are, named
      // in the status and the audit; `wavegate revert` or `converge` is the operator's deliberate next step.
      return {
        cause: cause.kind,
        ...NO_PARTS,
        state: 'failed',
        event: 'rollout.failed',
        reason: cause.message,
        failed: true,
        legacyOrder: ['finish'],
      };
  }
}

/** What a stopped rollout's abort request was: an abort (an operator's, or a deadline's without rollback), or a deadline's rollback. */
export function stopCause(abort: AbortRequest): EndingCause {
  return abort.deadline
    ? { kind: 'deadline-rollback', deadline: abort.deadline, reason: abort.reason }
    : { kind: 'abort', abort };
}

/** The parts end() carries out for an ending, in order: the one order, or for executions recorded before it, the cause's own. */
export function endingParts(ending: Ending, oneOrder: boolean): EndingPart[] {
  const has: Record<EndingPart, boolean> = {
    close: ending.closes !== null,
    skip: ending.skips !== null,
    compensate: ending.compensation !== null,
    finish: true,
  };
  return (oneOrder ? ENDING_ORDER : ending.legacyOrder).filter((part) => has[part]);
}
