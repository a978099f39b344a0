import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { fromBase64, toBase64, utf8Encode } from '../../../core/bytes';
import { canonicalize, isCanonicalJson } from '../../../core/canonical';
import { decideRegistration } from '../../../core/registry';
import type { Revision } from '../../../core/revision';
import {
  assertSignable,
  cosignEnvelope,
  MAX_CLOCK_SKEW_MS,
  MAX_VALIDITY_DAYS,
  signedContent,
  keyId,
  keyPairFromSeed,
  parseSecretKeyFile,
  parseTrust,
  pinOf,
  secretKeyFile,
  signRevision,
  verifyEnvelope,
  type Envelope,
  type KeyPair,
} from '../../../core/signing';
import { ed25519 } from '@noble/curves/ed25519.js';
import { sha256 } from '@noble/hashes/sha2.js';

const NOW = Date.parse('2026-01-01T00:00:00Z');
const seed = (n: number) => new Uint8Array(32).fill(n);
const alice = keyPairFromSeed(seed(1));
const bob = keyPairFromSeed(seed(2));
const mallory = keyPairFromSeed(seed(3));

const revision = (n = 15, extra: Partial<Revision> = {}): Revision => ({
  profile: 'production',
  revision: n,
  apply: 'install -m 0644 "$WAVEGATE_STAGING/app.conf" /etc/app.conf',
  verify: 'grep -q "version=15" /etc/app.conf',
  previous: n - 1,
  payload: [{ name: 'app.conf', sha256: 'a'.repeat(64), size: 10, source: 'files/app.conf' }],
  risk: 'risky',
  expiresAt: '2027-01-01T00:00:00.000Z',
  ...extra,
});

const trust = (threshold: number, ...pairs: KeyPair[]) =>
  parseTrust({ threshold, pins: pairs.map((p) => pinOf(p)) }, 'trust.yaml');

function signed(rev: Revision = revision(), ...pairs: KeyPair[]): Envelope {
  const [first, ...rest] = pairs.length ? pairs : [alice];
  let env = signRevision(rev, first!, { now: NOW });
  for (const p of rest) env = cosignEnvelope(env, p);
  return env;
}

/** Sign arbitrary body bytes directly, bypassing canonicalization. */
function rawEnvelope(bodyText: string, ...pairs: KeyPair[]): Envelope {
  const body = utf8Encode(bodyText);
  return {
    body: toBase64(body),
    signatures: pairs.map((p) => ({
      kid: p.kid,
      alg: 'Ed25519' as const,
      sig: toBase64(ed25519.sign(body, p.secretKey)),
    })),
  };
}

function flipByte(b64: string, index: number): string {
  const bytes = fromBase64(b64)!;
  bytes[index] = bytes[index]! ^ 0x01;
  return toBase64(bytes);
}

describe('canonical JSON', () => {
  it('sorts keys, drops whitespace and undefined members', () => {
    expect(canonicalize({ b: 1, a: [true, null, 'x'], c: undefined, d: { z: 1, y: 2 } })).toBe(
      '{"a":[true,null,"x"],"b":1,"d":{"y":2,"z":1}}',
    );
  });
  it('refuses non-finite numbers and non-JSON values', () => {
    expect(() => canonicalize({ a: Number.NaN })).toThrow(/finite/);
    expect(() => canonicalize({ a: Infinity })).toThrow(/finite/);
    expect(() => canonicalize([undefined])).toThrow(/undefined/);
    expect(() => canonicalize({ a: 1n })).toThrow(/bigint/);
    expect(() => canonicalize(new Date(0))).toThrow(/plain objects/);
  });
  it('recognises canonical text', () => {
    expect(isCanonicalJson('{"a":1,"b":2}')).toBe(true);
    expect(isCanonicalJson('{"b":2,"a":1}')).toBe(false);
    expect(isCanonicalJson('{"a": 1}')).toBe(false);
    expect(isCanonicalJson('{"a":1,"a":1}')).toBe(false);
  });
});

