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
 * A file the store cannot write now (disk full, read-only, gone): retryable, since until it is written nothing moves
 * on unaudited, and counted as an `unwritable` write failure. For a record and a checkpoint alike.
 */
export function fileUnwritable(path: string, err: unknown): ApplicationFailure {
  countAuditWriteFailure('unwritable');
  return ApplicationFailure.create({
    type: 'AuditUnwritable',
    message: `cannot write ${path}: ${(err as Error).message}`,
    nonRetryable: false,
    details: [{ file: path, code: (err as NodeJS.ErrnoException).code ?? null }],
  });
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
