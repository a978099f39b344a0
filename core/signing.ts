import type * as Curves from '@noble/curves/ed25519.js';
import { sha256 } from '@noble/hashes/sha2.js';
import type { z } from 'zod';
import { fromBase64, toBase64, toBase64Url, utf8Decode, utf8Encode } from './bytes';
import { canonicalize, isCanonicalJson } from './canonical';
import { WavegateError, type WavegateErrorCode } from './errors';
import { revisionSchemaFor, type Revision, type RevisionRules } from './revision';
import { parseWith } from './validation';
import { lazySchema, zod } from './lazy-schema';

/**
 * Signed envelopes (docs/formats.md): `{ body: base64(canonical JSON of a revision), signatures: [{ kid,
 * alg: "Ed25519", sig }] }`. Keys are made and used offline; the control plane, workers and agents only
 * hold pins (`kid` + public key) and a threshold of distinct pinned signers. Verification returns a value
 * with one reason code per failure; nothing here throws for a bad envelope. Pure JS (@noble), no I/O:
 * the clock is passed in.
 */
export const ALG = 'Ed25519';
export const DEFAULT_VALIDITY_DAYS = 365;
/** The longest an envelope may be valid, from `issuedAt` to `expiresAt`: a leaked key's signatures age out. */
export const MAX_VALIDITY_DAYS = 400;
/**
 * Envelopes signed before `issuedAt` existed have no signing time. They stay verifiable (nothing already
 * signed is invalidated), but only until `expiresAt`, and an `expiresAt` further than the longest
 * validity the signer ever gave (3650 days, `--validity-days`' old limit) from now is refused:
 * `9999-12-31` never verifies.
 */
export const LEGACY_MAX_VALIDITY_DAYS = 3650;
/** How far ahead of the verifier's clock `issuedAt` may be (clocks differ a little, never by much). */
export const MAX_CLOCK_SKEW_MS = 5 * 60_000;
const DAY_MS = 86_400_000;

let curve: typeof Curves.ed25519 | undefined;

/** @noble's Ed25519, loaded on first use (workflow code imports this module; see core/lazy-schema.ts for why). */
export function ed25519(): typeof Curves.ed25519 {
  curve ??= (require('@noble/curves/ed25519.js') as typeof Curves).ed25519;
  return curve;
}

const Base64Text = lazySchema(() =>
  zod()
    .string()
    .regex(/^[A-Za-z0-9+/]*={0,2}$/, 'must be standard base64'),
);
/** A key id (keyId): `sha256/` + 43 base64url characters. */
export const KID_PATTERN = /^sha256\/[A-Za-z0-9_-]{43}$/;
export const Kid = lazySchema(() => zod().string().regex(KID_PATTERN, 'must be "sha256/" + 43 base64url characters'));

export const SignatureEntry = lazySchema(() =>
  zod()
    .object({ kid: Kid, alg: zod().literal(ALG), sig: Base64Text.min(1) })
    .strict(),
);
export type SignatureEntry = z.infer<typeof SignatureEntry>;

export const Envelope = lazySchema(() =>
  zod()
    .object({ body: Base64Text.min(1), signatures: zod().array(SignatureEntry) })
    .strict(),
);
export type Envelope = z.infer<typeof Envelope>;

export const Pin = lazySchema(() =>
  zod()
    .object({ kid: Kid, publicKey: Base64Text.min(1), name: zod().string().min(1).optional() })
    .strict(),
);
export type Pin = z.infer<typeof Pin>;

const TrustInput = lazySchema(() =>
  zod()
    .object({
      threshold: zod().number().int().min(1, 'must be at least 1').default(1),
      pins: zod().array(Pin).min(1, 'a trust file needs at least one pin'),
    })
    .strict(),
);

export interface Trust {
  threshold: number;
  /** kid → raw 32-byte public key. */
  keys: Map<string, Uint8Array>;
  pins: Pin[];
  /**
   * What the profile's signers revoked (core/revocation.ts): a revoked revision never verifies, a revoked key's
   * signature never counts. Absent: nothing revoked (a trust without a revocation list).
   */
  revoked?: Revoked;
  /** The signed trust root these pins come from (core/trust-root.ts); absent: a plain trust.yaml. */
  root?: { version: number; digest: string };
}

