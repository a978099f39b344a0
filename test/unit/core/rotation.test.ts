import { describe, expect, it } from 'vitest';
import { toBase64, utf8Encode } from '../../../core/bytes';
import { canonicalize } from '../../../core/canonical';
import {
  decideRetire,
  deviceState,
  parseRetireSource,
  parseRotationSource,
  phaseAt,
  rotationStatus,
  signerRecords,
  signerRoots,
  signRotationDocument,
  verifyRetire,
  verifyRotation,
  type RetireSource,
  type RotationSource,
} from '../../../core/rotation';
import { cosignEnvelope, keyPairFromSeed, parseTrust, pinOf, type Envelope } from '../../../core/signing';
import { refusal } from '../../support/refusal';
import { WavegateError } from '../../../core/errors';

/** core/rotation.ts: the signed schedule, its retire statement, each device's state and the retire gate. */

const pair = (n: number) => keyPairFromSeed(new Uint8Array(32).fill(n));
const [alice, bob, carol] = [pair(1), pair(2), pair(3)];
const trust = parseTrust({ threshold: 2, pins: [pinOf(alice), pinOf(bob)] }, 'trust.yaml');

const T0 = Date.parse('2027-01-01T00:00:00Z');
const H = 3_600_000;
const iso = (ms: number) => new Date(ms).toISOString();
const OLD = `SHA256:${'A'.repeat(43)}`;
const NEW = `SHA256:${'B'.repeat(43)}`;

const source = (over: Partial<RotationSource> = {}): RotationSource => ({
  type: 'wavegate/rotation',
  id: 'ssh-login-2027-01',
  kind: 'ssh-login',
  authority: 'fleet',
  old: OLD,
  new: NEW,
  publish: iso(T0 + H),
  activate: iso(T0 + 2 * H),
  retire: iso(T0 + 3 * H),
  required: 'all',
  ...over,
});

/** Signed by alice and bob (the threshold), at T0. */
function signed(content: object, signers = [alice, bob]): Envelope {
  let env = signRotationDocument(content as RotationSource, signers[0]!, T0);
  for (const s of signers.slice(1)) env = cosignEnvelope(env, s);
  return env;
}

function schedule(over: Partial<RotationSource> = {}) {
  const v = verifyRotation(signed(source(over)), trust, { now: T0 });
  if (!v.ok) throw new Error(v.message);
  return v;
}