describe('keys', () => {
  it('kid is sha256/ + base64url of SHA-256 of the raw public key', () => {
    const expected = Buffer.from(sha256(alice.publicKey)).toString('base64url');
    expect(alice.kid).toBe(`sha256/${expected}`);
    expect(keyId(alice.publicKey)).toBe(alice.kid);
  });
  it('round-trips a secret key file and catches a mismatched kid', () => {
    const file = secretKeyFile(alice);
    expect(parseSecretKeyFile(file, 'k.json').kid).toBe(alice.kid);
    expect(() => parseSecretKeyFile({ ...file, kid: bob.kid }, 'k.json')).toThrow(/does not belong/);
  });
  it('a malformed secret key is refused without a character of it in the message', () => {
    const file = secretKeyFile(alice);
    // One bad character: the rest of the value is the whole key.
    const nearMiss = `${file.secretKey.slice(0, 20)}!${file.secretKey.slice(21)}`;
    let message = '';
    try {
      parseSecretKeyFile({ ...file, secretKey: nearMiss }, 'k.json');
    } catch (err) {
      message = (err as Error).message;
    }
    expect(message).toMatch(/secretKey/);
    expect(message).not.toContain(file.secretKey.slice(0, 20));
    expect(message).not.toContain(file.secretKey.slice(21, 40));
  });
  it('trust files must pin keys that match their kid, and a reachable threshold', () => {
    expect(() =>
      parseTrust({ threshold: 1, pins: [{ kid: bob.kid, publicKey: toBase64(alice.publicKey) }] }, 't.yaml'),
    ).toThrow(/pins\[0\]\.kid/);
    expect(() => parseTrust({ threshold: 3, pins: [pinOf(alice), pinOf(bob)] }, 't.yaml')).toThrow(/threshold/);
  });
});

describe('verifyEnvelope', () => {
  it('accepts a threshold of distinct pinned signers', () => {
    const result = verifyEnvelope(signed(revision(), alice, bob), trust(2, alice, bob), { now: NOW });
    expect(result).toMatchObject({ ok: true, signers: [alice.kid, bob.kid] });
  });
  it('BAD_SIGNATURE: a flipped byte in the body', () => {
    const env = signed();
    const tampered = { ...env, body: flipByte(env.body, 40) };
    expect(verifyEnvelope(tampered, trust(1, alice), { now: NOW })).toMatchObject({
      ok: false,
      reason: 'BAD_SIGNATURE',
    });
  });
  it('BAD_SIGNATURE: a flipped byte in the signature', () => {
    const env = signed();
    const tampered = { ...env, signatures: [{ ...env.signatures[0]!, sig: flipByte(env.signatures[0]!.sig, 5) }] };
    expect(verifyEnvelope(tampered, trust(1, alice), { now: NOW })).toMatchObject({
      ok: false,
      reason: 'BAD_SIGNATURE',
    });
  });
  it('UNPINNED_KEY: signed only by a key that is not pinned', () => {
    expect(verifyEnvelope(signed(revision(), mallory), trust(1, alice), { now: NOW })).toMatchObject({
      ok: false,
      reason: 'UNPINNED_KEY',
    });
  });
  it('BELOW_THRESHOLD: one pinned signer of two required (an unpinned cosigner does not count)', () => {
    const result = verifyEnvelope(signed(revision(), alice, mallory), trust(2, alice, bob), { now: NOW });
    expect(result).toMatchObject({ ok: false, reason: 'BELOW_THRESHOLD' });
  });
  it('DUPLICATE_SIGNER: the same key twice does not reach the threshold', () => {
    const env = signed();
    const twice = { ...env, signatures: [env.signatures[0]!, env.signatures[0]!] };
    expect(verifyEnvelope(twice, trust(2, alice, bob), { now: NOW })).toMatchObject({
      ok: false,
      reason: 'DUPLICATE_SIGNER',
    });
    expect(() => cosignEnvelope(env, alice)).toThrow(/already signed/);
  });
  it('EXPIRED: past expiresAt at the given now', () => {
    const env = signed(revision(15, { expiresAt: '2025-12-31T23:59:59Z' }));
    expect(verifyEnvelope(env, trust(1, alice), { now: NOW })).toMatchObject({ ok: false, reason: 'EXPIRED' });
  });
  it('sign adds an expiry when the revision has none', () => {
    const { expiresAt: _drop, ...rest } = revision();
    const env = signRevision(rest as Revision, alice, { now: NOW, validityDays: 1 });
    const ok = verifyEnvelope(env, trust(1, alice), { now: NOW });
    expect(ok.ok && ok.revision.expiresAt).toBe('2026-01-02T00:00:00.000Z');
    expect(verifyEnvelope(env, trust(1, alice), { now: NOW + 2 * 86_400_000 })).toMatchObject({ reason: 'EXPIRED' });
  });
  it('MISSING_EXPIRY: a body without expiresAt', () => {
    const { expiresAt: _drop, ...rest } = revision();
    expect(verifyEnvelope(rawEnvelope(canonicalize(rest), alice), trust(1, alice), { now: NOW })).toMatchObject({
      reason: 'MISSING_EXPIRY',
    });
  });
  it('NOT_CANONICAL: a validly signed body with whitespace or unsorted keys', () => {
    const pretty = JSON.stringify(revision(), null, 2);
    expect(verifyEnvelope(rawEnvelope(pretty, alice), trust(1, alice), { now: NOW })).toMatchObject({
      ok: false,
      reason: 'NOT_CANONICAL',
    });
  });
  it('MISSING_DIGEST: a payload file without sha256', () => {
    const rev = revision() as unknown as Record<string, unknown>;
    const body = canonicalize({ ...rev, payload: [{ name: 'app.conf', size: 10, source: 'files/app.conf' }] });
    expect(verifyEnvelope(rawEnvelope(body, alice), trust(1, alice), { now: NOW })).toMatchObject({
      ok: false,
      reason: 'MISSING_DIGEST',
    });
  });
  it('NOT_ABOVE_CURRENT: a revision number not above the current one', () => {
    expect(verifyEnvelope(signed(revision(15)), trust(1, alice), { now: NOW, current: 15 })).toMatchObject({
      ok: false,
      reason: 'NOT_ABOVE_CURRENT',
    });
  });
  it('MALFORMED and UNSUPPORTED_ALG', () => {
    expect(verifyEnvelope({ body: '!!', signatures: [] }, trust(1, alice), { now: NOW })).toMatchObject({
      reason: 'MALFORMED',
    });
    const env = signed();
    const rsa = { ...env, signatures: [{ ...env.signatures[0]!, alg: 'RS256' }] };
    expect(verifyEnvelope(rsa, trust(1, alice), { now: NOW })).toMatchObject({ reason: 'UNSUPPORTED_ALG' });
  });
});

