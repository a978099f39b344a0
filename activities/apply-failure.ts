import { ApplicationFailure } from '@temporalio/common';
import { ApplyLockHeld, EnvelopeRejected } from './apply-errors';
import { StepFailed, TransportError } from './transport/errors';

/**
 * A device-step error as the Temporal failure the rollout's workflows read (their type, and whether it is retried):
 * only transport trouble that may pass is retried. Null for an error that is none of these (it fails as it is).
 * One mapping for the worker's apply and for a gateway that completes an agent device's apply (gateway/answers.ts).
 */
export function applyFailureOf(err: unknown): ApplicationFailure | null {
  if (err instanceof TransportError)
    return ApplicationFailure.create({
      type: `Transport.${err.kind}`,
      message: err.message,
      nonRetryable: !err.retryable,
    });
  if (err instanceof EnvelopeRejected)
    return ApplicationFailure.create({
      type: 'EnvelopeRejected',
      message: err.message,
      nonRetryable: true,
      details: [{ reason: err.reason }],
    });
  if (err instanceof ApplyLockHeld)
    return ApplicationFailure.create({
      type: 'ApplyLockHeld',
      message: err.message,
      nonRetryable: true,
      details: [{ code: 'CONFLICT', holder: err.record.holder }],
    });
  if (err instanceof StepFailed)
    return ApplicationFailure.create({
      type: 'StepFailed',
      message: err.message,
      nonRetryable: true,
      details: [{ step: err.step, code: err.result.code }],
    });
  return null;
}