/** Revocations as a verifier applies them. */
export interface Revoked {
  /** The list's own version (monotonic: a verifier never goes back to a lower one). */
  version: number;
  /** Revision number → its revocation: every envelope of that number, or only the one with `digest`. */
  revisions: Map<number, { digest?: string; reason: string }>;
  /** kid → why it was revoked. */
  keys: Map<string, string>;
}

/** `sha256/` + base64url(SHA-256 of the raw 32-byte public key). */
export function keyId(publicKey: Uint8Array): string {
  return `sha256/${toBase64Url(sha256(publicKey))}`;
}

/** Validate a trust document: each pin's public key must be 32 bytes and match its kid. */
export function parseTrust(data: unknown, source: string): Trust {
  const input = parseWith(TrustInput, data, source);
  const problems: string[] = [];
  const keys = new Map<string, Uint8Array>();
  input.pins.forEach((pin, i) => {
    const raw = fromBase64(pin.publicKey);
    if (raw?.length !== 32) {
      problems.push(
        `  pins[${i}].publicKey: must be a base64 raw 32-byte Ed25519 public key (got ${JSON.stringify(pin.publicKey)})`,
      );
      return;
    }
    if (keyId(raw) !== pin.kid)
      problems.push(`  pins[${i}].kid: does not match its publicKey (expected ${keyId(raw)}, got "${pin.kid}")`);
    if (keys.has(pin.kid)) problems.push(`  pins[${i}].kid: pinned twice (got "${pin.kid}")`);
    keys.set(pin.kid, raw);
  });
  if (input.threshold > input.pins.length) {
    problems.push(`  threshold: cannot exceed the number of pins (${input.pins.length}) (got ${input.threshold})`);
  }
  if (problems.length) throw invalid(source, problems);
  return { threshold: input.threshold, keys, pins: input.pins };
}

function invalid(source: string, lines: string[]): WavegateError {
  return new WavegateError('INVALID_INPUT', `${source}: invalid\n${lines.join('\n')}`, { source });
}

export interface KeyPair {
  kid: string;
  publicKey: Uint8Array;
  secretKey: Uint8Array;
}

/** Derive a key pair from 32 bytes of secret seed (the CLI supplies them from the OS RNG). */
export function keyPairFromSeed(seed: Uint8Array): KeyPair {
  if (seed.length !== 32) throw new Error('an Ed25519 secret key is 32 bytes');
  const publicKey = ed25519().getPublicKey(seed);
  return { kid: keyId(publicKey), publicKey, secretKey: seed };
}

/** The private key file: JSON, written with mode 0600 by the CLI. */
export const SecretKeyFile = lazySchema(() =>
  zod()
    .object({
      type: zod().literal('wavegate.ed25519.secret-key'),
      kid: Kid,
      publicKey: Base64Text,
      secretKey: Base64Text,
    })
    .strict(),
);

export function secretKeyFile(pair: KeyPair): z.infer<typeof SecretKeyFile> {
  return {
    type: 'wavegate.ed25519.secret-key',
    kid: pair.kid,
    publicKey: toBase64(pair.publicKey),
    secretKey: toBase64(pair.secretKey),
  };
}

export function parseSecretKeyFile(data: unknown, source: string): KeyPair {
  // A refusal names a field with its value: never the secret's, however malformed (a near-miss is most of a key).
  const file = parseWith(SecretKeyFile, withSecretHidden(data), source);
  const secret = fromBase64(file.secretKey);
  if (secret?.length !== 32) throw invalid(source, ['  secretKey: must be a base64 32-byte Ed25519 secret key']);
  const pair = keyPairFromSeed(secret);
  if (pair.kid !== file.kid || toBase64(pair.publicKey) !== file.publicKey) {
    throw invalid(source, ['  kid: does not belong to this secret key (the file was edited or mixed up)']);
  }
  return pair;
}

/** The document with a `secretKey` that is not well-formed base64 replaced by a placeholder the checks refuse alike. */
function withSecretHidden(data: unknown): unknown {
  if (data === null || typeof data !== 'object' || Array.isArray(data) || !Object.hasOwn(data, 'secretKey'))
    return data;
  const secret = (data as { secretKey: unknown }).secretKey;
  const wellFormed = typeof secret === 'string' && /^[A-Za-z0-9+/]*={0,2}$/.test(secret);
  return wellFormed ? data : { ...data, secretKey: '[hidden: not base64]' };
}

