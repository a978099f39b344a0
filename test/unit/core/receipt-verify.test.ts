import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { fromBase64, toBase64 } from '../../../core/bytes';
import type { AuditEvent } from '../../../core/audit';
import { parseReceipt, receiptHash } from '../../../core/receipt';
import { verifyReceiptsBundle, type ReceiptCheck, type ReceiptsBundle } from '../../../core/receipt-verify';
import { keyId, keyPairFromSeed } from '../../../core/signing';
import { parsePinnedKey, type PinnedKey } from '../../../core/trail-checkpoints';
import { nativeEd25519Verify } from '../../../device/ed25519-native';
import { receiptsFixture, ROLLOUT } from '../../support/receipts-bundle';

const scratch = mkdtempSync(join(tmpdir(), 'wg-receipt-verify-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));
const fx = receiptsFixture(scratch);
const goodEvents = fx.events();
const goodRecords = fx.seal(goodEvents);

type Entry = { id: string; state: string; receipt?: string; request?: string };
/** The good trail with its device entries changed, resealed, checkpointed again: the control plane's own lie. */
function edited(change: (entries: Record<3 | 5 | 6, Entry[]>) => void): ReceiptsBundle {
  const events = structuredClone(goodEvents) as AuditEvent[];
  const entries = (seq: number) => (events[seq - 1]!.evidence as { devices: Entry[] }).devices;
  change({ 3: entries(3), 5: entries(5), 6: entries(6) });
  return fx.bundle(fx.seal(events));
}

const hashOf = (text: string) => receiptHash((parseReceipt(text) as { ok: true; receipt: { body: string } }).receipt);
const clock = Date.now() - 30_000;
const firstOfA01 = () => (goodEvents[2]!.evidence as { devices: Entry[] }).devices[0]!.receipt!;

function flipSig(text: string): string {
  const sig = /sig (.*)\n$/.exec(text)![1]!;
  const bytes = fromBase64(sig)!;
  bytes[bytes.length - 5]! ^= 0x01;
  return text.replace(sig, toBase64(bytes));
}

const verify = (b: ReceiptsBundle) => verifyReceiptsBundle(b, { verifySignature: nativeEd25519Verify });

describe('the receipts verifier', () => {
  it('passes the good bundle: every receipt proven, every record included under the last checkpoint in ≤ 1 KB', () => {
    const verdict = verify(fx.bundle(goodRecords));
    expect(verdict.findings).toEqual([]);
    expect(verdict).toMatchObject({ records: 7, receipts: 7, proven: 7, claimed: 1, devices: 6, checkpoints: 3 });
    expect(verdict.inclusion).toMatchObject({ proofs: 3, size: 7 });
    expect(verdict.inclusion!.largestBytes).toBeLessThanOrEqual(1024);
    // @noble's check (the default) says the same as Node's.
    expect(verifyReceiptsBundle(fx.bundle(goodRecords)).findings).toEqual([]);
  });

  it('takes the keys as the checkpoint flags do: without a key name, a signature line under the key counts', () => {
    const named = fx.bundle(goodRecords);
    const bare = {
      ...named,
      logKey: named.logKey!.replace(/^[^=]+=/, ''),
      witnessKey: named.witnessKey!.replace(/^[^=]+=/, ''),
    };
    expect(bare.logKey).toMatch(/^ed25519:/);
    expect(verify(bare).findings).toEqual([]);
    // The witness's key where the log's belongs: no checkpoint is the log's.
    expect(verify({ ...named, logKey: named.witnessKey }).findings).toContainEqual(
      expect.objectContaining({
        check: 'checkpoint',
        message: expect.stringMatching(/no signature of the log under the key given/),
      }),
    );
  });

  /** The tamper corpus: each case refused naming the device (when one is concerned) and the check. */
  const corpus: {
    name: string;
    bundle: () => ReceiptsBundle;
    device?: string;
    check: ReceiptCheck;
    message?: RegExp;
  }[] = [
    {
      name: 'a forged signature (agent)',
      bundle: () => edited((e) => (e[5][0]!.receipt = flipSig(e[5][0]!.receipt!))),
      device: 'a-02',
      check: 'signature',
    },
    {
      name: 'a forged SSH receipt (a line changed under ssh-keygen -Y sign)',
      bundle: () => edited((e) => (e[5][2]!.receipt = e[5][2]!.receipt!.replace(/^clock (\d+)$/m, 'clock 1$1'))),
      device: 's-01',
      check: 'signature',
    },
    {
      name: 'a replayed nonce (the first receipt sent again for the second request)',
      bundle: () => edited((e) => (e[6][0]!.receipt = e[3][0]!.receipt)),
      device: 'a-01',
      check: 'nonce',
      message: /replayed/,
    },
    {
      name: 'a reused counter',
      bundle: () =>
        edited(
          (e) =>
            (e[6][0]!.receipt = fx.receipt(
              { device: 'a-01', request: '21', state: 'applied', over: { result: 'already-applied' } },
              { counter: 0, last: hashOf(firstOfA01()) },
              clock,
            )),
        ),
      device: 'a-01',
      check: 'counter',
      message: /reused/,
    },
    {
      name: 'a dropped receipt (counter gap)',
      bundle: () =>
        edited(
          (e) =>
            (e[6][0]!.receipt = fx.receipt(
              { device: 'a-01', request: '21', state: 'applied', over: { result: 'already-applied' } },
              { counter: 2, last: 'e'.repeat(64) },
              clock,
            )),
        ),
      device: 'a-01',
      check: 'counter',
      message: /1 receipt\(s\) missing/,
    },
    {
      name: 'a wrong observed digest',
      bundle: () =>
        edited(
          (e) =>
            (e[5][1]!.receipt = fx.receipt(
              { device: 'a-03', request: '12', state: 'applied', over: { observed: fx.digest(1) } },
              { counter: 0, last: '0'.repeat(64) },
              clock,
            )),
        ),
      device: 'a-03',
      check: 'observed',
    },
    {
      name: 'a below-floor claim (r1 after the device confirmed r2)',
      bundle: () =>
        edited(
          (e) =>
            (e[6][0]!.receipt = fx.receipt(
              {
                device: 'a-01',
                request: '21',
                state: 'applied',
                over: { result: 'already-applied', revision: 1, requested: fx.digest(1), observed: fx.digest(1) },
              },
              { counter: 1, last: hashOf(firstOfA01()) },
              clock,
            )),
        ),
      device: 'a-01',
      check: 'floor',
    },
    {
      name: "another device's key",
      bundle: () =>
        edited(
          (e) =>
            (e[5][0]!.receipt = fx.receipt(
              { device: 'a-02', request: '11', state: 'applied', signer: 'a-03' },
              { counter: 0, last: '0'.repeat(64) },
              clock,
            )),
        ),
      device: 'a-02',
      check: 'key',
      message: /device a-03's/,
    },
    {
      name: 'a reordered chain',
      bundle: () =>
        edited((e) => {
          [e[3][0]!.receipt, e[6][0]!.receipt] = [e[6][0]!.receipt, e[3][0]!.receipt];
        }),
      device: 'a-01',
      check: 'counter',
      message: /out of order/,
    },
    {
      name: 'a receipt of another rollout',
      bundle: () =>
        edited(
          (e) =>
            (e[5][0]!.receipt = fx.receipt(
              { device: 'a-02', request: '11', state: 'applied', over: { rollout: 'rollout:web:20261101-000000' } },
              { counter: 0, last: '0'.repeat(64) },
              clock,
            )),
        ),
      device: 'a-02',
      check: 'rollout',
    },
    {
      name: 'a forked trail (two checkpoints of size 6, different roots)',
      bundle: () => {
        const b = fx.bundle(goodRecords);
        const rewritten = structuredClone(goodEvents) as AuditEvent[];
        (rewritten[4]!.evidence as { devices: Entry[] }).devices[1]!.state = 'failed';
        return { ...b, checkpoints: [...b.checkpoints, fx.checkpoint(fx.seal(rewritten), 6)] };
      },
      check: 'fork',
    },
    {
      name: 'an uncosigned checkpoint',
      bundle: () => {
        const b = fx.bundle(goodRecords);
        return {
          ...b,
          checkpoints: [...b.checkpoints.slice(0, 2), fx.checkpoint(goodRecords, 7, { cosigned: false })],
        };
      },
      check: 'checkpoint',
      message: /not cosigned by the witness/,
    },
    {
      name: 'a revoked enrolment',
      bundle: () =>
        fx.bundle(goodRecords, {
          enrolment: fx.enrolment().map((d) =>
            d.id === 's-01'
              ? // Revoked before any receipt the fixture made: its clock is its module's load time, which in a
                // shared worker (the unit project runs isolate: false) can be minutes before this file's.
                { ...d, revoked: { at: '2000-01-01T00:00:00.000Z', reason: 'key leaked' } }
              : d,
          ),
        }),
      device: 's-01',
      check: 'revoked',
      message: /key leaked/,
    },
    {
      name: 'the trail says applied, the receipt says failed',
      bundle: () =>
        edited(
          (e) =>
            (e[5][1]!.receipt = fx.receipt(
              {
                device: 'a-03',
                request: '12',
                state: 'applied',
                over: { result: 'failed', reason: 'VERIFY', observed: null },
              },
              { counter: 0, last: '0'.repeat(64) },
              clock,
            )),
        ),
      device: 'a-03',
      check: 'state',
    },
    {
      name: 'a receipt made after its revision expired (judged at its clock, after one verified in time)',
      bundle: () =>
        edited(
          (e) =>
            (e[5][1]!.receipt = fx.receipt(
              { device: 'a-03', request: '12', state: 'applied' },
              { counter: 0, last: '0'.repeat(64) },
              Date.parse(fx.profile.revision(2).expiresAt!) + 1,
            )),
        ),
      device: 'a-03',
      check: 'revision',
      message: /web r2: expired before the receipt's clock/,
    },
    {
      name: 'a record after the last checkpoint',
      bundle: () => fx.bundle(goodRecords, { sizes: [2, 5] }),
      device: 'a-01',
      check: 'inclusion',
      message: /not under the last checkpoint/,
    },
    {
      name: 'a record edited in the store without resealing',
      bundle: () => {
        const b = fx.bundle(goodRecords);
        const text = b.segments[0]!.text.replace('"state":"applied"', '"state":"claimed"');
        return { ...b, segments: [{ name: 'trail.jsonl', text }] };
      },
      check: 'trail',
    },
  ];

  it('fails closed on a bundle with no checkpoint, unless told the rollout ran without them', () => {
    const stripped = { ...fx.bundle(goodRecords), checkpoints: [] };
    const closed = verify(stripped);
    expect(closed.findings).toEqual([
      { check: 'checkpoint', message: expect.stringMatching(/holds no checkpoint.*--no-checkpoints-expected/) },
    ]);
    expect(closed.inclusion).toBeNull();
    const told = verifyReceiptsBundle(stripped, { verifySignature: nativeEd25519Verify, checkpointsExpected: false });
    expect(told.findings).toEqual([]);
    expect(told).toMatchObject({ checkpoints: 0, inclusion: null, proven: 7 });
  });

  describe('pinned checkpoint keys', () => {
    const other = keyPairFromSeed(new Uint8Array(32).fill(9));
    const good = fx.bundle(goodRecords);
    const keyOf = (text: string, kind: 'log' | 'witness') => parsePinnedKey(text, kind, kind)!;
    const log = keyOf(good.logKey!, 'log');
    const witness = keyOf(good.witnessKey!, 'witness');
    const pinned = (pins: { log?: PinnedKey; witness?: PinnedKey }) =>
      verifyReceiptsBundle(good, { verifySignature: nativeEd25519Verify, pinned: pins });

    it("unpinned: the bundle's keys are trusted and said to be the bundle's, by key id", () => {
      expect(verify(good).keys).toEqual({
        log: { keyId: keyId(log.publicKey), from: 'bundle' },
        witness: { keyId: keyId(witness.publicKey), from: 'bundle' },
      });
    });

    it("pinned equal to the bundle's: passes, the keys said pinned", () => {
      const v = pinned({ log, witness });
      expect(v.findings).toEqual([]);
      expect(v.inclusion).toMatchObject({ size: 7 });
      expect(v.keys).toEqual({
        log: { keyId: keyId(log.publicKey), from: 'pinned' },
        witness: { keyId: keyId(witness.publicKey), from: 'pinned' },
      });
    });

    it("a pinned log key other than the bundle's fails, naming the log key and both key ids", () => {
      const v = pinned({ log: { publicKey: other.publicKey }, witness });
      expect(v.findings).toContainEqual({
        check: 'pinned-key',
        message: `keys/log.pub: the log's key ${keyId(log.publicKey)} is not the pinned --log-key ${keyId(other.publicKey)}`,
      });
      // The checkpoints are checked under the pinned key: the bundle's log signed them, so none holds.
      expect(v.inclusion).toBeNull();
    });

    it("a pinned witness key other than the bundle's fails, naming the witness key", () => {
      const v = pinned({ log, witness: { publicKey: other.publicKey } });
      expect(v.findings).toContainEqual({
        check: 'pinned-key',
        message: `keys/witness.pub: the witness's key ${keyId(witness.publicKey)} is not the pinned --witness-key ${keyId(other.publicKey)}`,
      });
      expect(v.findings.filter((f) => f.check === 'pinned-key')).toHaveLength(1);
    });

    it('a pinned key the bundle does not hold fails, naming the flag', () => {
      const { logKey: _gone, ...keyless } = good;
      const v = verifyReceiptsBundle(keyless, { verifySignature: nativeEd25519Verify, pinned: { log } });
      expect(v.findings).toContainEqual({
        check: 'pinned-key',
        message: `--log-key ${keyId(log.publicKey)}: keys/log.pub: the bundle holds no log key`,
      });
    });
  });

  it('the corpus holds the twelve cases of issue 44 and more', () => {
    expect(corpus.length).toBeGreaterThanOrEqual(12);
  });

  it.each(corpus)('refuses $name, naming the device and the check', ({ bundle, device, check, message }) => {
    const { findings, proven, receipts } = verify(bundle());
    expect(findings).toContainEqual(
      expect.objectContaining({
        ...(device ? { device } : {}),
        check,
        ...(message ? { message: expect.stringMatching(message) } : {}),
      }),
    );
    // Only what was changed is refused: a receipt case leaves the other devices proven.
    if (device && check !== 'inclusion' && check !== 'revoked')
      expect(findings.every((f) => f.device === device)).toBe(true);
    expect(proven).toBeLessThanOrEqual(receipts);
    expect(ROLLOUT).toBe(bundle().rollout);
  });
});