describe('the signed rotation schedule', () => {
  it('verifies with a threshold of pinned signers, and names its digest', () => {
    const v = verifyRotation(signed(source()), trust, { now: T0 });
    expect(v.ok).toBe(true);
    if (!v.ok) return;
    expect(v.rotation).toMatchObject({ id: 'ssh-login-2027-01', old: OLD, new: NEW, issuedAt: iso(T0) });
    expect(v.signers.sort()).toEqual([alice.kid, bob.kid].sort());
    expect(v.digest).toMatch(/^[0-9a-f]{64}$/);
  });

  it('is refused below the threshold, by an unpinned signer, and when tampered with', () => {
    expect(verifyRotation(signed(source(), [alice]), trust, { now: T0 })).toMatchObject({
      ok: false,
      reason: 'BELOW_THRESHOLD',
    });
    expect(verifyRotation(signed(source(), [alice, carol]), trust, { now: T0 })).toMatchObject({
      ok: false,
      reason: 'BELOW_THRESHOLD',
    });
    const good = signed(source());
    const forged = canonicalize({ ...source({ new: `SHA256:${'C'.repeat(43)}` }), issuedAt: iso(T0) });
    expect(verifyRotation({ ...good, body: toBase64(utf8Encode(forged)) }, trust, { now: T0 })).toMatchObject({
      ok: false,
      reason: 'BAD_SIGNATURE',
    });
  });

  it('is refused as BAD_ORDER unless publish <= activate <= retire, even when signed', () => {
    const cases: Array<Partial<RotationSource>> = [
      { activate: iso(T0 + 4 * H) }, // after retire
      { publish: iso(T0 + 2.5 * H) }, // after activate
      { retire: iso(T0 + 500 * 24 * H) }, // longer than a signature lives
      { lifeline: ['d1'], lifelineUntil: iso(T0 + 2 * H) }, // a lifeline ending before retire
    ];
    for (const over of cases) {
      const v = verifyRotation(signed(source(over)), trust, { now: T0 });
      expect(v, JSON.stringify(over)).toMatchObject({ ok: false, reason: 'BAD_ORDER' });
    }
    // publish == activate == retire is allowed: no overlap, but in order.
    const same = iso(T0 + H);
    expect(verifyRotation(signed(source({ publish: same, activate: same, retire: same })), trust, { now: T0 }).ok).toBe(
      true,
    );
  });

  it('refuses the same key as old and new, a lifeline without its end, and a post-dated schedule', () => {
    expect(verifyRotation(signed(source({ new: OLD })), trust, { now: T0 })).toMatchObject({
      reason: 'INVALID_ROTATION',
    });
    expect(verifyRotation(signed(source({ lifeline: ['d1'] })), trust, { now: T0 })).toMatchObject({
      reason: 'INVALID_ROTATION',
    });
    expect(verifyRotation(signed(source()), trust, { now: T0 - H })).toMatchObject({ reason: 'NOT_YET_VALID' });
  });

  it('refuses a body that is not a schedule (a retire statement, an unknown field, a non-canonical body)', () => {
    const retire = signed({ type: 'wavegate/rotation-retire', id: 'x', schedule: '0'.repeat(64), forced: false });
    expect(verifyRotation(retire, trust, { now: T0 })).toMatchObject({ ok: false, reason: 'MALFORMED' });
    expect(verifyRotation(signed({ ...source(), extra: 1 }), trust, { now: T0 })).toMatchObject({ ok: false });
    let spaced: Envelope = { body: toBase64(utf8Encode(JSON.stringify(source(), null, 1))), signatures: [] };
    spaced = cosignEnvelope(cosignEnvelope(spaced, alice), bob);
    expect(verifyRotation(spaced, trust, { now: T0 })).toMatchObject({ ok: false, reason: 'NOT_CANONICAL' });
  });

  it('parseRotationSource names the field and the value it refuses', () => {
    const bad = refusal(() => parseRotationSource({ ...source(), old: 'md5:abc' }, 'rot.yaml'));
    expect(bad.code).toBe('INVALID_INPUT');
    expect(bad.message).toContain('old:');
    expect(bad.message).toContain('"md5:abc"');
    const order = refusal(() => parseRotationSource(source({ activate: iso(T0) }), 'rot.yaml'));
    expect(order.message).toMatch(/publish <= activate <= retire/);
    expect(refusal(() => parseRotationSource({ ...source(), kind: 'signer' }, 'rot.yaml')).message).toContain('kind');
  });
});

describe('the retire statement', () => {
  const retireOf = (s: ReturnType<typeof schedule>, over: Partial<RetireSource> = {}): RetireSource => ({
    type: 'wavegate/rotation-retire',
    id: s.rotation.id,
    schedule: s.digest,
    forced: false,
    ...over,
  });

  it('verifies for its own schedule only (WRONG_SCHEDULE for another of the same id)', () => {
    const s = schedule();
    expect(verifyRetire(signed(retireOf(s)), trust, s, { now: T0 })).toMatchObject({ ok: true });
    const other = schedule({ retire: iso(T0 + 4 * H) });
    expect(other.rotation.id).toBe(s.rotation.id);
    expect(verifyRetire(signed(retireOf(s)), trust, other, { now: T0 })).toMatchObject({
      ok: false,
      reason: 'WRONG_SCHEDULE',
    });
    expect(verifyRetire(signed(retireOf(s), [bob]), trust, s, { now: T0 })).toMatchObject({
      reason: 'BELOW_THRESHOLD',
    });
  });

  it('a forced retire must give its reason', () => {
    const s = schedule();
    expect(refusal(() => parseRetireSource(retireOf(s, { forced: true }), 'retire.yaml')).message).toContain(
      'reason: required when forced',
    );
    expect(verifyRetire(signed(retireOf(s, { forced: true })), trust, s, { now: T0 })).toMatchObject({
      reason: 'INVALID_ROTATION',
    });
  });
});

