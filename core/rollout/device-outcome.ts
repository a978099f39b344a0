import { dependencyBackoffMs, waitingReason, type Dependency } from '../dependencies';
import { stepState, type DeviceSnapshot, type DeviceState } from '../rollout-state';
import { NOT_FOR_ME, NOT_STARTED } from './outcome';
import { IN_PLACE_REASON } from './revert';

/**
 * What one device's apply (or rollback) came to, as a value (Nomad's deploymentwatcher style: decide,
 * then act once): the device runner (workflows/device-runner.ts) asks `deviceOutcome` and applies the
 * answer in one place. Pure: the activity's answer and the run's settings in, the device's next state,
 * its place in compensation and the failure tally out.
 */

/** What an apply activity answers when it returns (device/steps.ts `ApplyResult.outcome`). */
export type ApplyOutcome = 'applied' | 'already-applied' | 'dependency-unmet' | 'offline' | 'ahead';

/** How a device's apply activity ended: it answered, it failed, or the rollout was cancelled under it. */
export type ApplyAnswer =
  | {
      kind: 'answered';
      outcome: ApplyOutcome;
      detail?: string;
      unmet?: readonly Dependency[];
      /** The answer carried the device's receipt, verified by the worker as it arrived (core/receipt.ts). */
      proven?: boolean;
      /** Why a receipt was missing or refused, when the worker said. */
      receiptProblem?: string;
    }
  /** `failureType`: the type of the first ApplicationFailure in the chain; `message`: its innermost message. */
  | { kind: 'failed'; failureType?: string; message: string }
  | { kind: 'cancelled' };

/** How a run reads its devices' answers (the parts of workflows/device-runner.ts `DeviceRunOptions` that matter). */
export interface AnswerReading {
  mode: 'apply' | 'rollback';
  /** A non-provable revision can only ever reach `claimed`: its verify cannot read the fact back. */
  provable: boolean;
  offline: 'skip' | 'wait' | 'fail';
  /** Applies carry `reportOffline` (patch `offline-at-apply`): an `offline` answer is believed. */
  reportOffline: boolean;
  /** Applies carry `aheadAbove` (patch `ahead-at-apply`): an `ahead` answer is believed. */
  aheadAtApply: boolean;
  /** The profiles the rollout waits for (the spec's `after`), if any. */
  after?: readonly Dependency[];
  /** The spec's `requireReceipts`: an apply's answer counts only with the device's verified receipt. */
  requireReceipts?: boolean;
}

/** The reason of a device whose answer came without a receipt the worker verified, under `requireReceipts`. */
export const NO_RECEIPT = 'NO_RECEIPT: the device sent no receipt the worker could verify (requireReceipts)';

/**
 * The retired patches (workflows/patches.ts, deprecated in r10) an answer was read under, named by what
 * each decided: `profileOrdering` (a `dependency-unmet` answer waits and retries), `refusedUntouched` (a
 * device refused before any command ran is out of compensation), `inPlaceUntouched` (a device found in
 * place is out of compensation). The runner records each one's deprecated marker where it asked the patch.
 */
export type AnswerPatch = 'profileOrdering' | 'refusedUntouched' | 'inPlaceUntouched';

/** The retired patch this answer was read under (at most one), exactly where the runner asked it. */
export function answerPatchAsked(answer: ApplyAnswer, reading: AnswerReading): AnswerPatch | undefined {
  if (answer.kind === 'failed')
    return reading.mode === 'apply' && REFUSED_BEFORE_RUNNING.has(answer.failureType ?? '')
      ? 'refusedUntouched'
      : undefined;
  if (answer.kind !== 'answered') return undefined;
  if (answer.outcome === 'offline' && reading.reportOffline) return undefined;
  if (answer.outcome === 'ahead' && reading.aheadAtApply) return undefined;
  if (answer.outcome === 'dependency-unmet' && reading.after?.length) return 'profileOrdering';
  return answer.outcome === 'already-applied' && reading.mode === 'apply' ? 'inPlaceUntouched' : undefined;
}

/**
 * Failures that happen before any command of ours runs on the device (the worker or the device said no
 * first): the envelope, the apply lock, the host key, the login, the transport's own settings.
 */
export const REFUSED_BEFORE_RUNNING: ReadonlySet<string> = new Set([
  'EnvelopeRejected',
  'ApplyLockHeld',
  'Transport.host-key',
  'Transport.auth',
  'Transport.config',
]);

/**
 * What an answer means for the run. Every answer frees the device's slot (a slot is held only while its
 * activity runs); a device that waits takes a slot again when it retries.
 */
export interface DeviceOutcome {
  /** The state the device shows now, and why. */
  state: DeviceState;
  reason?: string;
  /**
   * Whether something of this rollout's may have run on it, so compensation must undo it. A device not
   * touched is forgotten from the run's started list: offline or ahead at first contact, waiting for a
   * dependency, refused before running, found in place.
   */
  touched: boolean;
  /** How it counts for the phase's failure gate; absent: not counted (best-effort, skipped, waiting, cancelled). */
  counted?: 'succeeded' | 'failed';
  /** The failure gate is read once it ended: a required device of an apply that ended (did not wait, was not cancelled). */
  readsGate: boolean;
  /** A dependency is unmet: wait this long (then for a free slot, no pause, an open window) and try again. */
  retryAfterMs?: number;
  /** The rollout was cancelled mid-apply: the cancellation goes on up once the state is set. */
  cancelled?: true;
}

