import { ApplicationFailure } from '@temporalio/common';
import { WavegateError } from '../core/errors';
import { recordAuditWriteFailure } from '../core/metrics';
import { activityMeter } from './activity-meter';

/** The worker's `wavegate_audit_write_failures{reason}`: counted alike by both stores (none outside an activity). */
export function countAuditWriteFailure(reason: 'unwritable' | 'corrupt'): void {
  const meter = activityMeter();
  if (meter) recordAuditWriteFailure(meter, reason);
}

/**
 * An event or rollout id out of bounds is `AuditInvalid` (non-retryable: a retry sends the same value);
 * anything else is not bad input and is thrown as it is.
 */
export function auditInvalid(err: unknown): never {
  if (err instanceof WavegateError)
    throw ApplicationFailure.create({ type: 'AuditInvalid', message: err.message, nonRetryable: true });
  throw err;
}