export function pinOf(pair: Pick<KeyPair, 'kid' | 'publicKey'>, name?: string): Pin {
  return { kid: pair.kid, publicKey: toBase64(pair.publicKey), ...(name ? { name } : {}) };
}

function signEntry(body: Uint8Array, pair: KeyPair): SignatureEntry {
  return { kid: pair.kid, alg: ALG, sig: toBase64(ed25519().sign(body, pair.secretKey)) };
}

/**
 * The revision as it is signed at `now`: `issuedAt` is `now` (the signer's clock), and a revision
 * without `expiresAt` gets one `validityDays` after it.
 */
export function signedContent(revision: Revision, opts: { now: number; validityDays?: number }): Revision {
  return {
    ...revision,
    issuedAt: new Date(opts.now).toISOString(),
    expiresAt:
      revision.expiresAt ?? new Date(opts.now + (opts.validityDays ?? DEFAULT_VALIDITY_DAYS) * DAY_MS).toISOString(),
  };
}

/**
 * What `sign` refuses to sign: content already expired at `now`, or valid longer than
 * MAX_VALIDITY_DAYS. INVALID_INPUT naming `source` and `expiresAt`.
 */
export function assertSignable(content: Revision, now: number, source: string): void {
  const expires = Date.parse(content.expiresAt ?? '');
  const issued = content.issuedAt ? Date.parse(content.issuedAt) : now;
  const problem = !(expires > now)
    ? `is not after the signing time ${new Date(now).toISOString()}: refusing to sign content that is already expired`
    : expires - issued > MAX_VALIDITY_DAYS * DAY_MS
      ? `is ${Math.ceil((expires - issued) / DAY_MS)} days after the signing time; a signature is valid for at most ${MAX_VALIDITY_DAYS} days`
      : undefined;
  if (problem)
    throw new WavegateError(
      'INVALID_INPUT',
      `${source}: invalid\n  expiresAt: ${problem} (got ${JSON.stringify(content.expiresAt)})`,
      { source, field: 'expiresAt' },
    );
}

/**
 * Sign a revision: its canonical JSON (with `issuedAt` and `expiresAt`, see signedContent) becomes the
 * body; the envelope is then what is registered, not the source file. A primitive: `sign` checks the
 * content with assertSignable first (tests use it to make expired envelopes on purpose).
 */
export function signRevision(
  revision: Revision,
  pair: KeyPair,
  opts: { now: number; validityDays?: number },
): Envelope {
  const content = signedContent(revision, opts);
  const body = utf8Encode(canonicalize(content));
  return { body: toBase64(body), signatures: [signEntry(body, pair)] };
}

/** Add a signature. Signing twice with the same key is refused (it would not count twice anyway). */
export function cosignEnvelope(envelope: Envelope, pair: KeyPair): Envelope {
  if (envelope.signatures.some((s) => s.kid === pair.kid)) {
    throw new WavegateError('CONFLICT', `already signed by ${pair.kid}`, { kid: pair.kid });
  }
  const body = fromBase64(envelope.body);
  if (!body) throw invalid('envelope', ['  body: not valid base64']);
  return { body: envelope.body, signatures: [...envelope.signatures, signEntry(body, pair)] };
}

export type VerifyReason =
  | 'MALFORMED'
  | 'UNSUPPORTED_ALG'
  | 'BAD_SIGNATURE'
  | 'UNPINNED_KEY'
  | 'DUPLICATE_SIGNER'
  | 'BELOW_THRESHOLD'
  | 'NOT_CANONICAL'
  | 'INVALID_REVISION'
  | 'MISSING_EXPIRY'
  | 'EXPIRED'
  | 'NOT_YET_VALID'
  | 'VALIDITY_TOO_LONG'
  | 'MISSING_DIGEST'
  | 'NOT_ABOVE_CURRENT'
  | 'REVOKED'
  | 'REVOKED_KEY'
  | 'ROOT_ROLLBACK'
  | 'ROOT_GAP'
  | 'ROOT_FORK'
  | 'METADATA_ROLLBACK'
  | 'STALE'
  | 'WRONG_SUBJECT';

