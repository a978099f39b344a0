import type { CheckResult } from '../health';

/**
 * The re-verify (docs/formats.md, the `verify` health check): a health check, at a phase's gate or a
 * watch's check, that runs the target revision's signed `verify` again on every changed device. A device
 * that fails it no longer holds what it confirmed: its state flips to `failed` at that check (the rollout's
 * records say so), and a later phase does not start while one is flipped: the flipped devices are verified
 * again first, and the rollout pauses while any still fails. Pure; workflows/reverify.ts carries it out.
 */

/** The check's text (and its result's name, core/health.ts formatHealthCheck). */
export const REVERIFY_CHECK = 'verify';

/** The devices a failed re-verify named, each once; none when there was no re-verify or it passed. */
export function reverifyFailed(results: readonly CheckResult[]): string[] {
  const named = new Set<string>();
  for (const r of results)
    if (r.check === REVERIFY_CHECK && r.outcome === 'fail') for (const d of r.failedDevices ?? []) named.add(d);
  return [...named];
}

/** Why a device flipped: where the re-verify ran and what it read there. */
export function flipReason(where: string, results: readonly CheckResult[]): string {
  const evidence = results.find((r) => r.check === REVERIFY_CHECK && r.outcome === 'fail')?.evidence ?? '';
  return `re-verify failed at ${where}: ${evidence}`.slice(0, 500);
}

/** Why a later phase waits: the devices still flipped, and what moves it on. */
export function unverifiedHoldReason(phase: string, flipped: readonly string[]): string {
  const shown =
    flipped.length > 5 ? `${flipped.slice(0, 5).join(', ')} and ${flipped.length - 5} more` : flipped.join(', ');
  return `re-verify: ${shown} no longer verif${flipped.length === 1 ? 'ies' : 'y'} the target revision; ${phase} does not start while a device that failed its re-verify is in this rollout — fix it and resume (it is verified again), or abort`;
}
