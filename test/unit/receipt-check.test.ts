import { describe, expect, it } from 'vitest';
import { toBase64 } from '../../core/bytes';
import {
  RECEIPT_GENESIS,
  RECEIPT_MAX_BYTES,
  receiptBody,
  receiptKeyId,
  receiptNonce,
  receiptText,
  signAgentReceipt,
} from '../../core/receipt';
import { keyPairFromSeed } from '../../core/signing';
import { checkReceipt, receiptExpectation } from '../../device/receipt-check';

/** The worker's one check of a receipt as it arrives (device/receipt-check.ts). */

const key = keyPairFromSeed(new Uint8Array(32).fill(11));
const other = keyPairFromSeed(new Uint8Array(32).fill(12));
const holder = { rollout: 'rollout:web:20261207-101500', run: 'run-1', activity: '7' };
const requested = 'b'.repeat(64);
const expected = receiptExpectation('web-01', 'agent', holder, { profile: 'web', revision: 2, requested });

function fields(over: Record<string, unknown> = {}) {
  return {
    device: 'web-01',
    rollout: holder.rollout,
    phase: 0,
    nonce: receiptNonce({ ...holder, device: 'web-01' }),
    counter: 1,
    profile: 'web',
    revision: 2,
    requested,
    observed: requested,
    result: 'applied' as const,
    reason: null,
    prev: RECEIPT_GENESIS,
    clock: 1_796_000_000_000,
    ...over,
  };
}

const text = (over: Record<string, unknown> = {}, by = key) => receiptText(signAgentReceipt(fields(over), by));
const problem = (t: unknown, exp = expected, enrolled: Uint8Array | null = key.publicKey) => {
  const check = checkReceipt(t, exp, enrolled);
  return check.ok ? 'ok' : check.problem;
};

describe('checkReceipt', () => {
  it("passes the enrolled key's receipt of the request, and returns it parsed", () => {
    const check = checkReceipt(text(), expected, key.publicKey);
    expect(check).toMatchObject({ ok: true, receipt: { fields: { device: 'web-01', counter: 1, result: 'applied' } } });
    expect(problem(text(), { ...expected, results: ['applied', 'claimed'], phase: 0 })).toBe('ok');
  });

  it('a forged signature: a field changed after signing, or a signature of other bytes', () => {
    expect(problem(text().replace('result applied', 'result claimed'))).toBe('signature: not made by the enrolled key');
    const sig = text({ counter: 2 }).match(/\nsig (.*)\n$/)![1]!;
    expect(problem(text().replace(/\nsig .*\n$/, `\nsig ${sig}\n`))).toBe('signature: not made by the enrolled key');
  });

  it("another device's key: signed by a key that is not the one enrolled (whatever its key line says)", () => {
    expect(problem(text({}, other))).toBe('signature: not made by the enrolled key');
    // Its own key line, checked against the other device's enrolled key.
    expect(problem(text(), expected, other.publicKey)).toBe('signature: not made by the enrolled key');
    expect(problem(text(), expected, null)).toBe('key: no agent key enrolled for web-01 to check it with');
  });

  it("another request's receipt: wrong nonce, device, rollout, profile, revision or requested digest", () => {
    const nonce = receiptNonce({ ...holder, activity: '8', device: 'web-01' });
    expect(problem(text({ nonce }))).toMatch(/^nonce: the receipt names "[0-9a-f]+", the request "[0-9a-f]+"$/);
    expect(problem(text({ device: 'web-02' }))).toBe('device: the receipt names "web-02", the request "web-01"');
    expect(problem(text({ rollout: 'rollout:web:other' }))).toMatch(/^rollout: /);
    expect(problem(text({ profile: 'db' }))).toBe('profile: the receipt names "db", the request "web"');
    expect(problem(text({ revision: 3 }))).toBe('revision: the receipt names 3, the request 2');
    expect(problem(text({ requested: 'c'.repeat(64) }))).toBe(
      'requested: the receipt names "cccccccccccccccc…", the request "bbbbbbbbbbbbbbbb…"',
    );
  });

  it("a result the answer does not carry, a phase the request did not name, an SSH device's receipt for an agent", () => {
    expect(problem(text({ result: 'refused', reason: 'BELOW_FLOOR' }), { ...expected, results: ['applied'] })).toBe(
      'result: the receipt says refused, the answer applied',
    );
    expect(problem(text({ phase: 1 }), { ...expected, phase: 0 })).toBe('phase: the receipt names 1, the request 0');
    const body = receiptBody({ ...fields(), keyKind: 'ssh', keyId: receiptKeyId('ssh', key.publicKey) });
    expect(problem(receiptText({ body, sig: toBase64(new Uint8Array(186)) }))).toBe(
      'key: a receipt of an ssh key, the device is enrolled with an agent key',
    );
  });

  it('unreadable: oversize, not text, not in its canonical form', () => {
    expect(problem(text() + 'x'.repeat(RECEIPT_MAX_BYTES))).toMatch(/^unreadable: receipt: \d+ bytes, at most 1024$/);
    expect(problem(undefined)).toBe('unreadable: receipt: must be text');
    expect(problem(text().replace('counter 1', 'counter 01'))).toMatch(/^unreadable: receipt counter/);
  });
});