export interface VerifyOk {
  ok: true;
  revision: Revision;
  /** Distinct pinned kids whose signatures verified. */
  signers: string[];
  /** Hex SHA-256 of the body bytes: the content identity of the revision. */
  bodyDigest: string;
  /** Signatures by keys outside the pins: ignored, reported. */
  ignored: string[];
}

export interface VerifyFailure {
  ok: false;
  reason: VerifyReason;
  code: WavegateErrorCode;
  message: string;
  details?: Record<string, unknown>;
}

export type VerifyResult = VerifyOk | VerifyFailure;

/** A verification's failure as a value: its reason code and a message a person can act on. */
export function verifyFailure(reason: VerifyReason, message: string, details?: Record<string, unknown>): VerifyFailure {
  return { ok: false, reason, code: 'INVALID_INPUT', message, ...(details ? { details } : {}) };
}

function hex(bytes: Uint8Array): string {
  let out = '';
  for (const b of bytes) out += b.toString(16).padStart(2, '0');
  return out;
}

export function bodyDigest(envelope: Pick<Envelope, 'body'>): string | undefined {
  const body = fromBase64(envelope.body);
  return body ? hex(sha256(body)) : undefined;
}

export interface VerifyOptions extends RevisionRules {
  /** The clock, in epoch milliseconds. */
  now: number;
  /** The highest registered revision number: the envelope must be above it. */
  current?: number;
  /**
   * The Ed25519 check itself (default: @noble's, strict RFC 8032). A worker passes a memoized one
   * (device/signature-memo.ts): every device of a rollout verifies the same envelope, and a
   * signature's validity over a body under a key is a pure function of the three.
   */
  verifySignature?: (sig: Uint8Array, body: Uint8Array, publicKey: Uint8Array) => boolean;
}

/** Strict Ed25519 verification (RFC 8032, no ZIP-215 leniency); false, never a throw, for bad input. */
export function ed25519Verify(sig: Uint8Array, body: Uint8Array, publicKey: Uint8Array): boolean {
  try {
    return sig.length === 64 && ed25519().verify(sig, body, publicKey, { zip215: false });
  } catch {
    return false;
  }
}

/**
 * Verify an envelope against the trust pins, in this order (the first failure is the reason):
 * shape (MALFORMED / UNSUPPORTED_ALG), every signature by a pinned key valid over the body bytes
 * (BAD_SIGNATURE), no kid twice (DUPLICATE_SIGNER), threshold of distinct pinned signers
 * (UNPINNED_KEY when the only signers are unpinned, else BELOW_THRESHOLD), canonical body
 * (NOT_CANONICAL), digests on every payload file (MISSING_DIGEST), a valid revision, its structure and
 * its signed content rules unless `contentRules: false` (INVALID_REVISION), expiry (MISSING_EXPIRY / EXPIRED), the signing time and the validity period
 * (NOT_YET_VALID / VALIDITY_TOO_LONG, see validityProblem) and the revision number (NOT_ABOVE_CURRENT).
 */