describe('decideRegistration', () => {
  const t = trust(2, alice, bob);
  const base = { profile: 'production', trust: t, now: NOW };
  const r14 = signed(revision(14), alice, bob);
  const r15 = signed(revision(15), alice, bob);

  it('registers a verified envelope above every registered revision', () => {
    expect(decideRegistration({ ...base, registered: [r14], envelope: r15 })).toMatchObject({
      outcome: 'registered',
      revision: { revision: 15 },
    });
  });
  it('the same envelope again returns the stored one', () => {
    const again = decideRegistration({ ...base, registered: [r14, r15], envelope: JSON.parse(JSON.stringify(r15)) });
    expect(again).toMatchObject({ outcome: 'existing', envelope: r15 });
  });
  it('the same number with other content is a CONFLICT', () => {
    const other = signed(revision(15, { verify: 'grep -q "version=15b" /etc/app.conf' }), alice, bob);
    expect(decideRegistration({ ...base, registered: [r14, r15], envelope: other })).toMatchObject({
      outcome: 'refused',
      code: 'CONFLICT',
      reason: 'CONFLICT',
    });
  });
  it('a lower revision is refused with NOT_ABOVE_CURRENT', () => {
    const r13 = signed(revision(13), alice, bob);
    expect(decideRegistration({ ...base, registered: [r14, r15], envelope: r13 })).toMatchObject({
      outcome: 'refused',
      reason: 'NOT_ABOVE_CURRENT',
    });
  });
  it('below threshold, tampered, non-canonical and expired are refused with their reasons', () => {
    expect(decideRegistration({ ...base, registered: [], envelope: signed(revision(16), alice) })).toMatchObject({
      reason: 'BELOW_THRESHOLD',
    });
    expect(
      decideRegistration({ ...base, registered: [], envelope: { ...r15, body: flipByte(r15.body, 30) } }),
    ).toMatchObject({ reason: 'BAD_SIGNATURE' });
    expect(
      decideRegistration({
        ...base,
        registered: [],
        envelope: rawEnvelope(JSON.stringify(revision(16), null, 1), alice, bob),
      }),
    ).toMatchObject({ reason: 'NOT_CANONICAL' });
    expect(
      decideRegistration({
        ...base,
        registered: [],
        envelope: signed(revision(16, { expiresAt: '2020-01-01T00:00:00Z' }), alice, bob),
      }),
    ).toMatchObject({ reason: 'EXPIRED' });
  });
  it('a revision of another profile is refused', () => {
    const other = signed({ ...revision(16), profile: 'staging' }, alice, bob);
    expect(decideRegistration({ ...base, registered: [], envelope: other })).toMatchObject({ reason: 'WRONG_PROFILE' });
  });
});

