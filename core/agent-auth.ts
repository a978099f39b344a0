import { sha256 } from '@noble/hashes/sha2.js';
import { fromBase64, toBase64, utf8Encode } from './bytes';
import { ed25519, ed25519Verify } from './signing';

/**
 * How a device's agent proves who it is to the gateway (docs/formats.md, "Gateway HTTP API"): every
 * request carries
 *
 *   Authorization: Wavegate-Ed25519 device="<id>", ts="<epoch ms>", nonce="<32 hex>", digest="<hex sha256 of body>", sig="<base64>"
 *
 * with sig = Ed25519 over `wavegate-agent-v1\n<METHOD>\n<path>\n<ts>\n<nonce>\n<hex sha256 of body>`
 * by the device's identity key, pinned in the inventory as `agentKey: "ed25519:<base64 32 bytes>"`.
 * The body's digest travels in the header (`digest`, the same hex the signature covers), so the
 * gateway verifies a request from its headers alone and reads a body only for a device whose signature
 * verified; then the body must hash to the declared digest. A request without `digest` (an agent older
 * than this protocol) is refused (NO_DIGEST, naming the upgrade): accepting it would mean reading
 * bodies before authentication again. A request is fresh when |now - ts| <= 60 s, and a nonce is
 * accepted once within that window. Pure (no Node APIs, the clock passed in): the agent signs with it,
 * the gateway verifies with it.
 */
export const AUTH_SCHEME = 'Wavegate-Ed25519';
export const AUTH_CONTEXT = 'wavegate-agent-v1';
/** How far a request's `ts` may be from the gateway's clock, either way. */
export const AUTH_WINDOW_MS = 60_000;
const DEVICE_ID = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;
const NONCE = /^[0-9a-f]{32}$/;
const TS = /^[0-9]{1,16}$/;
const SIG = /^[A-Za-z0-9+/]{86}==$/;
const DIGEST = /^[0-9a-f]{64}$/;
/** sha256 of no bytes: the digest of every GET. */
export const EMPTY_BODY_DIGEST = 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855';
const PARAMS = ['device', 'ts', 'nonce', 'digest', 'sig'];
export const AGENT_KEY_PREFIX = 'ed25519:';
export const AGENT_KEY_PATTERN = /^ed25519:[A-Za-z0-9+/]{43}=$/;

export interface AuthFields {
  device: string;
  ts: number;
  nonce: string;
  /** Lowercase hex sha256 of the body the agent declares it sends (checked against the body once read). */
  digest: string;
  /** base64 of the 64-byte signature. */
  sig: string;
}

function hex(bytes: Uint8Array): string {
  let out = '';
  for (const b of bytes) out += b.toString(16).padStart(2, '0');
  return out;
}

export function bodyHash(body: Uint8Array): string {
  return hex(sha256(body));
}

/**
 * The exact bytes that are signed. `path` is the request target as sent (path and query); `digest` is
 * the body's hex sha256 (bodyHash), the same value the header's `digest` declares.
 */
export function signatureBase(method: string, path: string, ts: number, nonce: string, digest: string): Uint8Array {
  return utf8Encode(`${AUTH_CONTEXT}\n${method.toUpperCase()}\n${path}\n${ts}\n${nonce}\n${digest}`);
}

/** The `Authorization` header value for a request, signed with the device's 32-byte secret seed. */
export function authorizationHeader(req: {
  device: string;
  method: string;
  path: string;
  body: Uint8Array;
  now: number;
  nonce: string;
  secretKey: Uint8Array;
  /** The Ed25519 signer: the pure one by default; the agent passes Node's native one (the same signature, faster). */
  sign?: (message: Uint8Array, secretKey: Uint8Array) => Uint8Array;
}): string {
  const digest = bodyHash(req.body);
  const message = signatureBase(req.method, req.path, req.now, req.nonce, digest);
  const sig = toBase64((req.sign ?? ((m, k) => ed25519().sign(m, k)))(message, req.secretKey));
  return `${AUTH_SCHEME} device="${req.device}", ts="${req.now}", nonce="${req.nonce}", digest="${digest}", sig="${sig}"`;
}