/** The device's place in the run: whether it is best-effort, and which attempt (1-based) answered. */
export interface AnsweringDevice {
  bestEffort: boolean;
  attempt: number;
}

/** The state a run's devices take while they run, when they end well and when they fail. */
export function runStates(reading: Pick<AnswerReading, 'mode' | 'provable'>): {
  busy: DeviceState;
  ok: DeviceState;
  bad: DeviceState;
} {
  return reading.mode === 'apply'
    ? { busy: 'applying', ok: reading.provable ? 'applied' : 'claimed', bad: 'failed' }
    : { busy: 'rolling-back', ok: 'rolled-back', bad: 'rollback-failed' };
}

/** The reason of a waiting device that goes back to pending because the run stopped before its retry. */
export function waitGivenUpReason(waitingFor: string): string {
  return `${NOT_STARTED} was ${waitingFor}`;
}

/** What a device's answer means: its next state, whether compensation must undo it, how it counts, whether it retries. */
export function deviceOutcome(answer: ApplyAnswer, device: AnsweringDevice, reading: AnswerReading): DeviceOutcome {
  const { ok, bad } = runStates(reading);
  const verb = reading.mode === 'apply' ? 'apply' : 'rollback';
  const required = !device.bestEffort;
  const readsGate = required && reading.mode === 'apply';
  if (answer.kind === 'cancelled')
    return { state: bad, reason: `${verb} cancelled mid-flight`, touched: true, readsGate: false, cancelled: true };
  if (answer.kind === 'failed') {
    // Refused before anything ran on it: the device was not changed, so there is nothing to put back.
    const refused = reading.mode === 'apply' && REFUSED_BEFORE_RUNNING.has(answer.failureType ?? '');
    return {
      state: bad,
      reason: `${device.bestEffort ? 'best-effort, not counted: ' : ''}${answer.message}`,
      touched: !refused,
      ...(required ? { counted: 'failed' as const } : {}),
      readsGate,
    };
  }
  if (answer.outcome === 'offline' && reading.reportOffline) {
    // Unreachable at first contact: nothing ran on it, so it is not changed; the offline policy says
    // whether it is skipped (not counted) or failed (counted).
    const failed = reading.offline === 'fail';
    return {
      state: failed ? bad : 'skipped',
      reason: `offline at apply: ${answer.detail ?? 'unreachable'}`,
      touched: false,
      ...(failed && required ? { counted: 'failed' as const } : {}),
      readsGate,
    };
  }
  if (answer.outcome === 'ahead' && reading.aheadAtApply) {
    // Ahead of the rollout (its marker above the target): nothing ran, it is not changed and not
    // counted, as the plan's not-for-me "ahead" rule said when the snapshot read every marker.
    return {
      state: 'skipped',
      reason: `${NOT_FOR_ME} ahead: ${answer.detail ?? 'the device is above the target'}`,
      touched: false,
      readsGate,
    };
  }
  if (answer.outcome === 'dependency-unmet' && reading.after?.length) {
    // Nothing ran on the device: it is not changed and not counted, and its slot is free for others.
    const unmet = answer.unmet?.length ? answer.unmet : reading.after;
    return {
      state: 'waiting',
      reason: `${waitingReason(unmet)}${answer.detail ? ` (${answer.detail})` : ''}`,
      touched: false,
      readsGate: false,
      retryAfterMs: dependencyBackoffMs(device.attempt),
    };
  }
  // A dependency-unmet answer without `after` reads as applied (and offline, ahead without their settings).
  const inPlace = answer.outcome === 'already-applied';
  const untouched = inPlace && reading.mode === 'apply';
  if (reading.requireReceipts && reading.mode === 'apply' && !answer.proven)
    // Proof was asked for: the control plane's word alone is not done. Counted failed, so the gates and the
    // counts agree with the receipts; an apply that ran is put back by compensation like any failed one.
    return {
      state: bad,
      reason: `${NO_RECEIPT}${answer.receiptProblem ? `: ${answer.receiptProblem}` : ''}`,
      touched: !untouched,
      ...(required ? { counted: 'failed' as const } : {}),
      readsGate,
    };
  return {
    state: ok,
    ...(inPlace ? { reason: IN_PLACE_REASON } : {}),
    touched: !untouched,
    ...(required ? { counted: 'succeeded' as const } : {}),
    readsGate,
  };
}

/** A device the health gate measures: changed by this rollout (applied or claimed) and not best-effort. */
export function isHealthTarget(d: Pick<DeviceSnapshot, 'updateClass'>, state: DeviceState | undefined): boolean {
  return d.updateClass !== 'best-effort' && (state === 'applied' || state === 'claimed');
}

/** How the model words a device skipped because it could not be reached (at snapshot or at its apply). */
const OFFLINE_SKIP = /^offline at (snapshot|apply)\b/;

/**
 * An agent device a completed rollout leaves its revision to as desired state: skipped as offline (at
 * snapshot or at its apply) — never one found ahead, not-for-me or never started — not left-behind, not
 * held by a node-down verdict, and not already at the target.
 */
export function convergeCandidate(
  d: Pick<DeviceSnapshot, 'transport' | 'updateClass' | 'nodeDown' | 'current'>,
  state: DeviceState | undefined,
  reason: string | undefined,
  target: number,
): boolean {
  return (
    d.transport === 'agent' &&
    state !== undefined &&
    stepState(state) === 'skipped' &&
    OFFLINE_SKIP.test(reason ?? '') &&
    d.updateClass !== 'left-behind' &&
    !d.nodeDown?.holds &&
    d.current !== target
  );
}
