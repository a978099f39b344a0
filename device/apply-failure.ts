import { ApplicationFailure, ApplicationFailureCategory } from '@temporalio/common';
import { ApplyLockHeld, EnvelopeRejected } from './apply-errors';
import { StepFailed, TransportError } from './transport/errors';

/**
 * A device-step error as the Temporal failure the rollout's workflows read (their type, and whether it is retried):
 * only transport trouble that may pass is retried. Null for an error that is none of these (it fails as it is).
 * One mapping for the worker's apply and for a gateway that completes an agent device's apply (gateway/answers.ts).
 *
 * Each is an expected outcome of a device, not a fault of the worker: BENIGN, so the SDK logs it at DEBUG
 * instead of a WARN with the whole failure object (the apply activity has said it in one line already);
 * an error that is none of these is still logged whole.
 */
export function applyFailureOf(err: unknown): ApplicationFailure | null {
  const failure = (type: string, message: string, nonRetryable: boolean, details?: unknown[]) =>
    ApplicationFailure.create({
      type,
      message,
      nonRetryable,
      ...(details ? { details } : {}),
      category: ApplicationFailureCategory.BENIGN,
    });
  if (err instanceof TransportError) return failure(`Transport.${err.kind}`, err.message, !err.retryable);
  if (err instanceof EnvelopeRejected)
    return failure('EnvelopeRejected', err.message, true, [{ reason: err.reason, ...carriedReceipt(err) }]);
  if (err instanceof ApplyLockHeld)
    return failure('ApplyLockHeld', err.message, true, [{ code: 'CONFLICT', holder: err.record.holder }]);
  if (err instanceof StepFailed)
    return failure('StepFailed', err.message, true, [
      { step: err.step, code: err.result.code, ...carriedReceipt(err) },
    ]);
  return null;
}

/**
 * The device's receipt of a refusal or a failed step (checked as it arrived: ./receipt-check.ts), or why none passed,
 * as the answer's error carries it (`receipt` / `receiptProblem` set on it: Object.assign(err, …)); the failure's
 * details[0] keep them beside the reason, as a success's ApplyResult does.
 */
export interface CarriedReceipt {
  receipt?: string;
  /** The apply activity's id: the request the receipt answers (its nonce is derived from it). */
  request?: string;
  receiptProblem?: string;
}

function carriedReceipt(err: Error): CarriedReceipt {
  const { receipt, request, receiptProblem } = err as CarriedReceipt;
  return {
    ...(typeof receipt === 'string' ? { receipt } : {}),
    ...(typeof receipt === 'string' && typeof request === 'string' ? { request } : {}),
    ...(typeof receiptProblem === 'string' ? { receiptProblem } : {}),
  };
}
