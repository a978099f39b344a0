import type { Context } from '@temporalio/activity';

/** The longest a device apply stays quiet after it starts (well inside its 6 s heartbeat timeout). */
export const QUIET_START_MS = 2_000;

/**
 * An activity's heartbeat that stays quiet for its first seconds. The SDK sends the first heartbeat at
 * once and throttles the rest, so every device apply cost the server one heartbeat write as it
 * started, though most applies end long before their heartbeat timeout. Beats in the first
 * `min(QUIET_START_MS, heartbeatTimeout ÷ 3)` only keep their detail; the first beat after that goes
 * out with the latest one. A worker that dies is still noticed by the heartbeat timeout, counted from
 * the start, and a cancel still arrives with the first heartbeat's answer (sooner than before, when it
 * waited for the second, throttled one).
 */
export function quietStartHeartbeat(
  ctx: Pick<Context, 'heartbeat' | 'info'>,
  now: () => number = Date.now,
): (detail: unknown) => void {
  const startedAt = now();
  const timeout = ctx.info.heartbeatTimeoutMs;
  const quietMs = timeout ? Math.min(QUIET_START_MS, Math.floor(timeout / 3)) : QUIET_START_MS;
  return (detail) => {
    if (now() - startedAt >= quietMs) ctx.heartbeat(detail);
  };
}
