import { WavegateError } from './errors';

/**
 * Rollout ids. Each rollout has an id of its own, `rollout:<profile>:<UTC yyyymmdd-hhmmss>`
 * (a `-<n>` suffix when that second is taken): readable, sorting by start time, and made only of
 * characters that are safe in an audit file name (audit/file.ts percent-encodes `:`), a request
 * id and a Web UI URL (encodeURIComponent). Before per-rollout ids every rollout of a profile was the workflow
 * `rollout:<profile>`, one run after another: such rollouts stay readable (`--run` picks an earlier run).
 *
 * One running rollout per profile is held by the lock workflow `profile-lock:<profile>`
 * (workflows/profile-lock.ts), not by the id. Pure: no I/O, safe in workflow code.
 */

/** The one id every rollout of a profile had before per-rollout ids (and the placeholder intake still fills in). */
export function legacyRolloutId(profile: string): string {
  return `rollout:${profile}`;
}

/** The lock workflow that holds a profile while one of its rollouts runs. */
export function profileLockId(profile: string): string {
  return `profile-lock:${profile}`;
}

/** `rollout:<profile>:20261202-172301` for `now`, with `-<n>` (n ≥ 2) when `attempt` > 1. */
export function newRolloutId(profile: string, now: Date, attempt = 1): string {
  const iso = now.toISOString(); // 2026-12-02T17:23:01.123Z, always UTC
  const stamp = `${iso.slice(0, 4)}${iso.slice(5, 7)}${iso.slice(8, 10)}-${iso.slice(11, 13)}${iso.slice(14, 16)}${iso.slice(17, 19)}`;
  return `rollout:${profile}:${stamp}${attempt > 1 ? `-${attempt}` : ''}`;
}

/** Is this a legacy re-used id (`rollout:<profile>`, every run of the profile under it)? */
export function isLegacyRolloutId(id: string): boolean {
  return /^rollout:[^:]+$/.test(id);
}

/** At most this many characters: a key is a Keyword search attribute and part of a visibility query. */
export const MAX_IDEMPOTENCY_KEY = 200;

/**
 * An idempotency key (`start --key`): 1–200 printable ASCII characters without quotes or backslash, so
 * it can be stored as the WavegateKey search attribute and searched for verbatim. INVALID_INPUT naming
 * `--key` and the value otherwise.
 */
export function checkIdempotencyKey(key: string, field = '--key'): string {
  if (key.length === 0 || key.length > MAX_IDEMPOTENCY_KEY || !/^[\x21-\x7e]+$/.test(key) || /['"\\`]/.test(key)) {
    const shown =
      key.length > 80 ? `${JSON.stringify(key.slice(0, 80))}… (${key.length} characters)` : JSON.stringify(key);
    throw new WavegateError(
      'INVALID_INPUT',
      `${field} ${shown}: an idempotency key is 1-${MAX_IDEMPOTENCY_KEY} printable ASCII characters without spaces, quotes or backslash`,
      { field, value: key },
    );
  }
  return key;
}