describe('each device state and the retire gate', () => {
  const s = schedule({ required: ['d1', 'd2'], lifeline: ['d4'], lifelineUntil: iso(T0 + 5 * H) });
  const devices = ['d1', 'd2', 'd3', 'd4'];
  const active = { added: iso(T0), active: iso(T0 + 2 * H) };

  it('phases and states follow the clock and what each device proved', () => {
    expect([0, 1.5, 2.5, 3].map((h) => phaseAt(s.rotation, T0 + h * H))).toEqual([
      'scheduled',
      'published',
      'activating',
      'retire-due',
    ]);
    expect(deviceState(s.rotation, T0 + 1.5 * H)).toBe('published');
    expect(deviceState(s.rotation, T0 + 2 * H)).toBe('missed');
    expect(deviceState(s.rotation, T0 + 2 * H, { added: iso(T0) })).toBe('missed');
    expect(deviceState(s.rotation, T0 + 2 * H, { blocked: 'ssh.agent' })).toBe('blocked');
    expect(deviceState(s.rotation, T0 + 2 * H, active)).toBe('active');
    expect(deviceState(s.rotation, T0 + 4 * H, { ...active, retired: iso(T0 + 4 * H) })).toBe('retired');
  });

  it('status counts the devices still on the old key', () => {
    const st = rotationStatus({
      rotation: s.rotation,
      now: T0 + 2.5 * H,
      devices,
      records: { d1: active, d3: { lastError: 'connection refused' }, d4: active },
    });
    expect(st.onOldKey).toBe(2);
    expect(st.rows.map((r) => [r.device, r.state, r.required])).toEqual([
      ['d1', 'active', true],
      ['d2', 'missed', true],
      ['d3', 'missed', false],
      ['d4', 'active', false],
    ]);
    expect(st.rows[2]!.detail).toBe('connection refused');
  });

  const base = { rotation: s.rotation, retire: { forced: false }, force: false, devices };

  it('refuses before the retire instant', () => {
    const err = refusal(() => decideRetire({ ...base, now: T0 + 2.5 * H, records: { d1: active, d2: active } }));
    expect(err.code).toBe('INVALID_STATE');
  });

  it('refuses while a required device is not active, naming it; a non-required one does not hold it', () => {
    const err = refusal(() => decideRetire({ ...base, now: T0 + 3 * H, records: { d1: active, d4: active } }));
    expect(err.code).toBe('CONFLICT');
    expect(err.message).toContain('d2 (missed)');
    expect(err.message).not.toContain('d3');
    const ok = decideRetire({ ...base, now: T0 + 3 * H, records: { d1: active, d2: active, d4: active } });
    expect(ok).toMatchObject({ remove: ['d1', 'd2'], lifeline: ['d4'], forced: false });
    expect(ok.notActive).toEqual([{ device: 'd3', state: 'missed', required: false }]);
    // After the lifeline window, the lifeline device's old key goes too.
    const later = decideRetire({ ...base, now: T0 + 5 * H, records: { d1: active, d2: active, d4: active } });
    expect(later.remove).toEqual(['d1', 'd2', 'd4']);
  });

  it('a forced retire needs the signed statement and the operator; it never removes a key not proven', () => {
    const records = { d1: active, d4: active };
    const unsigned = refusal(() => decideRetire({ ...base, force: true, now: T0 + 3 * H, records }));
    expect(unsigned.code).toBe('INVALID_INPUT');
    expect(unsigned.message).toContain('--force');
    expect(refusal(() => decideRetire({ ...base, retire: { forced: true }, now: T0 + 3 * H, records })).code).toBe(
      'CONFLICT',
    );
    const forced = decideRetire({ ...base, retire: { forced: true }, force: true, now: T0 + 3 * H, records });
    expect(forced.forced).toBe(true);
    expect(forced.remove).toEqual(['d1']);
    expect(forced.notActive.map((d) => d.device)).toEqual(['d2', 'd3']);
  });

  it('a required device missing from the fleet holds the retire', () => {
    const err = refusal(() =>
      decideRetire({ ...base, devices: ['d1', 'd3'], now: T0 + 3 * H, records: { d1: active } }),
    );
    expect(err.message).toContain('d2 (blocked)');
  });
});