export type AuthRefusal = { ok: false; reason: AuthReason; message: string };
export type AuthReason =
  | 'MISSING'
  | 'MALFORMED'
  | 'NO_DIGEST'
  | 'UNKNOWN_DEVICE'
  | 'NO_AGENT_KEY'
  | 'STALE'
  | 'BAD_SIGNATURE'
  | 'REPLAY'
  | 'BUSY'
  | 'DEVICE_BUSY';

const refuse = (reason: AuthReason, message: string): AuthRefusal => ({ ok: false, reason, message });

/**
 * Parse an Authorization header: the scheme, then exactly the five parameters, each once, quoted.
 * Bounded (a header longer than 1 KB is refused before any pattern runs). The message never echoes
 * the signature.
 */
export function parseAuthorization(header: string | undefined): { ok: true; fields: AuthFields } | AuthRefusal {
  if (header === undefined || header === '')
    return refuse(
      'MISSING',
      `no Authorization header; send "${AUTH_SCHEME} device=..., ts=..., nonce=..., digest=..., sig=..."`,
    );
  if (header.length > 1024)
    return refuse('MALFORMED', `the Authorization header is ${header.length} characters long, above the limit of 1024`);
  const space = header.indexOf(' ');
  const scheme = space < 0 ? header : header.slice(0, space);
  if (scheme !== AUTH_SCHEME)
    return refuse(
      'MALFORMED',
      `Authorization scheme must be "${AUTH_SCHEME}" (got ${JSON.stringify(scheme.slice(0, 40))})`,
    );
  const params = new Map<string, string>();
  for (const part of header.slice(space + 1).split(',')) {
    const m = /^\s*([a-z]+)="([^"]*)"\s*$/.exec(part);
    if (!m)
      return refuse(
        'MALFORMED',
        `Authorization parameter ${JSON.stringify(part.trim().slice(0, 20))} is not key="value"`,
      );
    if (params.has(m[1]!)) return refuse('MALFORMED', `Authorization parameter ${m[1]} appears twice`);
    params.set(m[1]!, m[2]!);
  }
  for (const k of params.keys())
    if (!PARAMS.includes(k))
      return refuse('MALFORMED', `Authorization parameter ${JSON.stringify(k)} is not one of ${PARAMS.join(', ')}`);
  const device = params.get('device');
  const ts = params.get('ts');
  const nonce = params.get('nonce');
  const sig = params.get('sig');
  if (device === undefined || !DEVICE_ID.test(device))
    return refuse(
      'MALFORMED',
      `Authorization device must be a device id (got ${JSON.stringify(device?.slice(0, 130))})`,
    );
  if (ts === undefined || !TS.test(ts))
    return refuse('MALFORMED', `Authorization ts must be epoch milliseconds (got ${JSON.stringify(ts?.slice(0, 20))})`);
  if (nonce === undefined || !NONCE.test(nonce))
    return refuse(
      'MALFORMED',
      `Authorization nonce must be 32 lowercase hex characters (got ${JSON.stringify(nonce?.slice(0, 40))})`,
    );
  if (sig === undefined || !SIG.test(sig))
    return refuse('MALFORMED', 'Authorization sig must be the base64 of a 64-byte Ed25519 signature');
  const digest = params.get('digest');
  if (digest === undefined) {
    return refuse(
      'NO_DIGEST',
      `the Authorization header has no digest parameter: this gateway authenticates from the headers before it reads a body, and needs the body's sha256 declared there; upgrade the agent on ${JSON.stringify(device)} to a wavegate that sends digest="<hex sha256 of the body>"`,
    );
  }
  if (!DIGEST.test(digest))
    return refuse(
      'MALFORMED',
      `Authorization digest must be the 64 lowercase hex characters of the body's sha256 (got ${JSON.stringify(digest.slice(0, 70))})`,
    );
  // The device id and the nonce outlive the request (the nonce cache, the gateway's records): kept as copies of their
  // own, since a substring keeps the whole header it was cut from alive (at 10,000 agents the remembered nonces
  // held 26 MiB of headers: bench/README.md, "Gateway memory").
  return { ok: true, fields: { device: detached(device), ts: Number(ts), nonce: detached(nonce), digest, sig } };
}

