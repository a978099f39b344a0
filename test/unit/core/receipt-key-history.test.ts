import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { agentKeyPin } from '../../../core/agent-auth';
import { makeProof } from '../../../core/agent-rotation';
import { toBase64 } from '../../../core/bytes';
import { keyPairFromSeed } from '../../../core/signing';
import {
  verifyReceiptsBundle,
  type EnrolledDevice,
  type KeyRotationStep,
  type ReceiptsBundle,
} from '../../../core/receipt-verify';
import { nativeEd25519Verify } from '../../../device/ed25519-native';
import { readReceiptsBundle, writeReceiptsBundle } from '../../../audit/bundle';
import { receiptsFixture, type EntryPlan } from '../../support/receipts-bundle';

/**
 * The receipts verifier across an agent identity key rotation (docs/formats.md "The bundle", "Key history"):
 * a-01 signs its first receipt (record 3) with its old key and, after rotation agent-id-1 (the old key hands over,
 * the new one accepts), its second (record 6) with its new key. The bundle's enrolment carries the rotation's proof;
 * every key it links to the enrolled key verifies, in the history's order, the old one not after its retire.
 */
const scratch = mkdtempSync(join(tmpdir(), 'wg-receipt-key-history-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));
const fx = receiptsFixture(scratch);
const ROT = 'agent-id-1';
const oldPair = fx.devices.get('a-01')!.pair!;
const newPair = keyPairFromSeed(new Uint8Array(32).fill(77));
const thief = keyPairFromSeed(new Uint8Array(32).fill(78));
for (const [id, pair] of [
  ['a-01-new', newPair],
  ['a-01-thief', thief],
] as const)
  fx.devices.set(id, { id, kind: 'agent', key: `ed25519:${toBase64(pair.publicKey)}`, pair });
const [oldPin, newPin] = [agentKeyPin(oldPair.publicKey), agentKeyPin(newPair.publicKey)];

// s-01's second receipt, one plan for every trail: the fixture signs a plan once (ssh-keygen is a process each).
const s01Again: EntryPlan = { device: 's-01', request: '22', state: 'applied', over: { result: 'already-applied' } };
/** a-01's two receipts signed by `first` then `second` (fixture devices whose key signs). */
function trail(first: string, second: string) {
  return fx.seal(
    fx.events({
      3: [{ device: 'a-01', request: '7', state: 'applied', signer: first }],
      6: [
        { device: 'a-01', request: '21', state: 'applied', over: { result: 'already-applied' }, signer: second },
        s01Again,
      ],
    }),
  );
}
const rotated = trail('a-01', 'a-01-new');

const step = (over: Partial<KeyRotationStep> = {}): KeyRotationStep => ({
  rotation: ROT,
  provenAt: new Date(Date.now() - 45_000).toISOString(),
  proof: makeProof(ROT, 'a-01', oldPair, newPair),
  ...over,
});
/** The fixture's enrolment with a-01 enrolled under `key` and `history`, the two helper keys left out. */
function enrolment(key: string, history?: KeyRotationStep[]): EnrolledDevice[] {
  return fx
    .enrolment()
    .filter((d) => !d.id.startsWith('a-01-'))
    .map((d) => (d.id === 'a-01' ? { ...d, key, ...(history ? { history } : {}) } : d));
}
const verify = (b: ReceiptsBundle) => verifyReceiptsBundle(b, { verifySignature: nativeEd25519Verify });
const bundleOf = (records = rotated, e: EnrolledDevice[] = enrolment(newPin, [step()])) =>
  fx.bundle(records, { enrolment: e });

describe('receipts across an agent identity key rotation', () => {
  it('with the rotation in the history, both receipts verify, enrolled under the new key (after activate) or the old (before); without it one is refused', () => {
    for (const key of [newPin, oldPin]) {
      const verdict = verify(bundleOf(rotated, enrolment(key, [step()])));
      expect(verdict.findings).toEqual([]);
      expect(verdict).toMatchObject({ receipts: 7, proven: 7 });
    }
    // Without it, one of the two is refused, named: the old-key receipt after activate, the new-key one before.
    const after = verify(bundleOf(rotated, enrolment(newPin)));
    expect(after.findings).toEqual([
      expect.objectContaining({ device: 'a-01', check: 'key', message: expect.stringMatching(/^record 3: signed by/) }),
    ]);
    expect(after.proven).toBe(6);
    const before = verify(bundleOf(rotated, enrolment(oldPin)));
    expect(before.findings).toEqual([
      expect.objectContaining({ device: 'a-01', check: 'key', message: expect.stringMatching(/^record 6: signed by/) }),
    ]);
    expect(before.proven).toBe(6);
  });

  it('a forged proof (the new key not signing, or a thief claiming the device) refuses the post-rotation receipt and names the step', () => {
    const forged = makeProof(ROT, 'a-01', oldPair, newPair);
    forged.byNew = makeProof(ROT, 'a-01', oldPair, thief).byNew;
    const byNew = verify(bundleOf(rotated, enrolment(oldPin, [step({ proof: forged })])));
    expect(byNew.findings).toContainEqual({
      device: 'a-01',
      check: 'enrolment',
      message: `key history: rotation ${ROT}: byNew: not signed by the new key`,
    });
    expect(byNew.findings).toContainEqual({
      device: 'a-01',
      check: 'key',
      message: expect.stringMatching(
        /^record 6: signed by agent key \S+, which the device's key history names but does not prove: rotation agent-id-1's proof does not link it: byNew/,
      ),
    });
    // A thief's own key, "proven" without the old key: the old key's signature is its own, not a-01's old key's.
    const stolen = makeProof(ROT, 'a-01', thief, newPair);
    stolen.old = oldPin;
    const byOld = verify(bundleOf(rotated, enrolment(oldPin, [step({ proof: stolen })])));
    expect(byOld.findings.filter((f) => f.device === 'a-01').map((f) => f.check)).toEqual(['enrolment', 'key']);
    expect(byOld.findings[0]!.message).toContain('byOld: not signed by the old key');
    // Another device's proof (a-02's rotation to this key) does not link it to a-01.
    const other = makeProof(ROT, 'a-02', oldPair, newPair);
    const elsewhere = verify(bundleOf(rotated, enrolment(oldPin, [step({ proof: other })])));
    expect(elsewhere.findings.map((f) => f.check)).toEqual(['enrolment', 'key']);
  });

  it('a chain forged under a key no proof links is refused, though it continues the device counter and prev', () => {
    const forgedChain = trail('a-01', 'a-01-thief');
    const verdict = verify(bundleOf(forgedChain, enrolment(oldPin, [step()])));
    expect(verdict.findings).toEqual([
      expect.objectContaining({
        device: 'a-01',
        check: 'key',
        message: expect.stringMatching(
          /^record 6: signed by agent key \S+, not the device's enrolled agent key \S+ nor one its rotations link to it$/,
        ),
      }),
    ]);
  });

  it('a device never goes back to the key it handed over from; the old key is refused from its retire', () => {
    const back = verify(bundleOf(trail('a-01-new', 'a-01')));
    expect(back.findings).toEqual([
      expect.objectContaining({
        device: 'a-01',
        check: 'rotation',
        message: expect.stringMatching(
          /^record 6: signed by key \S+, which rotation agent-id-1 handed over from, after record 3 was signed by its newer key/,
        ),
      }),
    ]);
    const oldTwice = trail('a-01', 'a-01');
    const keptOld = verify(bundleOf(oldTwice, enrolment(newPin, [step()])));
    expect(keptOld.findings).toEqual([]);
    // Retired between the two receipts (by the fixture's clocks, a minute ago plus 3 s and 6 s): the second refused.
    const retiredAt = oldTwice[3]!.at;
    const retired = verify(bundleOf(oldTwice, enrolment(newPin, [step({ retiredAt })])));
    expect(retired.findings).toEqual([
      expect.objectContaining({
        device: 'a-01',
        check: 'rotation',
        message: expect.stringMatching(/^record 6: signed by key \S+, retired by rotation agent-id-1 at /),
      }),
    ]);
  });

  it('a history whose steps do not follow one another, or that does not hold the enrolled key, is named', () => {
    const third = keyPairFromSeed(new Uint8Array(32).fill(79));
    const gap = step({ rotation: 'agent-id-2', proof: makeProof('agent-id-2', 'a-01', thief, third) });
    const verdict = verify(bundleOf(rotated, enrolment(newPin, [step(), gap])));
    expect(verdict.findings).toEqual([
      {
        device: 'a-01',
        check: 'enrolment',
        message: `key history: rotation agent-id-2: its old key is not the new key of rotation ${ROT}, the step before`,
      },
    ]);
    const stranger = verify(bundleOf(rotated, enrolment(agentKeyPin(third.publicKey), [step()])));
    expect(stranger.findings[0]).toMatchObject({
      device: 'a-01',
      check: 'enrolment',
      message: expect.stringMatching(/the enrolled key \S+ is none of the keys its rotations name/),
    });
  });

  it('the history is written to enrolment.json and read back as it was; a malformed one is refused naming the field', () => {
    const dir = join(scratch, 'written');
    const b = bundleOf();
    writeReceiptsBundle(dir, fx.content(b));
    const read = readReceiptsBundle(dir);
    expect(read.enrolment.find((d) => d.id === 'a-01')).toEqual({
      id: 'a-01',
      kind: 'agent',
      key: newPin,
      history: [step({ provenAt: b.enrolment.find((d) => d.id === 'a-01')!.history![0]!.provenAt })],
    });
    expect(verify(read).findings).toEqual([]);
    const broken = join(scratch, 'broken');
    const e = enrolment(newPin, [{ ...step(), proof: { ...step().proof, byOld: 7 } as never }]);
    writeReceiptsBundle(broken, fx.content(fx.bundle(rotated, { enrolment: e })));
    expect(() => readReceiptsBundle(broken)).toThrow(
      /enrolment\.json: devices\[0\]\.history\[0\]\.proof\.byOld: must be a base64 Ed25519 signature/,
    );
  });
});
