import { fromBase64 } from './bytes';
import { PROFILE_NAME } from './profile-name';
import { RevocationsContent, revokedOf, verifyRevocations, withRevocations, type RevocationList } from './revocation';
import { parsedDocument, readSignedDocument } from './signed-document';
import { bodyDigest, Envelope, parseTrust, type Trust, type VerifyFailure } from './signing';
import { freshnessOf, TimestampContent, verifyTimestamp, type Timestamp } from './timestamp';
import { MAX_ROOT_STEPS, peekVersion, RootContent, walkRoots, type RootAnchor, type TrustRoot } from './trust-root';

/**
 * What a verifier that learns its trust over the wire holds per profile (an agent: docs/formats.md, "Gateway HTTP API",
 * "Trust news"): the newest trust root it verified (none: its pins file, version 0), the newest revocation list, the
 * newest timestamp. News comes in each sync answer and is taken only when it verifies from what is held: roots walked
 * one version at a time from the held one (core/trust-root.ts), a list signed by a threshold of the root then held and
 * not older than the held list (core/revocation.ts), a timestamp of the root's `timestamp` role for this device and
 * profile, not older than the held one, naming exactly the root and list versions held (core/timestamp.ts). Anything
 * that does not is refused and named, and what was held stays: nothing here ever drops to less than it held.
 * Pure; nothing throws for a bad input.
 */

export interface HeldTrust {
  profile: string;
  /** The newest root verified; absent: version 0 (the pins file). */
  root?: TrustRoot;
  /** The newest revocation list verified, with its envelope (kept to be re-read at the next start). */
  list?: RevocationList & { envelope: Envelope };
  /** The newest timestamp verified, with its envelope. */
  timestamp?: Timestamp & { envelope: Envelope };
}

/** What a verifier tells the gateway it holds, per profile: root version (0: pins file) and list version (0: none). */
export interface HeldVersions {
  root: number;
  revocations: number;
}

/** The news a sync answer carries for one profile (each part optional). */
export interface ProfileTrustNews {
  /** Roots above the held one, in any order: at most MAX_ROOT_STEPS. */
  roots?: Envelope[];
  /** The current revocation list, when newer than the held one. */
  revocations?: Envelope;
  /** This device's timestamp for the profile. */
  timestamp?: Envelope;
  /**
   * The gateway's own copy of the profile does not verify, and why (then the roots and list are what its copy holds,
   * unverified, and no timestamp). Only ever a reason to refuse: the agent applies nothing new of the profile.
   */
  problem?: string;
}

/** A refusal of news: its reason code and a message naming what was refused and why. */
export interface NewsRefusal {
  reason: string;
  message: string;
}

export function heldVersionsOf(held: HeldTrust): HeldVersions {
  return { root: held.root?.content.version ?? 0, revocations: held.list?.content.version ?? 0 };
}

/** The pins an envelope of the profile is verified against: the held root's (else the anchor's), revocations applied. */
export function heldTrustOf(held: HeldTrust, anchor: Trust): Trust {
  return withRevocations(held.root?.trust ?? anchor, held.list);
}

/** Whether the profile's freshness is required: its held root names a timestamp role. */
export function freshnessRequired(held: HeldTrust): boolean {
  return held.root?.timestamp !== undefined;
}

export type Freshness =
  | { required: false }
  | { required: true; fresh: true; until: string }
  | { required: true; fresh: false; why: string };

/** The profile's freshness now: not required without a timestamp role; else fresh until the newest timestamp expires. */
export function freshnessFor(held: HeldTrust, now: number): Freshness {
  if (!freshnessRequired(held)) return { required: false };
  return { required: true, ...freshnessOf(held.timestamp?.content, now) };
}

/**
 * Why a desired envelope may not be taken now (undefined: it may): a profile that requires freshness takes only
 * while its newest timestamp is fresh and names exactly this revision and envelope body as the device's desired one.
 */