/** A copy of `s` sharing no memory with the string it was cut from (V8 makes a substring of 13 characters or more a slice of it). */
function detached(s: string): string {
  return ` ${s}`.slice(1);
}

/** The raw 32-byte public key of an `agentKey` pin, or undefined when it is not one. */
export function parseAgentKey(pin: string): Uint8Array | undefined {
  if (!AGENT_KEY_PATTERN.test(pin)) return undefined;
  const raw = fromBase64(pin.slice(AGENT_KEY_PREFIX.length));
  return raw && raw.length === 32 ? raw : undefined;
}

export function agentKeyPin(publicKey: Uint8Array): string {
  return `${AGENT_KEY_PREFIX}${toBase64(publicKey)}`;
}

/** Null when `ts` is inside the window around `now`; else why not. */
export function staleness(ts: number, now: number, windowMs = AUTH_WINDOW_MS): string | null {
  const skew = ts - now;
  if (Math.abs(skew) <= windowMs) return null;
  return `the request's ts is ${Math.round(Math.abs(skew) / 1000)} s ${skew < 0 ? 'old' : 'ahead of the gateway clock'}; at most ${windowMs / 1000} s either way (check the device clock)`;
}

/** Whether `fields.sig` signs this method, path, ts, nonce and the declared body digest. */
export function signatureValid(
  fields: AuthFields,
  publicKey: Uint8Array,
  method: string,
  path: string,
  verifySignature: SignatureCheck = ed25519Verify,
): boolean {
  const sig = fromBase64(fields.sig);
  if (sig?.length !== 64) return false;
  return verifySignature(sig, signatureBase(method, path, fields.ts, fields.nonce, fields.digest), publicKey);
}

/** An Ed25519 check: core/signing.ts's (pure) by default; the gateway passes Node's native one (the same answers, 12x less CPU). */
export type SignatureCheck = (sig: Uint8Array, message: Uint8Array, publicKey: Uint8Array) => boolean;

/**
 * Nonces seen within the window, per device. A nonce is remembered until its request's ts has left the
 * window (so a replay is refused for as long as its timestamp would pass), at most `max` in all and at
 * most `perDevice` for any one device: when a device holds its share of live entries its new requests
 * are refused ('device-full'), and only that device's; when the whole cache is full of live entries,
 * new requests are refused ('full') rather than forgetting a live nonce, which would let its request be
 * replayed. With the shares, filling the whole cache takes max / perDevice devices (781 with the
 * defaults), not a few: a legitimate agent sends a request every few seconds at most.
 */
export class NonceCache {
  private readonly byDevice = new Map<string, Map<string, number>>();
  private count = 0;
  private prunedAllAt = -Infinity;

  constructor(
    private readonly max = 200_000,
    private readonly windowMs = AUTH_WINDOW_MS,
    readonly perDevice = DEFAULT_NONCES_PER_DEVICE,
  ) {}

  get size(): number {
    return this.count;
  }

  /** Live nonces remembered for `device`. */
  heldBy(device: string): number {
    return this.byDevice.get(device)?.size ?? 0;
  }

  /** 'fresh' (and remembered), 'replay', 'device-full' (this device holds its share) or 'full'. */
  admit(device: string, nonce: string, ts: number, now: number): 'fresh' | 'replay' | 'device-full' | 'full' {
    let own = this.byDevice.get(device);
    const until = own?.get(nonce);
    if (until !== undefined && until >= now) return 'replay';
    if (own && own.size >= this.perDevice) this.pruneDevice(device, own, now);
    if (own && own.size >= this.perDevice) return 'device-full';
    // A whole pass over the cache at most once a second: a cache full of live entries is not rescanned per request.
    if (this.count >= this.max && now - this.prunedAllAt >= 1_000) this.prune(now);
    if (this.count >= this.max) return 'full';
    if (!own) {
      own = new Map();
      this.byDevice.set(device, own);
    }
    if (own.delete(nonce)) this.count--;
    // `ts + window` is when the request could no longer pass the window check.
    own.set(nonce, Math.max(ts, now) + this.windowMs);
    this.count++;
    return 'fresh';
  }

