import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { signDocument } from '../../../core/signed-document';
import { keyPairFromSeed, parseTrust, pinOf, type VerifyFailure } from '../../../core/signing';
import {
  freshnessOf,
  MAX_TIMESTAMP_EXPIRY_MS,
  timestampContent,
  verifyTimestamp,
  type Timestamp,
} from '../../../core/timestamp';

/** core/timestamp.ts: the online role's word that a device's view is current, and nothing more. */
describe('timestamps: freshness for what an agent is told', () => {
  const role = keyPairFromSeed(randomBytes(32));
  const release = keyPairFromSeed(randomBytes(32));
  const trust = parseTrust({ threshold: 1, pins: [pinOf(role)] }, 'timestamp role');
  const now = Date.parse('2026-12-07T12:00:00.000Z');
  const desired = { revision: 3, digest: 'a'.repeat(64) };
  const content = (over: Partial<ReturnType<typeof timestampContent>> = {}, at = now, expiryMs?: number) => ({
    ...timestampContent({
      device: 'edge-01',
      profile: 'motd',
      root: 2,
      revocations: 1,
      desired,
      now: at,
      ...(expiryMs ? { expiryMs } : {}),
    }),
    ...over,
  });
  const verify = (body: unknown, opts: Partial<Parameters<typeof verifyTimestamp>[2]> = {}, by = [role]) =>
    verifyTimestamp(signDocument(body, by), trust, { device: 'edge-01', profile: 'motd', now, ...opts });
  const reason = (r: Timestamp | VerifyFailure) => ('reason' in r ? r.reason : 'ok');

  it('one signed by the role for this device and profile verifies; fresh until it expires (default 24 h), then stale', () => {
    const ok = verify(content());
    expect(reason(ok)).toBe('ok');
    const held = (ok as Timestamp).content;
    expect(held).toMatchObject({ device: 'edge-01', profile: 'motd', root: 2, revocations: 1, desired });
    expect(freshnessOf(held, now + 23 * 3_600_000)).toEqual({ fresh: true, until: '2026-12-08T12:00:00.000Z' });
    expect(freshnessOf(held, now + 24 * 3_600_000)).toEqual({
      fresh: false,
      why: 'the newest timestamp expired at 2026-12-08T12:00:00.000Z',
    });
    expect(freshnessOf(undefined, now)).toEqual({ fresh: false, why: 'no timestamp received yet' });
  });

  it('a release key is not the timestamp role, and the role has no say without a root naming it', () => {
    expect(reason(verify(content(), {}, [release]))).toBe('UNPINNED_KEY');
    expect(
      reason(verifyTimestamp(signDocument(content(), [role]), undefined, { device: 'edge-01', profile: 'motd', now })),
    ).toBe('UNPINNED_KEY');
  });

  it("another device's or profile's timestamp, a tampered one, a post-dated one, one valid too long: refused, named", () => {
    expect(reason(verify(content({ device: 'edge-02' })))).toBe('WRONG_SUBJECT');
    expect(reason(verify(content({ profile: 'other' })))).toBe('WRONG_SUBJECT');
    const envelope = signDocument(content(), [role]);
    const tampered = { ...envelope, body: signDocument(content({ root: 9 }), [role]).body };
    expect(reason(verifyTimestamp(tampered, trust, { device: 'edge-01', profile: 'motd', now }))).toBe('BAD_SIGNATURE');
    expect(reason(verify(content({}, now + 3_600_000)))).toBe('NOT_YET_VALID');
    expect(reason(verify(content({}, now, MAX_TIMESTAMP_EXPIRY_MS + 1)))).toBe('VALIDITY_TOO_LONG');
    expect(reason(verify({ ...content(), extra: 1 }))).toBe('MALFORMED');
  });

  it('a replayed older timestamp, or one naming a root or list below what is held, is a rollback', () => {
    const held = content({}, now - 60_000);
    expect(reason(verify(content({}, now - 120_000), { held }))).toBe('METADATA_ROLLBACK');
    expect(reason(verify(content({ root: 1 }), { held }))).toBe('METADATA_ROLLBACK');
    expect(reason(verify(content({ revocations: 0 }), { held }))).toBe('METADATA_ROLLBACK');
    expect(reason(verify(content({ root: 3, revocations: 2 }), { held }))).toBe('ok');
  });
});