export function verifyEnvelope(envelope: unknown, trust: Trust, opts: VerifyOptions): VerifyResult {
  const signed = verifySignatures(envelope, trust, opts);
  if (!signed.ok) return signed;
  const { body, signers, ignored } = signed;
  const read = documentBody(body);
  if (!read.ok) return read;
  const { content } = read;
  if (typeof content === 'object' && content !== null && Array.isArray((content as { payload?: unknown }).payload)) {
    const files = (content as { payload: unknown[] }).payload;
    const missing = files.findIndex(
      (f) =>
        typeof f !== 'object' ||
        f === null ||
        typeof (f as { sha256?: unknown }).sha256 !== 'string' ||
        !(f as { sha256: string }).sha256,
    );
    if (missing >= 0)
      return verifyFailure('MISSING_DIGEST', `payload[${missing}] has no sha256 digest`, { index: missing });
  }
  // The signed content rules too, unless the caller re-makes a decision on replay (core/revision.ts, RevisionRules).
  const parsed = revisionSchemaFor(opts).safeParse(content);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    return verifyFailure(
      'INVALID_REVISION',
      `envelope body is not a valid revision: ${issue.path.join('.') || '(root)'}: ${issue.message}`,
    );
  }
  const revision = parsed.data;
  const digest = hex(sha256(body));
  const revocation = trust.revoked?.revisions.get(revision.revision);
  if (revocation && (revocation.digest === undefined || revocation.digest === digest))
    return verifyFailure(
      'REVOKED',
      `revision ${revision.profile}#${revision.revision} is revoked by its signers (revocations v${trust.revoked?.version}): ${revocation.reason}`,
      { revision: revision.revision, reason: revocation.reason },
    );
  if (!revision.expiresAt)
    return verifyFailure('MISSING_EXPIRY', 'the revision has no expiresAt; a signed revision must expire');
  const expires = Date.parse(revision.expiresAt);
  if (!(expires > opts.now)) {
    return verifyFailure(
      'EXPIRED',
      `revision ${revision.profile}#${revision.revision} expired at ${revision.expiresAt}`,
      {
        expiresAt: revision.expiresAt,
      },
    );
  }
  const period = validityProblem(revision, expires, opts.now);
  if (period) return period;
  if (opts.current !== undefined && revision.revision <= opts.current) {
    return verifyFailure(
      'NOT_ABOVE_CURRENT',
      `revision ${revision.revision} is not above the current revision ${opts.current}; the channel never moves backwards`,
      { current: opts.current },
    );
  }
  return { ok: true, revision, signers, bodyDigest: digest, ignored };
}

/** The body of an envelope, unverified: the canonical JSON it carries, or why it carries none. */
export function documentBody(body: Uint8Array): { ok: true; content: unknown } | VerifyFailure {
  const text = utf8Decode(body);
  if (text === undefined) return verifyFailure('MALFORMED', 'envelope body is not UTF-8');
  let content: unknown;
  try {
    content = JSON.parse(text);
  } catch {
    return verifyFailure('MALFORMED', 'envelope body is not JSON');
  }
  if (!isCanonicalJson(text))
    return verifyFailure('NOT_CANONICAL', 'envelope body is not canonical JSON (sorted keys, no whitespace)');
  return { ok: true, content };
}

/** Signatures that met a trust's threshold over an envelope's body bytes (verifySignatures). */
export interface SignaturesOk {
  ok: true;
  body: Uint8Array;
  /** Distinct pinned, unrevoked kids whose signatures verified. */
  signers: string[];
  /** Signatures by keys outside the pins (or revoked): ignored, reported. */
  ignored: string[];
}

/**
 * The signature part of every signed document (a revision, a trust root, a revocation list, a timestamp):
 * shape (MALFORMED / UNSUPPORTED_ALG), every signature by a pinned key valid over the body bytes (BAD_SIGNATURE),
 * no kid twice (DUPLICATE_SIGNER), a threshold of distinct pinned signers (UNPINNED_KEY when the only signers are
 * unpinned, REVOKED_KEY when revoked keys' signatures would have made the threshold, else BELOW_THRESHOLD).
 * A revoked key's signature never counts, valid or not.
 */