export function freshnessProblem(
  held: HeldTrust,
  desired: { revision: number; envelope?: Pick<Envelope, 'body'> | undefined },
  now: number,
): string | undefined {
  const freshness = freshnessFor(held, now);
  // An unsigned entry is refused on its own (UNSIGNED): it never runs, so it needs no timestamp to be refused.
  if (!freshness.required || !desired.envelope) return undefined;
  if (!freshness.fresh) return `stale: ${freshness.why}; nothing new is applied until a fresh timestamp comes`;
  const vouched = held.timestamp!.content.desired;
  const digest = desired.envelope ? bodyDigest(desired.envelope) : undefined;
  if (!vouched || vouched.revision !== desired.revision || vouched.digest !== digest)
    return `the newest timestamp (issued ${held.timestamp!.content.issuedAt}) names ${vouched ? `r${vouched.revision} (body ${vouched.digest.slice(0, 16)}...)` : 'nothing'} as desired, not r${desired.revision}${digest ? ` (body ${digest.slice(0, 16)}...)` : ''}: waiting for one that does`;
  return undefined;
}

const refusal = (reason: string, message: string): NewsRefusal => ({ reason, message });
const asRefusal = (failure: VerifyFailure): NewsRefusal => refusal(failure.reason, failure.message);
const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

export interface NewsOutcome {
  held: HeldTrust;
  /** Whether anything new was taken (the holder then keeps it). */
  changed: boolean;
  refused: NewsRefusal[];
}

/**
 * Take one profile's news: roots first, then the list (against the root now held), then the timestamp (against the
 * root now held, naming exactly the versions now held). Each part that does not verify is refused and named; the
 * parts before it that did are kept (every root walked before a bad one verified in turn).
 */
export function takeTrustNews(
  held: HeldTrust,
  news: unknown,
  opts: { anchor: Trust; device: string; now: number },
): NewsOutcome {
  if (news === undefined) return { held, changed: false, refused: [] };
  if (!isRecord(news))
    return { held, changed: false, refused: [refusal('MALFORMED', 'trust news: must be an object')] };
  const refused: NewsRefusal[] = [];
  let next = held;
  if (news.problem !== undefined)
    refused.push(
      refusal(
        'TRUST_UNVERIFIED',
        `the gateway's copy of the profile's trust does not verify: ${String(news.problem).slice(0, 300)}`,
      ),
    );
  const roots = takeRoots(next, news.roots, opts.anchor);
  if (roots.refused) refused.push(roots.refused);
  next = roots.held;
  const list = takeList(next, news.revocations, opts.anchor);
  if (list.refused) refused.push(list.refused);
  next = list.held;
  const stamp = takeTimestamp(next, news.timestamp, opts);
  if (stamp.refused) refused.push(stamp.refused);
  next = stamp.held;
  return { held: next, changed: next !== held, refused };
}

interface Step {
  held: HeldTrust;
  refused?: NewsRefusal;
}

function takeRoots(held: HeldTrust, roots: unknown, anchor: Trust): Step {
  if (roots === undefined) return { held };
  if (!Array.isArray(roots)) return { held, refused: refusal('MALFORMED', 'trust roots: must be a list') };
  // An endless feed is refused before any of it is read: a sync answer carries at most MAX_ROOT_STEPS.
  if (roots.length > MAX_ROOT_STEPS)
    return {
      held,
      refused: refusal(
        'ROOT_GAP',
        `${roots.length} trust roots offered in one answer, at most ${MAX_ROOT_STEPS}: an endless feed; none taken`,
      ),
    };
  if (roots.length === 0) return { held };
  const from: RootAnchor = held.root ?? { version: 0, trust: anchor };
  const version = heldVersionsOf(held).root;
  // A root at or below the one held is not news: offering it is a rollback, and named (walkRoots would skip it).
  const old = roots.map(peekVersion).find((v) => v !== undefined && v <= version);
  if (old !== undefined)
    return {
      held,
      refused: refusal(
        'ROOT_ROLLBACK',
        `trust root v${old} offered, not above v${version}, the newest held: a root never goes back; none taken`,
      ),
    };
  const walk = walkRoots(from, roots, { profile: held.profile });
  const reached = 'content' in walk.root ? walk.root : undefined;
  const next = reached && reached !== held.root ? { ...held, root: reached } : held;
  return walk.ok ? { held: next } : { held: next, refused: asRefusal(walk) };
}

