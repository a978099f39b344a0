import { z } from 'zod';
import { PROFILE_NAME, PROFILE_NAME_RULE } from './profile-name';
import { parseWith } from './validation';

/**
 * A revision of a profile: immutable content that a rollout moves through the fleet (docs/formats.md).
 * Commands run on the device with a POSIX shell; `$WAVEGATE_STAGING` points at the directory the
 * payload files were uploaded to.
 */
export const PayloadFile = z
  .object({
    name: z.string().regex(/^[A-Za-z0-9._-]+$/, 'must be a plain file name (letters, digits, ".", "_", "-")'),
    sha256: z.string().regex(/^[0-9a-f]{64}$/, 'must be 64 lowercase hex characters'),
    size: z.number().int().nonnegative(),
    source: z.string().min(1),
  })
  .strict();
export type PayloadFile = z.infer<typeof PayloadFile>;

export const Revision = z
  .object({
    profile: z.string().regex(PROFILE_NAME, PROFILE_NAME_RULE),
    revision: z.number().int().positive('must be a positive whole number'),
    apply: z.string(),
    verify: z.string(),
    rollback: z.string().optional(),
    /** The revision a risky change goes back to when no explicit rollback command is given. */
    previous: z.number().int().positive().optional(),
    payload: z.array(PayloadFile).default([]),
    risk: z.enum(['risky', 'safe']).default('risky'),
    expiresAt: z.iso.datetime({ offset: true }).optional(),
    description: z.string().optional(),
    /**
     * Registration gates the author escaped when signing (`wavegate sign --allow-...`): inside the signed
     * body, so the escape stays on the record wherever the revision goes.
     */
    escapes: z.array(z.object({ gate: z.string(), flag: z.string(), reason: z.string() }).strict()).optional(),
  })
  .strict();
export type Revision = z.infer<typeof Revision>;

export function parseRevision(data: unknown, source: string): Revision {
  return parseWith(Revision, data, source);
}

/** The profile: what a rollout targets and how it checks health (docs/formats.md). */
export const Profile = z
  .object({
    name: z.string().regex(PROFILE_NAME, PROFILE_NAME_RULE),
    description: z.string().optional(),
    /** Label selector over the inventory: every listed label must match. Empty selects every device. */
    scope: z.record(z.string(), z.string()).default({}),
    runtimes: z.array(z.object({ name: z.string().min(1), health: z.string().min(1) }).strict()).default([]),
    metrics: z
      .object({
        errorRate: z.union([
          z.object({ command: z.string().min(1) }).strict(),
          z.object({ http: z.url() }).strict(),
          z.object({ prometheus: z.object({ url: z.url(), query: z.string().min(1) }).strict() }).strict(),
        ]),
      })
      .strict()
      .optional(),
  })
  .strict();
export type Profile = z.infer<typeof Profile>;

export function parseProfile(data: unknown, source: string): Profile {
  return parseWith(Profile, data, source);
}

/** Where on a device its current revision of a profile is recorded (relative to the login's $HOME). */
export function markerPath(profile: string): string {
  return `.wavegate/profiles/${profile}/revision`;
}
