import { PROFILE_NAME, PROFILE_NAME_RULE } from './profile-name';
import { readSignedDocument } from './signed-document';
import { lazySchema, zod } from './lazy-schema';
import { MAX_CLOCK_SKEW_MS, verifyFailure, type Trust, type VerifyFailure } from './signing';

/**
 * Freshness for what an agent is told (docs/formats.md, "Timestamps"), after TUF's timestamp role: the gateway signs,
 * with an online key the profile's trust root names as its `timestamp` role, that at `issuedAt` this device's
 * desired revision of this profile is `desired` under root version `root` and revocation list version
 * `revocations`, until `expiresAt` (default 24 h). An agent whose newest timestamp has expired knows its view may be
 * frozen (a gateway cut off, a replayed answer) and reports `stale`, applying nothing new until a fresh one comes.
 *
 * The role can only say "this is current": what runs is still decided by the release signers' envelope, so a
 * stolen timestamp key can delay a device (withhold, or keep it on an old but valid desire), never choose what it
 * applies; and a timestamp that names a newer root or revocation list than the agent holds makes it fetch and
 * verify those first (a gateway cannot keep a revocation from an agent it keeps fresh).
 */

export const TIMESTAMP_TYPE = 'wavegate/timestamp';
export const DEFAULT_TIMESTAMP_EXPIRY_MS = 24 * 3_600_000;
/** The longest a timestamp may be valid: longer would be no freshness at all. */
export const MAX_TIMESTAMP_EXPIRY_MS = 7 * 24 * 3_600_000;

export const TimestampContent = lazySchema(() =>
  zod()
    .object({
      type: zod().literal(TIMESTAMP_TYPE),
      device: zod().string().min(1).max(128),
      profile: zod().string().regex(PROFILE_NAME, PROFILE_NAME_RULE),
      /** The trust root version (0: the profile's trust.yaml) and revocation list version (0: none) current then. */
      root: zod().number().int().min(0),
      revocations: zod().number().int().min(0),
      /** The device's desired revision then and its envelope's body digest; null: nothing desired. */
      desired: zod()
        .object({
          revision: zod().number().int().min(1),
          digest: zod()
            .string()
            .regex(/^[0-9a-f]{64}$/),
        })
        .strict()
        .nullable(),
      issuedAt: zod().iso.datetime(),
      expiresAt: zod().iso.datetime(),
    })
    .strict(),
);
export type TimestampContent = ReturnType<typeof TimestampContent.parse>;

export interface Timestamp {
  content: TimestampContent;
  digest: string;
}

/**
 * Verify a timestamp for this device and profile against the root's timestamp role. It must be for this
 * device and profile, issued no later than now (give or take the clock skew), valid at most
 * MAX_TIMESTAMP_EXPIRY_MS, and not older than the newest one already held (a replayed answer is a rollback).
 * An expired one verifies (its content is news about versions) but is not fresh: freshnessOf says so.
 */
export function verifyTimestamp(
  envelope: unknown,
  role: Pick<Trust, 'threshold' | 'keys'> | undefined,
  opts: { device: string; profile: string; now: number; held?: TimestampContent },
): Timestamp | VerifyFailure {
  if (!role)
    return verifyFailure(
      'UNPINNED_KEY',
      `profile "${opts.profile}": its trust root names no timestamp role, so no timestamp can be checked`,
    );
  const read = readSignedDocument(envelope, role, TimestampContent, 'timestamp');
  if (!read.ok) return verifyFailure(read.reason, `timestamp: ${read.message}`, { ...read.details });
  const content = read.content;
  if (content.device !== opts.device || content.profile !== opts.profile)
    return verifyFailure(
      'WRONG_SUBJECT',
      `timestamp is for ${content.device}/${content.profile}, not ${opts.device}/${opts.profile}`,
    );
  const issued = Date.parse(content.issuedAt);
  const expires = Date.parse(content.expiresAt);
  if (issued > opts.now + MAX_CLOCK_SKEW_MS)
    return verifyFailure('NOT_YET_VALID', `timestamp issued at ${content.issuedAt}, after this clock's now`);
  if (!(expires > issued) || expires - issued > MAX_TIMESTAMP_EXPIRY_MS)
    return verifyFailure(
      'VALIDITY_TOO_LONG',
      `timestamp valid from ${content.issuedAt} to ${content.expiresAt}: must end after it starts, within ${MAX_TIMESTAMP_EXPIRY_MS / 3_600_000} h`,
    );
  const held = opts.held;
  if (held && issued < Date.parse(held.issuedAt))
    return verifyFailure(
      'METADATA_ROLLBACK',
      `timestamp issued at ${content.issuedAt} is older than the one held (${held.issuedAt}): a replayed answer`,
    );
  if (held && (content.root < held.root || content.revocations < held.revocations))
    return verifyFailure(
      'METADATA_ROLLBACK',
      `timestamp names root v${content.root} and revocations v${content.revocations}, below the v${held.root} and v${held.revocations} held`,
    );
  return { content, digest: read.digest };
}

/** Whether a device's view is fresh: its newest timestamp has not expired. No timestamp yet is stale. */
export function freshnessOf(
  held: TimestampContent | undefined,
  now: number,
): { fresh: true; until: string } | { fresh: false; why: string } {
  if (!held) return { fresh: false, why: 'no timestamp received yet' };
  if (Date.parse(held.expiresAt) > now) return { fresh: true, until: held.expiresAt };
  return { fresh: false, why: `the newest timestamp expired at ${held.expiresAt}` };
}

/** The timestamp a gateway signs for one device's answer (signing: core/signed-document.ts signDocument). */
export function timestampContent(opts: {
  device: string;
  profile: string;
  root: number;
  revocations: number;
  desired: TimestampContent['desired'];
  now: number;
  expiryMs?: number;
}): TimestampContent {
  const expiry = opts.expiryMs ?? DEFAULT_TIMESTAMP_EXPIRY_MS;
  return {
    type: TIMESTAMP_TYPE,
    device: opts.device,
    profile: opts.profile,
    root: opts.root,
    revocations: opts.revocations,
    desired: opts.desired,
    issuedAt: new Date(opts.now).toISOString(),
    expiresAt: new Date(opts.now + expiry).toISOString(),
  };
}
