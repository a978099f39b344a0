import { ed25519 } from '@noble/curves/ed25519.js';
import { sha256 } from '@noble/hashes/sha2.js';
import { fromBase64, toBase64, utf8Encode } from './bytes';

/**
 * How a device's agent proves who it is to the gateway (docs/formats.md, "Gateway HTTP API"): every
 * request carries
 *
 *   Authorization: Wavegate-Ed25519 device="<id>", ts="<epoch ms>", nonce="<32 hex>", sig="<base64>"
 *
 * with sig = Ed25519 over `wavegate-agent-v1\n<METHOD>\n<path>\n<ts>\n<nonce>\n<hex sha256 of body>`
 * by the device's identity key, pinned in the inventory as `agentKey: "ed25519:<base64 32 bytes>"`.
 * A request is fresh when |now - ts| <= 60 s, and a nonce is accepted once within that window. Pure
 * (no Node APIs, the clock passed in): the agent signs with it, the gateway verifies with it.
 */
export const AUTH_SCHEME = 'Wavegate-Ed25519';
export const AUTH_CONTEXT = 'wavegate-agent-v1';
/** How far a request's `ts` may be from the gateway's clock, either way. */
export const AUTH_WINDOW_MS = 60_000;
const DEVICE_ID = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;
const NONCE = /^[0-9a-f]{32}$/;
const TS = /^[0-9]{1,16}$/;
const SIG = /^[A-Za-z0-9+/]{86}==$/;
export const AGENT_KEY_PREFIX = 'ed25519:';
export const AGENT_KEY_PATTERN = /^ed25519:[A-Za-z0-9+/]{43}=$/;

export interface AuthFields {
  device: string;
  ts: number;
  nonce: string;
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

/** The exact bytes that are signed. `path` is the request target as sent (path and query). */
export function signatureBase(method: string, path: string, ts: number, nonce: string, body: Uint8Array): Uint8Array {
  return utf8Encode(`${AUTH_CONTEXT}\n${method.toUpperCase()}\n${path}\n${ts}\n${nonce}\n${bodyHash(body)}`);
}

/** The `Authorization` header value for a request, signed with the device's 32-byte secret seed. */
export function authorizationHeader(req: { device: string; method: string; path: string; body: Uint8Array; now: number; nonce: string; secretKey: Uint8Array }): string {
  const sig = toBase64(ed25519.sign(signatureBase(req.method, req.path, req.now, req.nonce, req.body), req.secretKey));
  return `${AUTH_SCHEME} device="${req.device}", ts="${req.now}", nonce="${req.nonce}", sig="${sig}"`;
}

export type AuthRefusal = { ok: false; reason: AuthReason; message: string };
export type AuthReason = 'MISSING' | 'MALFORMED' | 'UNKNOWN_DEVICE' | 'NO_AGENT_KEY' | 'STALE' | 'BAD_SIGNATURE' | 'REPLAY' | 'BUSY';

const refuse = (reason: AuthReason, message: string): AuthRefusal => ({ ok: false, reason, message });

/**
 * Parse an Authorization header: the scheme, then exactly the four parameters, each once, quoted.
 * Bounded (a header longer than 1 KB is refused before any pattern runs). The message never echoes
 * the signature.
 */
export function parseAuthorization(header: string | undefined): { ok: true; fields: AuthFields } | AuthRefusal {
  if (header === undefined || header === '') return refuse('MISSING', `no Authorization header; send "${AUTH_SCHEME} device=..., ts=..., nonce=..., sig=..."`);
  if (header.length > 1024) return refuse('MALFORMED', `the Authorization header is ${header.length} characters long, above the limit of 1024`);
  const space = header.indexOf(' ');
  const scheme = space < 0 ? header : header.slice(0, space);
  if (scheme !== AUTH_SCHEME) return refuse('MALFORMED', `Authorization scheme must be "${AUTH_SCHEME}" (got ${JSON.stringify(scheme.slice(0, 40))})`);
  const params = new Map<string, string>();
  for (const part of header.slice(space + 1).split(',')) {
    const m = /^\s*([a-z]+)="([^"]*)"\s*$/.exec(part);
    if (!m) return refuse('MALFORMED', `Authorization parameter ${JSON.stringify(part.trim().slice(0, 20))} is not key="value"`);
    if (params.has(m[1]!)) return refuse('MALFORMED', `Authorization parameter ${m[1]} appears twice`);
    params.set(m[1]!, m[2]!);
  }
  for (const k of params.keys()) if (!['device', 'ts', 'nonce', 'sig'].includes(k)) return refuse('MALFORMED', `Authorization parameter ${JSON.stringify(k)} is not one of device, ts, nonce, sig`);
  const device = params.get('device');
  const ts = params.get('ts');
  const nonce = params.get('nonce');
  const sig = params.get('sig');
  if (device === undefined || !DEVICE_ID.test(device)) return refuse('MALFORMED', `Authorization device must be a device id (got ${JSON.stringify(device?.slice(0, 130))})`);
  if (ts === undefined || !TS.test(ts)) return refuse('MALFORMED', `Authorization ts must be epoch milliseconds (got ${JSON.stringify(ts?.slice(0, 20))})`);
  if (nonce === undefined || !NONCE.test(nonce)) return refuse('MALFORMED', `Authorization nonce must be 32 lowercase hex characters (got ${JSON.stringify(nonce?.slice(0, 40))})`);
  if (sig === undefined || !SIG.test(sig)) return refuse('MALFORMED', 'Authorization sig must be the base64 of a 64-byte Ed25519 signature');
  return { ok: true, fields: { device, ts: Number(ts), nonce, sig } };
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