export function verifySignatures(
  envelope: unknown,
  trust: Pick<Trust, 'threshold' | 'keys' | 'revoked'>,
  opts: Pick<VerifyOptions, 'verifySignature'> = {},
): SignaturesOk | VerifyFailure {
  if (typeof envelope === 'object' && envelope !== null && Array.isArray((envelope as Envelope).signatures)) {
    const bad = (envelope as Envelope).signatures.find(
      (s) => typeof s === 'object' && s !== null && 'alg' in s && s.alg !== ALG,
    );
    if (bad)
      return verifyFailure(
        'UNSUPPORTED_ALG',
        `signature by ${String(bad.kid)} uses alg ${JSON.stringify(bad.alg)}; only "${ALG}" is accepted`,
      );
  }
  const shape = Envelope.safeParse(envelope);
  if (!shape.success) {
    const issue = shape.error.issues[0]!;
    return verifyFailure('MALFORMED', `envelope is malformed: ${issue.path.join('.') || '(root)'}: ${issue.message}`);
  }
  const env = shape.data;
  const body = fromBase64(env.body);
  if (!body) return verifyFailure('MALFORMED', 'envelope body is not valid base64');

  const seen = new Set<string>();
  const signers: string[] = [];
  const ignored: string[] = [];
  const revoked: string[] = [];
  let duplicate: string | undefined;
  for (const entry of env.signatures) {
    if (seen.has(entry.kid)) duplicate ??= entry.kid;
    seen.add(entry.kid);
    const key = trust.keys.get(entry.kid);
    if (!key) {
      ignored.push(entry.kid);
      continue;
    }
    if (trust.revoked?.keys.has(entry.kid)) {
      if (!revoked.includes(entry.kid)) revoked.push(entry.kid);
      ignored.push(entry.kid);
      continue;
    }
    const sig = fromBase64(entry.sig);
    const valid = !!sig && (opts.verifySignature ?? ed25519Verify)(sig, body, key);
    if (!valid)
      return verifyFailure(
        'BAD_SIGNATURE',
        `signature by ${entry.kid} does not verify over the body (tampered body or signature)`,
        { kid: entry.kid },
      );
    if (!signers.includes(entry.kid)) signers.push(entry.kid);
  }
  if (duplicate)
    return verifyFailure(
      'DUPLICATE_SIGNER',
      `${duplicate} signed more than once; each key counts once toward the threshold`,
      {
        kid: duplicate,
      },
    );
  if (signers.length < trust.threshold) {
    if (revoked.length > 0)
      return verifyFailure(
        'REVOKED_KEY',
        `${signers.length} distinct pinned signer(s), ${trust.threshold} required: the signature(s) of ${revoked.join(', ')} do not count, the key is revoked (${revoked.map((k) => trust.revoked?.keys.get(k)).join('; ')})`,
        { signers, revoked },
      );
    if (signers.length === 0 && ignored.length > 0) {
      return verifyFailure('UNPINNED_KEY', `no signature is by a pinned key (signed by ${ignored.join(', ')})`, {
        ignored,
      });
    }
    return verifyFailure(
      'BELOW_THRESHOLD',
      `${signers.length} distinct pinned signer(s), ${trust.threshold} required${ignored.length ? ` (unpinned: ${ignored.join(', ')})` : ''}`,
      { signers, ignored },
    );
  }
  return { ok: true, body, signers, ignored };
}

/**
 * The signing time and validity period of an unexpired revision. With `issuedAt`: not after this
 * clock's now (beyond a small skew: a verifier whose clock is behind the signer's would otherwise
 * accept what has expired), and at most MAX_VALIDITY_DAYS before `expiresAt`. Without it (an
 * envelope signed before `issuedAt` existed): `expiresAt` at most LEGACY_MAX_VALIDITY_DAYS from now.
 */
function validityProblem(revision: Revision, expires: number, now: number): VerifyFailure | undefined {
  const name = `revision ${revision.profile}#${revision.revision}`;
  if (revision.issuedAt === undefined) {
    if (expires - now <= LEGACY_MAX_VALIDITY_DAYS * DAY_MS) return undefined;
    return verifyFailure(
      'VALIDITY_TOO_LONG',
      `${name} has no issuedAt and expires at ${revision.expiresAt}, more than ${LEGACY_MAX_VALIDITY_DAYS} days from now; sign it again`,
      { expiresAt: revision.expiresAt },
    );
  }
  const issued = Date.parse(revision.issuedAt);
  if (issued > now + MAX_CLOCK_SKEW_MS) {
    return verifyFailure(
      'NOT_YET_VALID',
      `${name} was issued at ${revision.issuedAt}, after this clock's ${new Date(now).toISOString()}: this clock is behind (or the envelope is post-dated); refusing`,
      { issuedAt: revision.issuedAt },
    );
  }
  if (expires - issued > MAX_VALIDITY_DAYS * DAY_MS) {
    return verifyFailure(
      'VALIDITY_TOO_LONG',
      `${name} is valid from ${revision.issuedAt} to ${revision.expiresAt}, longer than ${MAX_VALIDITY_DAYS} days`,
      { issuedAt: revision.issuedAt, expiresAt: revision.expiresAt },
    );
  }
  return undefined;
}

/** Decode an envelope's body without verifying it (for display only). */
export function peekBody(envelope: Pick<Envelope, 'body'>): unknown {
  const body = fromBase64(envelope.body);
  const text = body && utf8Decode(body);
  if (text === undefined || text === null) return undefined;
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
