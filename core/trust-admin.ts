import type { z } from 'zod';
import { fromBase64 } from './bytes';
import { WavegateError } from './errors';
import { REVOCATIONS_TYPE, RevocationsContent } from './revocation';
import { ed25519Verify, type Envelope, peekBody, type Pin, type Trust } from './signing';
import { anchorVersion, ROOT_TYPE, RootContent, type RootAnchor } from './trust-root';

/**
 * What the operator's trust commands decide (`wavegate trust init|rotate|revoke|cosign|publish`,
 * cli/commands/trust.ts): the content of the next trust root and of the next revocation list, and how far a
 * draft's signatures are from what its verifier will ask. Verification itself is core/trust-root.ts and
 * core/revocation.ts: nothing here makes a document count, it only says what to sign and what is missing.
 * Pure; a bad request is a WavegateError naming the flag and the value.
 */

/** A role's pins and threshold, as a root carries them. */
export interface RoleDoc {
  threshold: number;
  pins: Pin[];
}

/**
 * The content of the root after `from`: the next pins and threshold, the keys of `from` they drop named in
 * `removes` (the drop is the point of a rotation: the verifier refuses one left unnamed), and the timestamp role
 * (`undefined`: the current root's, carried over; `null`: none). The online timestamp key may not be a release
 * signer: its compromise must only ever delay, never sign what runs.
 */
export function nextRootContent(opts: {
  profile: string;
  from: RootAnchor;
  next: RoleDoc;
  timestamp?: RoleDoc | null;
  note?: string;
  now: number;
}): RootContent {
  const carried = 'content' in opts.from ? opts.from.content.timestamp : undefined;
  const timestamp = opts.timestamp === undefined ? carried : (opts.timestamp ?? undefined);
  const signers = new Set(opts.next.pins.map((p) => p.kid));
  const shared = timestamp?.pins.find((p) => signers.has(p.kid));
  if (shared)
    throw new WavegateError(
      'INVALID_INPUT',
      `--timestamp-pub: ${shared.kid} is also a signer pin; the online timestamp key must be a key of its own (its compromise may only delay, never sign what runs)`,
      { field: '--timestamp-pub', value: shared.kid },
    );
  const removes = opts.from.trust.pins.map((p) => p.kid).filter((kid) => !signers.has(kid));
  const content = {
    type: ROOT_TYPE,
    profile: opts.profile,
    version: anchorVersion(opts.from) + 1,
    threshold: opts.next.threshold,
    pins: opts.next.pins,
    ...(timestamp ? { timestamp: { threshold: timestamp.threshold, pins: timestamp.pins } } : {}),
    issuedAt: new Date(opts.now).toISOString(),
    ...(opts.note !== undefined ? { note: opts.note } : {}),
    ...(removes.length ? { removes } : {}),
  };
  return checked(RootContent, content, 'trust root');
}

/** What a revocation list draft changes: a revision (every envelope of it, or the one of `digest`) or a signer key. */
export type RevocationChange = { revision: number; digest?: string } | { kid: string };

/**
 * The next revocation list: the current list's entries (it is the whole truth: a verifier keeps only the newest)
 * with `change` added (with `reason`) or, with `lift`, taken out, one version up. Adding what is already revoked
 * is CONFLICT; lifting what is not, INVALID_INPUT.
 */
export function nextRevocationsContent(opts: {
  profile: string;
  current?: RevocationsContent;
  change: RevocationChange;
  reason?: string;
  lift?: boolean;
  now: number;
}): RevocationsContent {
  const revisions = [...(opts.current?.revisions ?? [])];
  const keys = [...(opts.current?.keys ?? [])];
  const from = opts.current ? `revocation list v${opts.current.version}` : 'no revocation list';
  const change = opts.change;
  const [flag, value, index] =
    'revision' in change
      ? (['--revision', String(change.revision), revisions.findIndex((r) => r.revision === change.revision)] as const)
      : (['--signer-key', change.kid, keys.findIndex((k) => k.kid === change.kid)] as const);
  if (opts.lift) {
    if (index < 0)
      throw new WavegateError('INVALID_INPUT', `${flag} ${value}: not revoked (${from}): nothing to lift`, {
        field: flag,
        value,
      });
    if ('revision' in change) revisions.splice(index, 1);
    else keys.splice(index, 1);
  } else {
    if (index >= 0) {
      const reason = 'revision' in change ? revisions[index]!.reason : keys[index]!.reason;
      throw new WavegateError('CONFLICT', `${flag} ${value}: already revoked in ${from} (${reason})`, {
        field: flag,
        value,
      });
    }
    if (opts.reason === undefined)
      throw new WavegateError('INVALID_INPUT', `--reason: required to revoke (why, in one line)`, {
        field: '--reason',
      });
    if ('revision' in change)
      revisions.push({
        revision: change.revision,
        ...(change.digest ? { digest: change.digest } : {}),
        reason: opts.reason,
      });
    else keys.push({ kid: change.kid, reason: opts.reason });
  }
  revisions.sort((a, b) => a.revision - b.revision);
  return checked(
    RevocationsContent,
    {
      type: REVOCATIONS_TYPE,
      profile: opts.profile,
      version: (opts.current?.version ?? 0) + 1,
      revisions,
      keys,
      issuedAt: new Date(opts.now).toISOString(),
    },
    'revocation list',
  );
}

