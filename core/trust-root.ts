import { fromBase64, utf8Decode } from './bytes';
import { PROFILE_NAME, PROFILE_NAME_RULE } from './profile-name';
import { readSignedDocument } from './signed-document';
import { lazySchema, zod } from './lazy-schema';
import {
  Kid,
  Pin,
  parseTrust,
  verifyFailure,
  verifySignatures,
  type Envelope,
  type Trust,
  type VerifyFailure,
} from './signing';

/**
 * A profile's trust as a versioned, signed document (docs/formats.md, "Trust roots"), after TUF's root role:
 * version N+1 counts only when a threshold of version N's keys AND a threshold of its own keys signed it, so the
 * keys that trust a profile today decide what trusts it tomorrow, and a new set of keys must show it holds its own
 * threshold. Every verifier walks forward from the newest version it holds, one version at a time; a lower or equal
 * version is a rollback, a gap is refused (the missing version is named), and nothing skips ahead on a body it
 * cannot check. Version 0 is the profile's `trust.yaml`: the first signed version is signed by its keys, so
 * workers and agents pinned to that file take the chain without being touched.
 *
 * A root does not expire: its freshness is the timestamp's job (core/timestamp.ts), and a root that expired would
 * stop a fleet whose signers are asleep (Flux's source-controller#1004). Pure; nothing throws for a bad document.
 */

export const ROOT_TYPE = 'wavegate/root';

/**
 * The most versions one walk accepts from a feed at once (a gateway's answer): endless roots stop here (each is
 * checked, none skipped). A profile directory on the verifier's own disk is walked whole (intake/trust.ts).
 */
export const MAX_ROOT_STEPS = 64;

const RoleInput = lazySchema(() =>
  zod()
    .object({ threshold: zod().number().int().min(1), pins: zod().array(Pin).min(1).max(64) })
    .strict(),
);

export const RootContent = lazySchema(() =>
  zod()
    .object({
      type: zod().literal(ROOT_TYPE),
      profile: zod().string().regex(PROFILE_NAME, PROFILE_NAME_RULE),
      version: zod().number().int().min(1).max(1_000_000),
      threshold: zod().number().int().min(1),
      pins: zod().array(Pin).min(1).max(64),
      /** The online timestamp role (core/timestamp.ts): keys that may only say "this is current", never what runs. */
      timestamp: RoleInput.optional(),
      issuedAt: zod().iso.datetime(),
      /** Why this version exists (free text, shown by `wavegate trust status`). */
      note: zod().string().max(200).optional(),
      /** Keys of the previous version this one drops: named so the drop is deliberate. */
      removes: zod().array(Kid).max(64).optional(),
    })
    .strict(),
);
export type RootContent = ReturnType<typeof RootContent.parse>;

/** A verified trust root: its content, its envelope and digest, and the pins it gives as a Trust. */
export interface TrustRoot {
  content: RootContent;
  envelope: Envelope;
  digest: string;
  trust: Trust;
  /** The timestamp role's pins, when the root names one. */
  timestamp?: Trust;
}

/** Where a walk starts: the profile's trust.yaml (version 0) or a root already verified. */
export type RootAnchor = { version: 0; trust: Trust } | TrustRoot;

export function anchorVersion(anchor: RootAnchor): number {
  return 'content' in anchor ? anchor.content.version : 0;
}

function anchorTrust(anchor: RootAnchor): Trust {
  return anchor.trust;
}

/** The pins of a role as a Trust (a root's own, or its timestamp role's); the problems, as one message. */
function roleTrust(role: { threshold: number; pins: Pin[] }, source: string): Trust | VerifyFailure {
  try {
    return parseTrust({ threshold: role.threshold, pins: role.pins }, source);
  } catch (err) {
    return verifyFailure('MALFORMED', (err as Error).message);
  }
}

/**
 * The next root after `from`: signed by a threshold of `from`'s keys (revoked keys never count) and a threshold of
 * its own, for the same profile, exactly one version up.
 */
