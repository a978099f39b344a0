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
  signRotationDocument,
  verifyRetire,
  verifyRotation,
  type RetireSource,
  type RotationSource,
} from '../../../core/rotation';
import { cosignEnvelope, keyPairFromSeed, parseTrust, pinOf, type Envelope } from '../../../core/signing';
import { refusal } from '../../support/refusal';

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
