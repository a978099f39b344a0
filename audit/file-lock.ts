import { closeSync, openSync, readFileSync, statSync, unlinkSync, writeSync } from 'node:fs';
import { hostname } from 'node:os';
import { ApplicationFailure } from '@temporalio/common';

/** A lock older than this whose holder cannot be checked is taken to be left by a crashed writer. */
const STALE_LOCK_MS = 30_000;
const LOCK_WAIT_MS = 2_000;

function lockHolderIsGone(lockPath: string): boolean {
  try {
    const [pid, host] = readFileSync(lockPath, 'utf8').split(' ');
    if (host === hostname() && pid && /^\d+$/.test(pid)) {
      try {
        process.kill(Number(pid), 0);
        return false;
      } catch (err) {
        return (err as NodeJS.ErrnoException).code === 'ESRCH';
      }
    }
    return Date.now() - statSync(lockPath).mtimeMs > STALE_LOCK_MS;
  } catch {
    return false;
  }
}

/**
 * Serialize writers of one file across processes (two workers may both run an attempt of the same append
 * when the first overran its timeout) with an O_EXCL lock file. Inside one process the critical section
 * is synchronous, so it cannot interleave with itself.
 */
export async function withFileLock<T>(path: string, fn: () => T): Promise<T> {
  const lockPath = `${path}.lock`;
  const deadline = Date.now() + LOCK_WAIT_MS;
  for (;;) {
    let fd: number;
    try {
      fd = openSync(lockPath, 'wx', 0o600);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      if (lockHolderIsGone(lockPath)) {
        try {
          unlinkSync(lockPath);
        } catch {
          // another writer cleared it first
        }
        continue;
      }
      if (Date.now() > deadline) {
        throw ApplicationFailure.create({
          type: 'AuditBusy',
          message: `${lockPath} is held by another writer; retrying`,
          nonRetryable: false,
        });
      }
      await new Promise((resolve) => setTimeout(resolve, 10));
      continue;
    }
    try {
      writeSync(fd, `${process.pid} ${hostname()}`);
    } finally {
      closeSync(fd);
    }
    try {
      return fn();
    } finally {
      unlinkSync(lockPath);
    }
  }
}
