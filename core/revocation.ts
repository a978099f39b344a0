import { PROFILE_NAME, PROFILE_NAME_RULE } from './profile-name';
import { readSignedDocument } from './signed-document';
import { lazySchema, zod } from './lazy-schema';
import { PRINTABLE, PRINTABLE_RULE } from './validation';
import { Kid, verifyFailure, type Revoked, type Trust, type VerifyFailure } from './signing';

/**
 * A profile's revocation list (docs/formats.md, "Revocation lists"): revisions and signer keys its signers no longer
 * stand behind, signed by a threshold of the profile's current trust root, versioned. The newest list a verifier
 * holds is the whole truth (it repeats what still stands: lifting a revocation is a new version without it, signed
 * by the same threshold); a lower version is a rollback and refused, so a revocation cannot be undone by replaying
 * an old list. A revoked revision never verifies again (core/signing.ts verifyEnvelope: REVOKED), a revoked key's
 * signature never counts toward a threshold (REVOKED_KEY), for a revision, a root or a later list alike.
 */

export const REVOCATIONS_TYPE = 'wavegate/revocations';

/** Entries a list may hold: a bound on what a verifier reads before it trusts it. */
export const MAX_REVOCATIONS = 1_000;

const Reason = lazySchema(() => zod().string().min(1).max(200).regex(PRINTABLE, PRINTABLE_RULE));

export const RevocationsContent = lazySchema(() =>
  zod()
    .object({
      type: zod().literal(REVOCATIONS_TYPE),
      profile: zod().string().regex(PROFILE_NAME, PROFILE_NAME_RULE),
      version: zod().number().int().min(1).max(1_000_000_000),
      revisions: zod()
        .array(
          zod()
            .object({
              revision: zod().number().int().min(1),
              /** Only the envelope with this body digest (hex SHA-256); absent: every envelope of that number. */
              digest: zod()
                .string()
                .regex(/^[0-9a-f]{64}$/, 'must be 64 lowercase hex')
                .optional(),
              reason: Reason,
            })
            .strict(),
        )
        .max(MAX_REVOCATIONS),
      keys: zod()
        .array(
          zod()
            .object({
              kid: Kid,
              reason: Reason,
            })
            .strict(),
        )
        .max(MAX_REVOCATIONS),
      issuedAt: zod().iso.datetime(),
    })
    .strict(),
);
export type RevocationsContent = ReturnType<typeof RevocationsContent.parse>;

/** A verified revocation list. */
export interface RevocationList {
  content: RevocationsContent;
  digest: string;
  revoked: Revoked;
}

/** What a list revokes, as a verifier applies it. */
export function revokedOf(content: RevocationsContent): Revoked {
  return {
    version: content.version,
    revisions: new Map(
      content.revisions.map((r) => [r.revision, { ...(r.digest ? { digest: r.digest } : {}), reason: r.reason }]),
    ),
    keys: new Map(content.keys.map((k) => [k.kid, k.reason])),
  };
}

/**
 * Verify a revocation list against the profile's current trust (a threshold of its root's keys; a key the list
 * itself revokes still counts for this list: its holders may retire it) and the newest version already held.
 */
export function verifyRevocations(
  envelope: unknown,
  trust: Pick<Trust, 'threshold' | 'keys' | 'revoked'>,
  opts: { profile: string; held?: { version: number; digest: string } },
): RevocationList | VerifyFailure {
  const read = readSignedDocument(envelope, trust, RevocationsContent, 'revocation list');
  if (!read.ok) return verifyFailure(read.reason, `revocation list: ${read.message}`, { ...read.details });
  const content = read.content;
  if (content.profile !== opts.profile)
    return verifyFailure(
      'WRONG_SUBJECT',
      `revocation list v${content.version} is for profile "${content.profile}", not "${opts.profile}"`,
    );
  const held = opts.held;
  if (held && content.version < held.version)
    return verifyFailure(
      'METADATA_ROLLBACK',
      `revocation list v${content.version} is older than v${held.version}, the newest this verifier holds: a revocation is never undone by an old list`,
      { version: content.version, held: held.version },
    );
  if (held && content.version === held.version && read.digest !== held.digest)
    return verifyFailure(
      'ROOT_FORK',
      `two different revocation lists claim v${content.version}: keeping the one held, refusing this one`,
      { version: content.version },
    );
  const seen = new Set<number>();
  for (const r of content.revisions) {
    if (seen.has(r.revision))
      return verifyFailure('MALFORMED', `revocation list v${content.version}: revision ${r.revision} listed twice`);
    seen.add(r.revision);
  }
  return { content, digest: read.digest, revoked: revokedOf(content) };
}

/** The trust with a list's revocations applied. */
export function withRevocations(trust: Trust, list: RevocationList | undefined): Trust {
  return list ? { ...trust, revoked: list.revoked } : trust;
}

/**
 * The revocation of revision `revision` in `revoked`, as verifyEnvelope applies it: an entry without a digest
 * revokes every envelope of that number; one with a digest only that envelope (`digest` unknown: it may be that one,
 * so it counts). For readers that have a revision's number and not its envelope: a device's marker, a rollout's target.
 */
export function revocationOf(
  revoked: Revoked | undefined,
  revision: number,
  digest?: string,
): { revision: number; reason: string } | undefined {
  const entry = revoked?.revisions.get(revision);
  if (!entry || (entry.digest !== undefined && digest !== undefined && entry.digest !== digest)) return undefined;
  return { revision, reason: entry.reason };
}