/** The content, parsed by its schema: a problem names the field (the flag that gave it) and its value. */
function checked<S extends z.ZodType>(schema: S, content: Record<string, unknown>, what: string): z.output<S> {
  const parsed = schema.safeParse(content);
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0]!;
  const path = issue.path.map(String).join('.');
  const last = String(issue.path.at(-1));
  const field = FLAG_OF[last === 'reason' || last === 'digest' ? last : path.split('.')[0]!] ?? path;
  const value = issue.path.reduce<unknown>((v, k) => (v as Record<PropertyKey, unknown> | undefined)?.[k], content);
  throw new WavegateError(
    'INVALID_INPUT',
    `${field}: ${issue.message} (got ${JSON.stringify(value)}) in the ${what} (${path || '(root)'})`,
    { field, value },
  );
}

const FLAG_OF: Record<string, string> = {
  note: '--note',
  threshold: '--trust threshold',
  pins: '--trust pins',
  timestamp: '--timestamp-pub',
  revisions: '--revision',
  keys: '--signer-key',
  reason: '--reason',
  digest: '--digest',
};

/** A draft's signatures against one set of pins: the distinct pinned, unrevoked keys whose signature verifies. */
export interface Tally {
  version: number;
  signed: string[];
  threshold: number;
}

/** The kids of `trust` (revoked keys aside) whose signature over the envelope's body verifies. */
export function signedBy(envelope: Envelope, trust: Pick<Trust, 'keys' | 'revoked'>): string[] {
  const body = fromBase64(envelope.body);
  if (!body) return [];
  const out: string[] = [];
  for (const s of envelope.signatures) {
    const key = trust.keys.get(s.kid);
    if (!key || trust.revoked?.keys.has(s.kid) || out.includes(s.kid)) continue;
    const sig = fromBase64(s.sig);
    if (sig && ed25519Verify(sig, body, key)) out.push(s.kid);
  }
  return out;
}

/** A root draft's standing: its signers among the current root's keys and among its own (both thresholds must be met). */
export function rootTally(from: RootAnchor, envelope: Envelope, draft: RootContent): { previous: Tally; own: Tally } {
  const ownKeys = new Map(draft.pins.map((p) => [p.kid, fromBase64(p.publicKey) ?? new Uint8Array()]));
  return {
    previous: {
      version: anchorVersion(from),
      signed: signedBy(envelope, from.trust),
      threshold: from.trust.threshold,
    },
    own: { version: draft.version, signed: signedBy(envelope, { keys: ownKeys }), threshold: draft.threshold },
  };
}

/** "1 of 2 of v1's keys, 0 of 2 of its own": what a root draft has against what it needs. */
export function rootTallyText(t: { previous: Tally; own: Tally }): string {
  return `${t.previous.signed.length} of ${t.previous.threshold} of v${t.previous.version}'s keys, ${t.own.signed.length} of ${t.own.threshold} of its own`;
}

/** "1 of 2 of root v1's keys": what a revocation list draft has against the current root. */
export function listTallyText(t: Tally): string {
  return `${t.signed.length} of ${t.threshold} of root v${t.version}'s keys`;
}

/** Which trust document a draft is, from its body's `type` (unverified: to pick how to verify it). */
export function draftKind(envelope: Envelope): 'root' | 'revocations' | undefined {
  const body = peekBody(envelope) as { type?: unknown } | undefined;
  return body?.type === ROOT_TYPE ? 'root' : body?.type === REVOCATIONS_TYPE ? 'revocations' : undefined;
}