function takeList(held: HeldTrust, envelope: unknown, anchor: Trust): Step {
  if (envelope === undefined) return { held };
  const trust = held.root?.trust ?? anchor;
  const list = verifyRevocations(envelope, trust, {
    profile: held.profile,
    ...(held.list ? { held: { version: held.list.content.version, digest: held.list.digest } } : {}),
  });
  if (!('content' in list)) return { held, refused: asRefusal(list) };
  if (held.list && list.digest === held.list.digest) return { held };
  return { held: { ...held, list: { ...list, envelope: envelope as Envelope } } };
}

function takeTimestamp(held: HeldTrust, envelope: unknown, opts: { device: string; now: number }): Step {
  if (envelope === undefined) return { held };
  const versions = heldVersionsOf(held);
  const stamp = verifyTimestamp(envelope, held.root?.timestamp, {
    device: opts.device,
    profile: held.profile,
    now: opts.now,
    ...(held.timestamp ? { held: held.timestamp.content } : {}),
  });
  if (!('content' in stamp)) return { held, refused: asRefusal(stamp) };
  const named = stamp.content;
  if (named.root < versions.root || named.revocations < versions.revocations)
    return {
      held,
      refused: refusal(
        'METADATA_ROLLBACK',
        `timestamp names root v${named.root} and revocations v${named.revocations}, below the v${versions.root} and v${versions.revocations} held`,
      ),
    };
  // Above what is held: the root or list it names did not come, or did not verify (refused above); never taken
  // before them, so a timestamp cannot keep a device fresh past a root or revocation it has not got.
  if (named.root > versions.root || named.revocations > versions.revocations)
    return {
      held,
      refused: refusal(
        'ROOT_GAP',
        `timestamp names root v${named.root} and revocations v${named.revocations}, above the v${versions.root} and v${versions.revocations} verified here: not taken until those are`,
      ),
    };
  if (held.timestamp && held.timestamp.digest === stamp.digest) return { held };
  return { held: { ...held, timestamp: { ...stamp, envelope: envelope as Envelope } } };
}

/** What a holder writes for a profile (`<state>/trust/<profile>.json`): the three envelopes, as verified. */
export interface HeldTrustRecord {
  profile: string;
  root: Envelope | null;
  revocations: Envelope | null;
  timestamp: Envelope | null;
}

export function heldTrustRecord(held: HeldTrust): HeldTrustRecord {
  return {
    profile: held.profile,
    root: held.root?.envelope ?? null,
    revocations: held.list?.envelope ?? null,
    timestamp: held.timestamp?.envelope ?? null,
  };
}

/**
 * A record read back (the holder's own file): its shape and each document's body read again, the root against its
 * own keys (a threshold of them must have signed it; the chain that led to it was walked when it was taken). A list
 * or timestamp is read by shape only: the root that signed it may have rotated since. Why not, as one message.
 */
export function reopenHeldTrust(data: unknown, profile: string): HeldTrust | string {
  if (!isRecord(data)) return 'not a JSON object';
  const keys = Object.keys(data).sort().join(',');
  if (keys !== 'profile,revocations,root,timestamp')
    return `must hold exactly "profile", "root", "revocations" and "timestamp" (holds ${keys})`;
  if (data.profile !== profile) return `profile: ${JSON.stringify(data.profile)}, not "${profile}"`;
  let held: HeldTrust = { profile };
  if (data.root !== null) {
    const root = reopenRoot(data.root, profile);
    if (typeof root === 'string') return `root: ${root}`;
    held = { ...held, root };
  }
  if (data.revocations !== null) {
    const list = reopenDocument(data.revocations, RevocationsContent, 'revocation list');
    if (typeof list === 'string') return `revocations: ${list}`;
    if (list.content.profile !== profile) return `revocations: for profile "${list.content.profile}"`;
    held = {
      ...held,
      list: { content: list.content, digest: list.digest, revoked: revokedOf(list.content), envelope: list.envelope },
    };
  }
  if (data.timestamp !== null) {
    const stamp = reopenDocument(data.timestamp, TimestampContent, 'timestamp');
    if (typeof stamp === 'string') return `timestamp: ${stamp}`;
    if (stamp.content.profile !== profile) return `timestamp: for profile "${stamp.content.profile}"`;
    held = { ...held, timestamp: { content: stamp.content, digest: stamp.digest, envelope: stamp.envelope } };
  }
  return held;
}

