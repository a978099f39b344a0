import type { WavegateErrorCode } from './errors';
import type { Revision } from './revision';
import { bodyDigest, peekBody, verifyEnvelope, type Envelope, type Trust, type VerifyReason } from './signing';

/**
 * The registry's decision, as a pure function (docs/architecture.md, "Signed revisions and the registry"). The entity workflow that
 * holds a profile's registered envelopes calls this and stores `envelope` when the outcome is
 * `registered`; it stores nothing otherwise.
 *
 * - the same body as a stored envelope → `existing`, the stored envelope (idempotent retries);
 * - the envelope must verify against the pins (threshold, signatures, canonical, expiry, digests, the
 *   revision's structure and, unless `contentRules: false`, its signed content rules);
 * - it must belong to the profile (`WRONG_PROFILE`);
 * - the same number with other content → `CONFLICT`;
 * - a number not above every registered one → `NOT_ABOVE_CURRENT` (the channel never moves backwards).
 */
export type RegistryReason = VerifyReason | 'WRONG_PROFILE' | 'CONFLICT';

export interface RegistrationInput {
  /** The profile being registered into. */
  profile: string;
  /** Envelopes already registered for the profile, in any order. */
  registered: readonly Envelope[];
  envelope: unknown;
  trust: Trust;
  /** Epoch milliseconds. */
  now: number;
  /**
   * false only where the registry's update handler re-makes a decision its validator already made
   * (workflows/registry.ts): the handler runs again on every replay, so it must not apply a signed content
   * rule (core/revision.ts, RevisionRules) added after an envelope was accepted; the validator, which never
   * runs on replay, applies them to every new envelope. Default true.
   */
  contentRules?: boolean;
}

export type RegistrationDecision =
  | { outcome: 'registered'; revision: Revision; envelope: Envelope; bodyDigest: string; signers: string[] }
  | { outcome: 'existing'; revision: Revision; envelope: Envelope; bodyDigest: string }
  | {
      outcome: 'refused';
      code: WavegateErrorCode;
      reason: RegistryReason;
      message: string;
      details?: Record<string, unknown>;
    };

function storedNumber(envelope: Envelope): number | undefined {
  const body = peekBody(envelope) as { revision?: unknown } | undefined;
  return typeof body?.revision === 'number' ? body.revision : undefined;
}

export function decideRegistration(input: RegistrationInput): RegistrationDecision {
  const candidate = input.envelope as Envelope;
  const digest = typeof candidate?.body === 'string' ? bodyDigest(candidate) : undefined;
  if (digest) {
    const same = input.registered.find((stored) => bodyDigest(stored) === digest);
    if (same) return { outcome: 'existing', revision: peekBody(same) as Revision, envelope: same, bodyDigest: digest };
  }

  const verdict = verifyEnvelope(input.envelope, input.trust, {
    now: input.now,
    ...(input.contentRules === false ? { contentRules: false } : {}),
  });
  if (!verdict.ok) {
    return {
      outcome: 'refused',
      code: verdict.code,
      reason: verdict.reason,
      message: verdict.message,
      ...(verdict.details ? { details: verdict.details } : {}),
    };
  }
  const revision = verdict.revision;
  if (revision.profile !== input.profile) {
    return {
      outcome: 'refused',
      code: 'INVALID_INPUT',
      reason: 'WRONG_PROFILE',
      message: `the envelope is a revision of "${revision.profile}", not of "${input.profile}"`,
    };
  }
  let highest = 0;
  for (const stored of input.registered) {
    const n = storedNumber(stored);
    if (n === undefined) continue;
    if (n === revision.revision) {
      return {
        outcome: 'refused',
        code: 'CONFLICT',
        reason: 'CONFLICT',
        message: `revision ${revision.revision} of "${input.profile}" is already registered with other content (${bodyDigest(stored)})`,
        details: { revision: revision.revision, storedDigest: bodyDigest(stored), digest: verdict.bodyDigest },
      };
    }
    highest = Math.max(highest, n);
  }
  if (revision.revision <= highest) {
    return {
      outcome: 'refused',
      code: 'INVALID_INPUT',
      reason: 'NOT_ABOVE_CURRENT',
      message: `revision ${revision.revision} is not above the highest registered revision ${highest} of "${input.profile}"; the channel never moves backwards`,
      details: { current: highest },
    };
  }
  return {
    outcome: 'registered',
    revision,
    envelope: shapeOf(input.envelope as Envelope),
    bodyDigest: verdict.bodyDigest,
    signers: verdict.signers,
  };
}

/** Store exactly the fields of the envelope (no stray properties a caller attached). */
function shapeOf(envelope: Envelope): Envelope {
  return { body: envelope.body, signatures: envelope.signatures.map((s) => ({ kid: s.kid, alg: s.alg, sig: s.sig })) };
}