export function verifyNextRoot(
  from: RootAnchor,
  envelope: unknown,
  opts: { profile: string; revokedKeys?: ReadonlySet<string> },
): TrustRoot | VerifyFailure {
  const previous = anchorTrust(from);
  const revoked = revokedOf(opts.revokedKeys);
  const read = readSignedDocument(
    envelope,
    { threshold: previous.threshold, keys: previous.keys, ...(revoked ? { revoked } : {}) },
    RootContent,
    'trust root',
  );
  const fromVersion = anchorVersion(from);
  if (!read.ok)
    return verifyFailure(read.reason, `trust root v${fromVersion + 1} by v${fromVersion}'s keys: ${read.message}`, {
      ...read.details,
    });
  const content = read.content;
  if (content.profile !== opts.profile)
    return verifyFailure(
      'WRONG_SUBJECT',
      `trust root v${content.version} is for profile "${content.profile}", not "${opts.profile}"`,
    );
  if (content.version <= fromVersion)
    return verifyFailure(
      'ROOT_ROLLBACK',
      `trust root v${content.version} is not above v${fromVersion}, the newest this verifier holds: a root never goes back`,
      { version: content.version, held: fromVersion },
    );
  if (content.version !== fromVersion + 1)
    return verifyFailure(
      'ROOT_GAP',
      `trust root v${content.version} skips v${fromVersion + 1}: every version is walked, one at a time`,
      { version: content.version, expected: fromVersion + 1 },
    );
  const own = roleTrust(content, `trust root v${content.version}`);
  if ('ok' in own) return own;
  const self = verifySignatures(envelope, { ...own, ...(revoked ? { revoked } : {}) });
  if (!self.ok)
    return verifyFailure(self.reason, `trust root v${content.version} by its own keys: ${self.message}`, {
      ...self.details,
    });
  const dropped = previous.pins.map((p) => p.kid).filter((kid) => !own.keys.has(kid));
  const named = new Set(content.removes ?? []);
  const unnamed = dropped.filter((kid) => !named.has(kid));
  if (unnamed.length > 0)
    return verifyFailure(
      'MALFORMED',
      `trust root v${content.version} drops ${unnamed.join(', ')} without naming it in "removes"`,
      { unnamed },
    );
  let timestamp: Trust | undefined;
  if (content.timestamp) {
    const role = roleTrust(content.timestamp, `trust root v${content.version} timestamp`);
    if ('ok' in role) return role;
    timestamp = role;
  }
  return {
    content,
    envelope: envelope as Envelope,
    digest: read.digest,
    trust: { ...own, root: { version: content.version, digest: read.digest } },
    ...(timestamp ? { timestamp } : {}),
  };
}

function revokedOf(keys: ReadonlySet<string> | undefined): Trust['revoked'] | undefined {
  if (!keys || keys.size === 0) return undefined;
  return { version: 0, revisions: new Map(), keys: new Map([...keys].map((k) => [k, 'revoked'])) };
}

/** A walk's end: the newest root reached, or the first refusal (with the newest root reached before it). */
export type RootWalk = { ok: true; root: RootAnchor; steps: number } | (VerifyFailure & { root: RootAnchor });

/**
 * Walk forward from `from` through `offered` (any order, duplicates and versions at or below `from` ignored:
 * what a verifier already holds is not news). Every version above `from` must verify in turn; the first that does
 * not stops the walk and is the answer, naming it (a bad root is refused, never stepped over).
 */
export function walkRoots(
  from: RootAnchor,
  offered: readonly unknown[],
  opts: { profile: string; revokedKeys?: ReadonlySet<string>; maxSteps?: number },
): RootWalk {
  const held = anchorVersion(from);
  const byVersion = new Map<number, unknown[]>();
  for (const envelope of offered) {
    const version = peekVersion(envelope);
    if (version === undefined)
      return { ...verifyFailure('MALFORMED', 'a trust root offered has no readable version'), root: from };
    if (version <= held) continue;
    byVersion.set(version, [...(byVersion.get(version) ?? []), envelope]);
  }
  const newest = Math.max(held, ...byVersion.keys());
  const maxSteps = opts.maxSteps ?? MAX_ROOT_STEPS;
  if (newest - held > maxSteps)
    return {
      ...verifyFailure(
        'ROOT_GAP',
        `${newest - held} trust root versions offered at once (at most ${maxSteps}); walk them in steps`,
      ),
      root: from,
    };
  let root = from;
  for (let version = held + 1; version <= newest; version++) {
    const candidates = byVersion.get(version);
    if (!candidates)
      return {
        ...verifyFailure('ROOT_GAP', `trust root v${version} is missing: v${newest} cannot be reached without it`, {
          version,
        }),
        root,
      };
    if (candidates.length > 1 && new Set(candidates.map((c) => JSON.stringify(c))).size > 1)
      return {
        ...verifyFailure('ROOT_FORK', `two different trust roots claim v${version}: refusing both`, { version }),
        root,
      };
    const next = verifyNextRoot(root, candidates[0], opts);
    if (!('content' in next)) return { ...next, root };
    root = next;
  }
  return { ok: true, root, steps: newest - held };
}

/** The version a root envelope's body claims, unverified (to order a walk; the walk verifies each). */
export function peekVersion(envelope: unknown): number | undefined {
  if (typeof envelope !== 'object' || envelope === null) return undefined;
  const body = (envelope as { body?: unknown }).body;
  if (typeof body !== 'string' || body.length > 64 * 1024) return undefined;
  try {
    const bytes = fromBase64(body);
    const text = bytes && utf8Decode(bytes);
    if (!text) return undefined;
    const content = JSON.parse(text) as { version?: unknown };
    return typeof content.version === 'number' && Number.isInteger(content.version) ? content.version : undefined;
  } catch {
    return undefined;
  }
}