function reopenDocument<S extends typeof RevocationsContent | typeof TimestampContent>(
  data: unknown,
  schema: S,
  what: string,
): { content: ReturnType<S['parse']>; digest: string; envelope: Envelope } | string {
  const shape = Envelope.safeParse(data);
  if (!shape.success) return 'not an envelope';
  const body = fromBase64(shape.data.body);
  if (!body) return 'body is not base64';
  const read = parsedDocument(body, schema, what, []);
  if (!read.ok) return read.message;
  return { content: read.content as ReturnType<S['parse']>, digest: read.digest, envelope: shape.data };
}

function reopenRoot(data: unknown, profile: string): TrustRoot | string {
  const shape = Envelope.safeParse(data);
  if (!shape.success) return 'not an envelope';
  const body = fromBase64(shape.data.body);
  if (!body) return 'body is not base64';
  const peeked = parsedDocument(body, RootContent, 'trust root', []);
  if (!peeked.ok) return peeked.message;
  const content = peeked.content as RootContent;
  if (content.profile !== profile) return `for profile "${content.profile}"`;
  let own: Trust;
  let timestamp: Trust | undefined;
  try {
    own = parseTrust({ threshold: content.threshold, pins: content.pins }, 'trust root');
    if (content.timestamp) timestamp = parseTrust(content.timestamp, 'trust root timestamp role');
  } catch (err) {
    return (err as Error).message;
  }
  const signed = readSignedDocument(shape.data, own, RootContent, 'trust root');
  if (!signed.ok) return `${signed.reason}: ${signed.message}`;
  return {
    content,
    envelope: shape.data,
    digest: signed.digest,
    trust: { ...own, root: { version: content.version, digest: signed.digest } },
    ...(timestamp ? { timestamp } : {}),
  };
}

/** The most profiles a sync may say it holds (a twin's bound on profiles). */
export const MAX_HELD_PROFILES = 64;

/** A sync's `held` field read (the gateway's side): per profile, the versions held; or why it is not that. */
export function parseHeldVersions(value: unknown): Record<string, HeldVersions> | string {
  if (value === undefined || value === null) return {};
  if (!isRecord(value)) return 'held: must be an object of { root, revocations } per profile';
  const names = Object.keys(value);
  if (names.length > MAX_HELD_PROFILES) return `held: at most ${MAX_HELD_PROFILES} profiles (got ${names.length})`;
  const out: Record<string, HeldVersions> = {};
  for (const name of names) {
    const entry = value[name];
    if (!PROFILE_NAME.test(name) || ['__proto__', 'constructor', 'prototype'].includes(name))
      return `held: ${JSON.stringify(name.slice(0, 64))}: not a profile name`;
    const ok = (n: unknown) => typeof n === 'number' && Number.isSafeInteger(n) && n >= 0 && n <= 1_000_000_000;
    if (!isRecord(entry) || !ok(entry.root) || !ok(entry.revocations))
      return `held.${name}: must be { root, revocations }, each an integer >= 0`;
    out[name] = { root: entry.root as number, revocations: entry.revocations as number };
  }
  return out;
}

/** A refusal as one line: its reason code, then the message. */
export function refusalText(r: NewsRefusal): string {
  return `${r.reason}: ${r.message}`;
}
