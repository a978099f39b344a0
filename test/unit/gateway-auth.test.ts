import { randomBytes } from 'node:crypto';
import { ed25519 } from '@noble/curves/ed25519.js';
import { describe, expect, it } from 'vitest';
import {
  agentKeyPin,
  authenticate,
  authorizationHeader,
  bodyDigestProblem,
  bodyHash,
  EMPTY_BODY_DIGEST,
  NonceCache,
  parseAgentKey,
  parseAuthorization,
  signatureBase,
  staleness,
  AUTH_WINDOW_MS,
} from '../../core/agent-auth';
import { utf8Encode } from '../../core/bytes';

/** The gateway's request authentication (core/agent-auth.ts): pure, the clock passed in. */
describe('gateway auth', () => {
  const seed = randomBytes(32);
  const pub = ed25519.getPublicKey(seed);
  const otherSeed = randomBytes(32);
  const now = 1_780_000_000_000;
  const body = utf8Encode('{"knownVersion":0}');
  const nonce = () => randomBytes(16).toString('hex');
  const header = (
    over: Partial<{
      device: string;
      path: string;
      body: Uint8Array;
      now: number;
      nonce: string;
      secretKey: Uint8Array;
      method: string;
    }> = {},
  ) =>
    authorizationHeader({
      device: 'dev-1',
      method: 'POST',
      path: '/v1/sync',
      body,
      now,
      nonce: nonce(),
      secretKey: seed,
      ...over,
    });
  const keys = (device: string) => (device === 'dev-1' ? pub : device === 'dev-nokey' ? null : undefined);
  /** From the headers alone, then (as the gateway does after `ok`) the body against the declared digest. */
  const check = (
    h: string | undefined,
    over: Partial<{ path: string; body: Uint8Array; now: number; method: string }> = {},
    nonces = new NonceCache(),
  ) => {
    const { body: sent = body, ...rest } = over;
    const auth = authenticate({ header: h, method: 'POST', path: '/v1/sync', now, ...rest }, keys, nonces);
    if (!auth.ok) return auth;
    const problem = bodyDigestProblem(auth.digest, sent);
    return problem ? { ok: false, reason: 'BODY_DIGEST', message: problem } : { ok: true, device: auth.device };
  };

  it('the signature base is the documented string', () => {
    const base = new TextDecoder().decode(
      signatureBase('post', '/v1/sync', 12, 'ab'.repeat(16), bodyHash(utf8Encode(''))),
    );
    expect(base).toBe(
      `wavegate-agent-v1\nPOST\n/v1/sync\n12\n${'ab'.repeat(16)}\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855`,
    );
  });

  it('a correctly signed request passes and names its device', () => {
    expect(check(header())).toEqual({ ok: true, device: 'dev-1' });
  });

  it("the header declares the body's digest (the hash the signature covers); an empty body's is the documented constant", () => {
    const parsed = parseAuthorization(header());
    expect(parsed.ok && parsed.fields.digest).toBe(bodyHash(body));
    expect(bodyHash(new Uint8Array())).toBe(EMPTY_BODY_DIGEST);
  });

  it('an agent that sends no digest (older protocol) is refused NO_DIGEST, naming the upgrade', () => {
    const old = header().replace(/, digest="[0-9a-f]+"/, '');
    expect(check(old)).toMatchObject({
      ok: false,
      reason: 'NO_DIGEST',
      message: expect.stringMatching(/upgrade the agent on "dev-1"/),
    });
    expect(parseAuthorization(header().replace(/digest="[0-9a-f]+"/, 'digest="XYZ"'))).toMatchObject({
      ok: false,
      reason: 'MALFORMED',
      message: expect.stringContaining('digest'),
    });
  });

  it('a body other than the one whose digest was signed is refused after the headers verified', () => {
    expect(check(header(), { body: utf8Encode('{"knownVersion":1}') })).toMatchObject({
      ok: false,
      reason: 'BODY_DIGEST',
      message: expect.stringContaining(bodyHash(body)),
    });
    // Changing the declared digest to the new body's breaks the signature.
    const forged = header().replace(/digest="[0-9a-f]+"/, `digest="${bodyHash(utf8Encode('{"knownVersion":1}'))}"`);
    expect(check(forged, { body: utf8Encode('{"knownVersion":1}') })).toMatchObject({
      ok: false,
      reason: 'BAD_SIGNATURE',
    });
  });

  it('parses exactly the five quoted parameters; anything else is MALFORMED, never echoing the signature', () => {
    const good = header();
    const parsed = parseAuthorization(good);
    expect(parsed.ok && parsed.fields.device).toBe('dev-1');
    expect(parseAuthorization(undefined)).toMatchObject({ ok: false, reason: 'MISSING' });
    expect(parseAuthorization('Bearer abc')).toMatchObject({
      ok: false,
      reason: 'MALFORMED',
      message: expect.stringContaining('scheme'),
    });
    expect(parseAuthorization(`${good}, extra="1"`)).toMatchObject({
      ok: false,
      reason: 'MALFORMED',
      message: expect.stringContaining('extra'),
    });
    expect(parseAuthorization(good.replace('device="dev-1"', 'device="dev-1", device="dev-2"'))).toMatchObject({
      ok: false,
      message: expect.stringContaining('twice'),
    });
    expect(parseAuthorization(good.replace(/nonce="[0-9a-f]+"/, 'nonce="xyz"'))).toMatchObject({
      ok: false,
      message: expect.stringContaining('nonce'),
    });
    const badSig = parseAuthorization(good.replace(/sig="[^"]+"/, 'sig="AAAA"'));
    expect(badSig).toMatchObject({ ok: false, message: expect.stringContaining('sig') });
    expect(JSON.stringify(badSig)).not.toContain('AAAA');
    expect(parseAuthorization(`Wavegate-Ed25519 device="${'a'.repeat(2000)}"`)).toMatchObject({
      ok: false,
      message: expect.stringContaining('1024'),
    });
  });

  it("an unknown device, a device without agentKey, another device's key, a changed body or path are refused with the reason", () => {
    expect(check(header({ device: 'dev-9' }))).toMatchObject({
      ok: false,
      reason: 'UNKNOWN_DEVICE',
      message: expect.stringContaining('dev-9'),
    });
    expect(check(header({ device: 'dev-nokey' }))).toMatchObject({ ok: false, reason: 'NO_AGENT_KEY' });
    expect(check(header({ secretKey: otherSeed }))).toMatchObject({ ok: false, reason: 'BAD_SIGNATURE' });
    expect(check(header(), { path: '/v1/report' })).toMatchObject({ ok: false, reason: 'BAD_SIGNATURE' });
    expect(check(header(), { method: 'GET' })).toMatchObject({ ok: false, reason: 'BAD_SIGNATURE' });
  });

  it('the time window: 60 s either way', () => {
    expect(staleness(now - AUTH_WINDOW_MS, now)).toBeNull();
    expect(staleness(now + AUTH_WINDOW_MS, now)).toBeNull();
    expect(staleness(now - AUTH_WINDOW_MS - 1, now)).toMatch(/old/);
    expect(staleness(now + 120_000, now)).toMatch(/ahead/);
    expect(check(header({ now: now - 61_000 }))).toMatchObject({ ok: false, reason: 'STALE' });
  });

  it('a replayed request (same nonce within the window) is REPLAY; after the window its ts is stale anyway', () => {
    const nonces = new NonceCache();
    const h = header();
    expect(check(h, {}, nonces).ok).toBe(true);
    expect(check(h, {}, nonces)).toMatchObject({ ok: false, reason: 'REPLAY' });
    expect(check(h, { now: now + 30_000 }, nonces)).toMatchObject({ ok: false, reason: 'REPLAY' });
    expect(check(h, { now: now + 61_000 }, nonces)).toMatchObject({ ok: false, reason: 'STALE' });
  });

  it('a request whose signature fails is not remembered: the nonce cache holds only verified requests', () => {
    const nonces = new NonceCache();
    check(header({ secretKey: otherSeed }), {}, nonces);
    check(header({ device: 'dev-9' }), {}, nonces);
    expect(nonces.size).toBe(0);
  });

  it('the nonce cache is bounded: expired entries are pruned, and a cache full of live ones refuses (BUSY) instead of forgetting', () => {
    const nonces = new NonceCache(2, 1000);
    expect(nonces.admit('d', 'a', now, now)).toBe('fresh');
    expect(nonces.admit('d', 'b', now, now)).toBe('fresh');
    expect(nonces.admit('d', 'c', now, now)).toBe('full');
    expect(nonces.admit('d', 'a', now, now + 500)).toBe('replay');
    expect(nonces.admit('d', 'c', now + 2000, now + 2000)).toBe('fresh');
    expect(nonces.size).toBe(1);
    expect(nonces.admit('e', 'c', now + 2000, now + 2000)).toBe('fresh');
  });

  it('one device cannot fill the nonce cache for the others: past its share it alone is refused (DEVICE_BUSY)', () => {
    const nonces = new NonceCache(1_000, AUTH_WINDOW_MS, 50);
    let refused = 0;
    for (let i = 0; i < 1_000; i++) if (nonces.admit('greedy', nonce(), now, now) === 'device-full') refused++;
    expect(refused).toBe(950);
    expect(nonces.heldBy('greedy')).toBe(50);
    // Every other device still gets its requests in.
    for (let d = 0; d < 10; d++)
      for (let i = 0; i < 50; i++) expect(nonces.admit(`dev-${d}`, nonce(), now, now)).toBe('fresh');
    // Through authenticate: the greedy device's next request is DEVICE_BUSY (the gateway answers 429), dev-1's passes.
    const small = new NonceCache(1_000, AUTH_WINDOW_MS, 2);
    expect(check(header(), {}, small).ok).toBe(true);
    expect(check(header(), {}, small).ok).toBe(true);
    expect(check(header(), {}, small)).toMatchObject({
      ok: false,
      reason: 'DEVICE_BUSY',
      message: expect.stringContaining('"dev-1"'),
    });
    // Its share comes back as its nonces leave the window.
    expect(check(header({ now: now + 121_000 }), { now: now + 121_000 }, small).ok).toBe(true);
  });

  it('agentKey pins: ed25519:<base64 of 32 bytes>, round trip', () => {
    const pin = agentKeyPin(pub);
    expect(pin).toMatch(/^ed25519:[A-Za-z0-9+/]{43}=$/);
    expect(parseAgentKey(pin)).toEqual(pub);
    expect(parseAgentKey('ed25519:abc')).toBeUndefined();
    expect(parseAgentKey(pin.replace('ed25519:', 'rsa:'))).toBeUndefined();
  });
});
