import { verifyEnvelope } from '../../core/signing';
import { verifySignatureMemoized } from '../../device/signature-memo';
import { EnvelopeRejected, loadWorkerTrust } from '../../device/steps';
import type { HealthCheckInput, SignedHealth } from './types';

/** A raw device command an input from an old client carries (`runtimes[].health`, `metrics.errorRate.command`), or undefined. */
export function rawDeviceCommand(input: HealthCheckInput): string | undefined {
  const runtimes = input.runtimes;
  if (Array.isArray(runtimes) ? runtimes.length > 0 : runtimes !== undefined && runtimes !== null)
    return 'runtimes[].health';
  const source = input.metrics?.errorRate as Record<string, unknown> | undefined;
  if (source && typeof source === 'object' && 'command' in source) return 'metrics.errorRate.command';
  return undefined;
}

export type OpenedHealth = { ok: true; signed: SignedHealth } | { ok: false; evidence: string };

/**
 * The revision's signed health section, from the envelope verified against this worker's own pins
 * (`loadWorkerTrust` + `verifyEnvelope`, as an apply verifies its steps). Never the input's word for it.
 */
export function openSignedHealth(input: HealthCheckInput, profilesRoot: string, now: () => number): OpenedHealth {
  const what = `${input.profile ?? '(no profile)'} r${input.revision ?? '?'}`;
  if (!input.envelope) {
    return {
      ok: false,
      evidence: `refused: this check runs commands on devices, and those are read only from the target revision's signed envelope, which the input does not carry (an unsigned profile, or a client from before signed health checks); nothing was run`,
    };
  }
  try {
    if (typeof input.profile !== 'string')
      throw new EnvelopeRejected('MALFORMED', 'the input names no profile to load pins for');
    const trust = loadWorkerTrust(profilesRoot, input.profile);
    if (!trust)
      throw new EnvelopeRejected(
        'NO_TRUST',
        `this worker has no pins for profile "${input.profile}" (no trust.yaml) to verify the envelope against`,
      );
    const verdict = verifyEnvelope(input.envelope, trust, { now: now(), verifySignature: verifySignatureMemoized });
    if (!verdict.ok) throw new EnvelopeRejected(verdict.reason, verdict.message);
    if (verdict.revision.profile !== input.profile)
      throw new EnvelopeRejected(
        'WRONG_PROFILE',
        `the envelope is a revision of "${verdict.revision.profile}", not of "${input.profile}"`,
      );
    if (input.revision !== undefined && verdict.revision.revision !== input.revision)
      throw new EnvelopeRejected(
        'WRONG_REVISION',
        `the envelope holds r${verdict.revision.revision}, the input says r${input.revision}`,
      );
    return {
      ok: true,
      signed: {
        revision: verdict.revision.revision,
        ...(verdict.revision.health ? { health: verdict.revision.health } : {}),
        verify: verdict.revision.verify,
      },
    };
  } catch (err) {
    const reason =
      err instanceof EnvelopeRejected
        ? `${err.reason}: ${err.message.replace(/^EnvelopeRejected \([^)]*\): /, '')}`
        : (err as Error).message;
    return {
      ok: false,
      evidence: `refused: the envelope of ${what} does not verify against this worker's pins (${reason}); nothing was run`,
    };
  }
}
