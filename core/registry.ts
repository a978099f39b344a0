import type { WavegateErrorCode } from './errors';
import { heldTrustOf, heldVersionsOf, takeTrustNews, type HeldTrust } from './held-trust';
import type { Revision } from './revision';
import { revocationOf } from './revocation';
import { bodyDigest, peekBody, verifyEnvelope, type Envelope, type Trust, type VerifyReason } from './signing';

/**
 * The registry's decision, as a pure function (docs/architecture.md, "Signed revisions and the registry"). The entity workflow that
 * holds a profile's registered envelopes calls this and stores `envelope` when the outcome is
 * `registered`; it stores nothing otherwise.
 *
 * - the same body as a stored envelope → `existing`, the stored envelope (idempotent retries), unless the
 *   trust's revocation list revokes it since (`REVOKED`);
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
    const number = same && storedNumber(same);
    // Stored before its signers revoked it: a retry is no longer answered "existing" as if it still stood.
    const revoked = number !== undefined ? revocationOf(input.trust.revoked, number, digest) : undefined;
    if (revoked)
      return {
        outcome: 'refused',
        code: 'INVALID_INPUT',
        reason: 'REVOKED',
        message: `revision ${input.profile}#${number} is revoked by its signers (revocations v${input.trust.revoked?.version}): ${revoked.reason}`,
        details: { revision: number, reason: revoked.reason },
      };
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

/**
 * The registry's decision on trust it is offered (docs/architecture.md, "Signed revisions and the registry"): roots
 * above the one it holds, walked one version at a time from it (version 0: its first-use pins), or the profile's
 * revocation list, signed by a threshold of the root it holds and not older than its own. The same rules as an
 * agent's (core/held-trust.ts takeTrustNews), with one difference: all or nothing. An offer any part of which does
 * not verify is refused with its reason (BELOW_THRESHOLD, ROOT_GAP, ROOT_ROLLBACK, METADATA_ROLLBACK, ...) and the
 * registry keeps what it held; `held` when it already holds exactly what is offered (a list resent).
 */
export type TrustOffer = { roots: unknown } | { revocations: unknown };

export type TrustAdoptionDecision =
  | { outcome: 'adopted' | 'held'; held: HeldTrust }
  | { outcome: 'refused'; code: WavegateErrorCode; reason: string; message: string };

export function decideTrustAdoption(input: {
  /** The registry's first-use pins: version 0 of the profile's trust root. */
  anchor: Trust;
  held: HeldTrust;
  offer: TrustOffer;
}): TrustAdoptionDecision {
  const refused = (reason: string, message: string): TrustAdoptionDecision => ({
    outcome: 'refused',
    code: 'INVALID_INPUT',
    reason,
    message,
  });
  const offer = input.offer as Partial<Record<'roots' | 'revocations', unknown>>;
  // Only the part offered is read: a caller cannot slip a timestamp or anything else into the registry's state.
  const news = 'roots' in offer ? { roots: offer.roots } : { revocations: offer.revocations };
  if ('roots' in news && (!Array.isArray(news.roots) || news.roots.length === 0))
    return refused('MALFORMED', 'roots: a non-empty list of trust root envelopes is required');
  if ('revocations' in news && (typeof news.revocations !== 'object' || news.revocations === null))
    return refused('MALFORMED', 'revocations: a revocation list envelope is required');
  // The timestamp part is never offered, so `now` and `device` are never read.
  const taken = takeTrustNews(input.held, news, { anchor: input.anchor, device: '', now: 0 });
  const first = taken.refused[0];
  if (first) return refused(first.reason, first.message);
  return { outcome: taken.changed ? 'adopted' : 'held', held: taken.changed ? taken.held : input.held };
}

/** The pins a registration is verified with: the newest root adopted (else the first-use pins), its list applied. */
export function registryTrust(held: HeldTrust, anchor: Trust): Trust {
  return heldTrustOf(held, anchor);
}

/** What the registry verifies with now: its trust root version (0: the first-use pins), its list, the pins. */
export interface RegistryTrustState {
  root: number;
  rootDigest?: string;
  /** The revocation list's version (0: none). */
  revocations: number;
  revocationsDigest?: string;
  threshold: number;
  /** The kids pinned now, sorted. */
  kids: string[];
}

export function registryTrustState(held: HeldTrust, anchor: Trust): RegistryTrustState {
  const versions = heldVersionsOf(held);
  const trust = held.root?.trust ?? anchor;
  return {
    root: versions.root,
    ...(held.root ? { rootDigest: held.root.digest } : {}),
    revocations: versions.revocations,
    ...(held.list ? { revocationsDigest: held.list.digest } : {}),
    threshold: trust.threshold,
    kids: trust.pins.map((p) => p.kid).sort(),
  };
}