export function signatureValid(fields: AuthFields, publicKey: Uint8Array, method: string, path: string, body: Uint8Array): boolean {
  const sig = fromBase64(fields.sig);
  if (!sig || sig.length !== 64) return false;
  try {
    return ed25519.verify(sig, signatureBase(method, path, fields.ts, fields.nonce, body), publicKey, { zip215: false });
  } catch {
    return false;
  }
}

/**
 * Nonces seen within the window, per device. A nonce is remembered until its request's ts has left the
 * window (so a replay is refused for as long as its timestamp would pass), at most `max` at once: when
 * full of live entries, new requests are refused (BUSY) rather than forgetting a live nonce, which would
 * let its request be replayed.
 */
export class NonceCache {
  private readonly seen = new Map<string, number>();

  constructor(
    private readonly max = 200_000,
    private readonly windowMs = AUTH_WINDOW_MS,
  ) {}

  get size(): number {
    return this.seen.size;
  }

  /** 'fresh' (and remembered), 'replay', or 'full'. */
  admit(device: string, nonce: string, ts: number, now: number): 'fresh' | 'replay' | 'full' {
    const key = `${device}\n${nonce}`;
    const until = this.seen.get(key);
    if (until !== undefined && until >= now) return 'replay';
    if (this.seen.size >= this.max) this.prune(now);
    if (this.seen.size >= this.max) return 'full';
    // Inserted in arrival order; `ts + window` is when the request could no longer pass the window check.
    this.seen.delete(key);
    this.seen.set(key, Math.max(ts, now) + this.windowMs);
    return 'fresh';
  }

  prune(now: number): void {
    for (const [key, until] of this.seen) if (until < now) this.seen.delete(key);
  }
}

export interface AuthDecision {
  ok: true;
  device: string;
}

/**
 * The whole check, in order: header shape, a known device, a pinned agentKey, the time window, the
 * signature, then the nonce (remembered only for a request whose signature verified, so nobody without
 * the key can fill the cache). `keyOf` answers `undefined` for an unknown device, `null` for a device
 * with no agentKey.
 */
export function authenticate(
  req: { header: string | undefined; method: string; path: string; body: Uint8Array; now: number },
  keyOf: (device: string) => Uint8Array | null | undefined,
  nonces: NonceCache,
): AuthDecision | AuthRefusal {
  const parsed = parseAuthorization(req.header);
  if (!parsed.ok) return parsed;
  const { fields } = parsed;
  const key = keyOf(fields.device);
  if (key === undefined) return refuse('UNKNOWN_DEVICE', `device ${JSON.stringify(fields.device)} is not in the gateway's inventory`);
  if (key === null) return refuse('NO_AGENT_KEY', `device ${JSON.stringify(fields.device)} has no agentKey in the inventory (run \`wavegate agent enroll\` on it and pin the key it prints)`);
  const stale = staleness(fields.ts, req.now);
  if (stale) return refuse('STALE', stale);
  if (!signatureValid(fields, key, req.method, req.path, req.body)) return refuse('BAD_SIGNATURE', `the signature does not verify with the agentKey pinned for ${JSON.stringify(fields.device)} (another key, or the request was changed)`);
  const admitted = nonces.admit(fields.device, fields.nonce, fields.ts, req.now);
  if (admitted === 'replay') return refuse('REPLAY', `nonce ${fields.nonce} was already used by ${JSON.stringify(fields.device)} within the window: a replayed request`);
  if (admitted === 'full') return refuse('BUSY', 'the gateway is holding too many recent nonces; retry shortly');
  return { ok: true, device: fields.device };
}