describe('kind signer: a signer key rotated through the trust root chain', () => {
  const [OLD_KID, NEW_KID] = [carol.kid, pair(4).kid];
  const signerSchedule = () => schedule({ id: 'signer-2027-01', kind: 'signer', old: OLD_KID, new: NEW_KID });

  it('names the old and new signer by kid: a fingerprint, a missing or an equal key is refused', () => {
    expect(signerSchedule().rotation).toMatchObject({ kind: 'signer', old: OLD_KID, new: NEW_KID });
    const bad = (over: Partial<RotationSource>) =>
      verifyRotation(signed(source({ kind: 'signer', old: OLD_KID, new: NEW_KID, ...over })), trust, { now: T0 });
    expect(bad({ new: NEW })).toMatchObject({
      reason: 'INVALID_ROTATION',
      message: expect.stringContaining(`new: must be the signer's kid for kind signer (got ${NEW})`),
    });
    expect(bad({ old: undefined })).toMatchObject({
      reason: 'INVALID_ROTATION',
      message: expect.stringContaining('old: required for kind signer'),
    });
    expect(bad({ new: OLD_KID })).toMatchObject({ reason: 'INVALID_ROTATION' });
    // And an ssh-login schedule still takes only fingerprints.
    expect(verifyRotation(signed(source({ old: OLD_KID })), trust, { now: T0 })).toMatchObject({
      reason: 'INVALID_ROTATION',
    });
  });

  it('finds the overlap root (first pinning the new key) and the dropping root (first after it without the old)', () => {
    const r = signerSchedule().rotation;
    const pins = (...kids: string[]) => kids.map((kid) => ({ kid }));
    const chain = [
      { version: 2, pins: pins(alice.kid, OLD_KID, NEW_KID) },
      { version: 0, pins: pins(alice.kid, OLD_KID) },
      { version: 1, pins: pins(alice.kid, OLD_KID) },
      { version: 3, pins: pins(alice.kid, NEW_KID) },
    ];
    expect(signerRoots(r, chain)).toEqual({ overlap: 2, drop: 3 });
    expect(signerRoots(r, chain.slice(0, 3))).toEqual({ overlap: 2 });
    expect(signerRoots(r, chain.slice(1, 3))).toEqual({});
  });

  it('a device is active once it holds the overlap root or later; the retire waits for every required one', () => {
    const r = signerSchedule().rotation;
    const held = {
      a: { root: 2, at: iso(T0), by: 'its agent' },
      b: { root: 1, at: iso(T0), by: 'its agent' },
      s: { root: 3, at: iso(T0), by: 'its worker' },
    };
    const devices = ['a', 'b', 'c', 's'];
    const records = signerRecords({ profile: 'fleet', overlap: 2, devices, held });
    expect(records.a).toEqual({ active: iso(T0) });
    expect(records.s).toEqual({ active: iso(T0) });
    expect(records.b!.lastError).toBe(
      'its agent holds trust root v1 of fleet (as of 2027-01-01T00:00:00.000Z), not v2 or later (the first pinning the new signer)',
    );
    expect(records.c!.lastError).toMatch(/has not reported the trust root of fleet it holds/);
    const status = rotationStatus({ rotation: r, now: T0 + 4 * H, devices, records });
    expect(status.onOldKey).toBe(2);
    expect(status.rows.map((row) => row.state)).toEqual(['active', 'missed', 'missed', 'active']);
    const err = refusal(
      () => decideRetire({ rotation: r, retire: { forced: false }, force: false, now: T0 + 4 * H, devices, records }),
      WavegateError,
    );
    expect(err.code).toBe('CONFLICT');
    expect(err.message).toContain('2 required device(s) not active on the new key: b (missed), c (missed)');
    expect(err.message).toContain('takes the root pinning the new signer at its next sync');
    // Once b and c hold the overlap root the retire goes ahead.
    const caught = signerRecords({
      profile: 'fleet',
      overlap: 2,
      devices,
      held: { ...held, b: { ...held.b, root: 2 }, c: { root: 2, at: iso(T0), by: 'its agent' } },
    });
    expect(
      decideRetire({ rotation: r, retire: { forced: false }, force: false, now: T0 + 4 * H, devices, records: caught })
        .notActive,
    ).toEqual([]);
    // With no root pinning the new key yet, nobody is active and the record says what to publish.
    expect(signerRecords({ profile: 'fleet', overlap: undefined, devices: ['a'], held }).a!.lastError).toMatch(
      /no trust root of fleet pins the new signer yet/,
    );
  });
});
