/**
 * The failure gate (step 4 of a rollout, docs/architecture.md): `failed / (succeeded + failed)` above `maxFailureRatio` in a
 * phase trips the failure policy. While the phase runs, a minimum sample keeps one early failure in a
 * big phase from tripping it; once the phase is done, the whole phase is the sample (so a failed canary
 * of one device always trips it).
 */
export interface FailureTally {
  succeeded: number;
  failed: number;
}

export function failureGateTripped(
  tally: FailureTally,
  opts: { maxFailureRatio: number; minSample: number },
  phaseComplete: boolean,
): boolean {
  const sample = tally.succeeded + tally.failed;
  if (sample === 0 || tally.failed === 0) return false;
  if (!phaseComplete && sample < opts.minSample) return false;
  return tally.failed / sample > opts.maxFailureRatio;
}