describe('validity: issuedAt and its bounds', () => {
  const DAY = 86_400_000;
  const body = (extra: Partial<Revision>) => rawEnvelope(canonicalize({ ...revision(), ...extra }), alice);

  it('signRevision signs issuedAt (the signing time) into the body', () => {
    const ok = verifyEnvelope(signed(revision(15, { expiresAt: undefined })), trust(1, alice), { now: NOW });
    expect(ok.ok && ok.revision.issuedAt).toBe('2026-01-01T00:00:00.000Z');
    expect(ok.ok && ok.revision.expiresAt).toBe('2027-01-01T00:00:00.000Z');
  });

  it('VALIDITY_TOO_LONG: an envelope valid for more than 400 days from its issuedAt (9999-12-31)', () => {
    const forever = body({ issuedAt: '2026-01-01T00:00:00Z', expiresAt: '9999-12-31T00:00:00Z' });
    expect(verifyEnvelope(forever, trust(1, alice), { now: NOW })).toMatchObject({
      ok: false,
      reason: 'VALIDITY_TOO_LONG',
    });
    const justInside = body({
      issuedAt: '2026-01-01T00:00:00Z',
      expiresAt: new Date(NOW + MAX_VALIDITY_DAYS * DAY).toISOString(),
    });
    expect(verifyEnvelope(justInside, trust(1, alice), { now: NOW }).ok).toBe(true);
  });

  it('NOT_YET_VALID: a verifier whose clock is behind the signing time refuses instead of trusting its slow clock', () => {
    const env = body({ issuedAt: '2026-06-01T00:00:00Z', expiresAt: '2027-01-01T00:00:00Z' });
    expect(verifyEnvelope(env, trust(1, alice), { now: NOW })).toMatchObject({ ok: false, reason: 'NOT_YET_VALID' });
    expect(
      verifyEnvelope(env, trust(1, alice), { now: Date.parse('2026-06-01T00:00:00Z') - MAX_CLOCK_SKEW_MS }).ok,
    ).toBe(true);
  });

  it('an envelope signed before issuedAt existed still verifies until its expiresAt, but never with an expiry beyond 3650 days from now', () => {
    const old = body({ expiresAt: '2031-11-29T09:18:15.673Z' }); // the shape of the demo profile's envelopes
    expect(verifyEnvelope(old, trust(1, alice), { now: NOW }).ok).toBe(true);
    expect(verifyEnvelope(old, trust(1, alice), { now: Date.parse('2031-11-30T00:00:00Z') })).toMatchObject({
      reason: 'EXPIRED',
    });
    expect(verifyEnvelope(body({ expiresAt: '9999-12-31T00:00:00Z' }), trust(1, alice), { now: NOW })).toMatchObject({
      ok: false,
      reason: 'VALIDITY_TOO_LONG',
    });
  });

  it('assertSignable refuses expired content and a validity above 400 days, naming expiresAt', () => {
    const at = (expiresAt: string) => () =>
      assertSignable(signedContent(revision(15, { expiresAt }), { now: NOW }), NOW, 'rev.yaml');
    expect(at('2025-12-31T23:59:59Z')).toThrow(/rev\.yaml: invalid\n {2}expiresAt: .*already expired/);
    expect(at('9999-12-31T00:00:00Z')).toThrow(
      /expiresAt: is \d+ days after the signing time; a signature is valid for at most 400 days/,
    );
    expect(at('2026-12-31T00:00:00Z')).not.toThrow();
  });
});

describe('properties', () => {
  const json: fc.Arbitrary<unknown> = fc.letrec((tie) => ({
    value: fc.oneof(
      { depthSize: 'small' },
      fc.constant(null),
      fc.boolean(),
      fc.double({ noNaN: true, noDefaultInfinity: true }),
      fc.integer(),
      fc.string({ unit: 'grapheme' }),
      fc.array(tie('value')),
      fc.dictionary(fc.string(), tie('value')),
    ),
  })).value;

  it('canonical JSON is a fixed point and ignores key order', () => {
    fc.assert(
      fc.property(json, (value) => {
        const text = canonicalize(value);
        expect(isCanonicalJson(text)).toBe(true);
        expect(canonicalize(JSON.parse(text))).toBe(text);
        if (value && typeof value === 'object' && !Array.isArray(value)) {
          const reversed = Object.fromEntries(Object.entries(value).reverse());
          expect(canonicalize(reversed)).toBe(text);
        }
      }),
      { numRuns: 300 },
    );
  });

  it('any flipped bit in the body or the signature is refused', () => {
    const env = signed(revision(), alice);
    const body = fromBase64(env.body)!;
    const sig = fromBase64(env.signatures[0]!.sig)!;
    fc.assert(
      fc.property(fc.boolean(), fc.nat(), fc.integer({ min: 0, max: 7 }), (inBody, at, bit) => {
        const bytes = (inBody ? body : sig).slice();
        bytes[at % bytes.length]! ^= 1 << bit;
        const tampered = inBody
          ? { ...env, body: toBase64(bytes) }
          : { ...env, signatures: [{ ...env.signatures[0]!, sig: toBase64(bytes) }] };
        const result = verifyEnvelope(tampered, trust(1, alice), { now: NOW });
        expect(result.ok).toBe(false);
      }),
      { numRuns: 200 },
    );
  });
});