  prune(now: number): void {
    this.prunedAllAt = now;
    for (const [device, own] of this.byDevice) this.pruneDevice(device, own, now);
  }

  private pruneDevice(device: string, own: Map<string, number>, now: number): void {
    for (const [nonce, until] of own) {
      if (until < now) {
        own.delete(nonce);
        this.count--;
      }
    }
    if (own.size === 0) this.byDevice.delete(device);
  }
}

/** Nonces one device may hold within the window: a few requests a second, far above an agent's pace. */
export const DEFAULT_NONCES_PER_DEVICE = 256;

export interface AuthDecision {
  ok: true;
  device: string;
  /** The body's sha256 the signature covers: the body read afterwards must hash to it (bodyDigestProblem). */
  digest: string;
}

/**
 * The whole check, from the request line and headers alone (no body has been read), in order: header
 * shape (with the body's declared digest), a known device, a pinned agentKey, the time window, the
 * signature over the declared digest, then the nonce (remembered only for a request whose signature
 * verified, so nobody without the key can fill the cache, and within the device's share). `keyOf`
 * answers `undefined` for an unknown device, `null` for a device with no agentKey. The caller reads the
 * body only after `ok`, and refuses it when bodyDigestProblem says so.
 */
export function authenticate(
  req: { header: string | undefined; method: string; path: string; now: number },
  keyOf: (device: string) => Uint8Array | readonly Uint8Array[] | null | undefined,
  nonces: NonceCache,
  verifySignature?: SignatureCheck,
): AuthDecision | AuthRefusal {
  const parsed = parseAuthorization(req.header);
  if (!parsed.ok) return parsed;
  const { fields } = parsed;
  const key = keyOf(fields.device);
  if (key === undefined)
    return refuse('UNKNOWN_DEVICE', `device ${JSON.stringify(fields.device)} is not in the gateway's inventory`);
  if (key === null || (!(key instanceof Uint8Array) && key.length === 0))
    return refuse(
      'NO_AGENT_KEY',
      `device ${JSON.stringify(fields.device)} has no agentKey in the inventory (run \`wavegate agent enroll\` on it and pin the key it prints)`,
    );
  const stale = staleness(fields.ts, req.now);
  if (stale) return refuse('STALE', stale);
  // More than one key during an identity key rotation's overlap (gateway/identity-rotation.ts): either signs.
  const keys: readonly Uint8Array[] = key instanceof Uint8Array ? [key] : key;
  if (!keys.some((k) => signatureValid(fields, k, req.method, req.path, verifySignature)))
    return refuse(
      'BAD_SIGNATURE',
      `the signature does not verify with the agentKey pinned for ${JSON.stringify(fields.device)} (another key, or the request was changed)`,
    );
  const admitted = nonces.admit(fields.device, fields.nonce, fields.ts, req.now);
  if (admitted === 'replay')
    return refuse(
      'REPLAY',
      `nonce ${fields.nonce} was already used by ${JSON.stringify(fields.device)} within the window: a replayed request`,
    );
  if (admitted === 'device-full')
    return refuse(
      'DEVICE_BUSY',
      `${JSON.stringify(fields.device)} sent more than ${nonces.perDevice} requests within the ${AUTH_WINDOW_MS / 1000} s window, its share of the gateway's nonce cache; retry shortly`,
    );
  if (admitted === 'full') return refuse('BUSY', 'the gateway is holding too many recent nonces; retry shortly');
  return { ok: true, device: fields.device, digest: fields.digest };
}

/** Null when `body` is what the verified header declared; else why not (the signed digest, the one received). */
export function bodyDigestProblem(declared: string, body: Uint8Array): string | null {
  const got = bodyHash(body);
  return got === declared
    ? null
    : `the body's sha256 is ${got}, not the digest ${declared} the request was signed with (${body.length} bytes received)`;
}
