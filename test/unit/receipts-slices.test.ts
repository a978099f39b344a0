import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { auditFilePath } from '../../audit/file';
import { readReceiptsBundle, writeReceiptsBundle } from '../../audit/bundle';
import { fromBase64, toBase64 } from '../../core/bytes';
import type { AuditEvent, AuditRecord } from '../../core/audit';
import { chainAfter, parseReceipt, RECEIPT_CHAIN_START, receiptNonce, type Receipt } from '../../core/receipt';
import { verifyReceiptsBundle, type ReceiptsBundle } from '../../core/receipt-verify';
import { pinnedKeyText } from '../../core/trail-checkpoints';
import { nativeEd25519Verify } from '../../device/ed25519-native';
import { runCli } from '../support/cli';
import { LOG_NAME, receiptsFixture, ROLLOUT, RUN, WITNESS_NAME, type EntryPlan } from '../support/receipts-bundle';

/**
 * Receipts kept in slice trails (issue 44): a phase run in slices records its devices in each slice's own trail, and
 * the rollout's trail links it with { trail, head }. The bundle carries the slice trails; the verifier anchors each
 * at the head its link names and checks its receipts as the rollout's own. A slice's receipts were asked for by the
 * slice's workflow: their rollout and nonce are the slice's workflow id and run.
 *
 * The trail: the fixture's good trail (test/support/receipts-bundle.ts) with record 5 a link to the slice trail
 * below; record 6 keeps a-01's and s-01's second receipts, s-01's chained after its first, in the slice.
 *   slice 1 devices.outcome [a-02, a-03]   slice 2 devices.outcome [s-01, s-02, a-04 (no receipt)]
 */
const scratch = mkdtempSync(join(tmpdir(), 'wg-receipts-slices-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));
const fx = receiptsFixture(join(scratch, 'fixture'));
const SLICE = `${ROLLOUT}/${RUN.slice(0, 8)}/apply-rest-0`;
const SLICE_RUN = '5e1ce000-0000-4000-8000-00000000abcd';
const good = fx.events();
const clockOf = (text: string) => (parseReceipt(text) as { ok: true; receipt: Receipt }).receipt.fields.clock;
const baseClock = clockOf((good[2]!.evidence as { devices: { receipt: string }[] }).devices[0]!.receipt);

type Entry = { id: string; state: string; receipt?: string; request?: string };

/** A slice device's receipt: the request was the slice workflow's (its id and run make the nonce). */
function sliceReceipt(device: string, request: string): string {
  const nonce = receiptNonce({ rollout: SLICE, run: SLICE_RUN, activity: request, device });
  return fx.receipt(
    { device, request, state: 'applied', over: { rollout: SLICE, nonce } },
    RECEIPT_CHAIN_START,
    baseClock + 4500,
  );
}
const sliceEntries: Entry[][] = [
  [
    { id: 'a-02', state: 'applied', receipt: sliceReceipt('a-02', '11'), request: '11' },
    { id: 'a-03', state: 'applied', receipt: sliceReceipt('a-03', '12'), request: '12' },
  ],
  [
    { id: 's-01', state: 'applied', receipt: sliceReceipt('s-01', '13'), request: '13' },
    { id: 's-02', state: 'applied', receipt: sliceReceipt('s-02', '14'), request: '14' },
    { id: 'a-04', state: 'applied' },
  ],
];
// s-01's second receipt, in the rollout's own record 6, follows its first (in the slice).
const s01First = (parseReceipt(sliceEntries[1]![0]!.receipt) as { ok: true; receipt: Receipt }).receipt;
const s01Second: EntryPlan = { device: 's-01', request: '22', state: 'applied', over: { result: 'already-applied' } };
const s01SecondText = fx.receipt(s01Second, chainAfter(s01First), baseClock + 6000);

function sliceEvents(entries: Entry[][]): AuditEvent[] {
  return entries.map((devices, i) => ({
    seq: i + 1,
    at: new Date(baseClock + 4500 + i).toISOString(),
    rolloutId: SLICE,
    runId: SLICE_RUN,
    event: 'devices.outcome',
    phase: 'rest',
    by: 'wavegate',
    reason: null,
    counts: { applied: 5 },
    evidence: { mode: 'apply', devices },
  }));
}

const jsonl = (records: AuditRecord[]) => records.map((r) => `${JSON.stringify(r)}\n`).join('');

/** The rollout's trail linking the slice trail at its last record, and the bundle of both. */
function build(opts: { slice?: AuditRecord[]; linkTrail?: string } = {}) {
  const slice = opts.slice ?? fx.seal(sliceEvents(sliceEntries));
  const last = slice.at(-1)!;
  const events = structuredClone(good) as AuditEvent[];
  events[4] = {
    ...events[4]!,
    event: 'devices.outcome',
    phase: 'rest',
    evidence: {
      mode: 'apply',
      trail: opts.linkTrail ?? SLICE,
      head: { seq: last.seq, hash: last.hash },
      devices: 5,
      counts: { applied: 5 },
    },
  };
  const six = (events[5]!.evidence as { devices: Entry[] }).devices;
  six[1] = { id: 's-01', state: 'applied', receipt: s01SecondText, request: '22' };
  const records = fx.seal(events);
  const bundle: ReceiptsBundle = {
    ...fx.bundle(records),
    slices: [{ trail: SLICE, segments: [{ name: 'slice.jsonl', text: jsonl(slice) }] }],
  };
  return { records, slice, bundle };
}

/** The slice trail with one entry changed, then resealed: a valid chain, but not the one the link pins. */
function resealedSlice(change: (entries: Entry[][]) => void): AuditRecord[] {
  const entries = structuredClone(sliceEntries);
  change(entries);
  return fx.seal(sliceEvents(entries));
}

function flipSig(text: string): string {
  const sig = /sig (.*)\n$/.exec(text)![1]!;
  const bytes = fromBase64(sig)!;
  bytes[bytes.length - 5]! ^= 0x01;
  return text.replace(sig, toBase64(bytes));
}

const verify = (b: ReceiptsBundle) => verifyReceiptsBundle(b, { verifySignature: nativeEd25519Verify });

describe('receipts in slice trails', () => {
  it('a good bundle: every receipt, in the slice trail too, proven; the slice anchored at its link', () => {
    const verdict = verify(build().bundle);
    expect(verdict.findings).toEqual([]);
    expect(verdict).toMatchObject({ records: 7, receipts: 7, proven: 7, claimed: 1, devices: 6, checkpoints: 3 });
    expect(verdict.slices).toEqual({ trails: 1, anchored: 1, records: 2, receipts: 4 });
  });

  it('a slice record changed after the link (resealed) is refused naming the slice and the link', () => {
    const slice = resealedSlice((e) => (e[1]![1]!.state = 'claimed'));
    const { bundle } = build();
    const verdict = verify({
      ...bundle,
      slices: [{ trail: SLICE, segments: [{ name: 'slice.jsonl', text: jsonl(slice) }] }],
    });
    expect(verdict.findings[0]!.message.startsWith(`record 5 of ${ROLLOUT} links slice trail ${SLICE}: `)).toBe(true);
    expect(verdict.findings).toEqual([
      {
        check: 'trail',
        message: expect.stringMatching(/: edited at seq 2: record 2 has hash .* but the writer acknowledged /),
      },
    ]);
    // Its receipts still hold on their own, but they are the control plane's word until the slice is anchored.
    expect(verdict).toMatchObject({ receipts: 7, proven: 3, claimed: 5 });
  });

  it('a slice trail missing from the bundle is refused naming it', () => {
    const { bundle } = build();
    for (const slices of [[{ trail: SLICE, segments: null }], []]) {
      const verdict = verify({ ...bundle, slices });
      expect(verdict.findings).toEqual([
        {
          check: 'trail',
          message: expect.stringContaining(`links slice trail ${SLICE}, which the bundle does not hold`),
        },
      ]);
      // Its four receipts are not counted proven: they are not in the bundle at all.
      expect(verdict).toMatchObject({ receipts: 3, proven: 3 });
    }
  });

  it("a receipt in a slice with a forged signature is refused naming the device and the slice's record", () => {
    const forged = resealedSlice((e) => (e[1]![1]!.receipt = flipSig(e[1]![1]!.receipt!)));
    const verdict = verify(build({ slice: forged }).bundle);
    expect(verdict.findings).toEqual([
      {
        device: 's-02',
        check: 'signature',
        message: expect.stringContaining(`slice trail ${SLICE} record 2: the signature does not verify`),
      },
    ]);
    expect(verdict).toMatchObject({ receipts: 7, proven: 6 });
  });

  it("a slice device's receipt answers the slice's request: the rollout's own id and run there are refused", () => {
    const theirs = fx.receipt(
      { device: 'a-02', request: '11', state: 'applied' },
      RECEIPT_CHAIN_START,
      baseClock + 4500,
    );
    const verdict = verify(build({ slice: resealedSlice((e) => (e[0]![0]!.receipt = theirs)) }).bundle);
    expect(verdict.findings.map((f) => [f.device, f.check])).toEqual([
      ['a-02', 'rollout'],
      ['a-02', 'nonce'],
    ]);
  });

  it("counters run across the rollout's trail and its slices in link order: a counter reused in the parent is refused", () => {
    const reused = fx.receipt(s01Second, RECEIPT_CHAIN_START, baseClock + 6000);
    const { bundle, records } = build();
    const text = bundle.segments[0]!.text.replace(
      JSON.stringify(s01SecondText).slice(1, -1),
      JSON.stringify(reused).slice(1, -1),
    );
    const lines = text
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as AuditRecord);
    const events = lines.map(({ hash: _h, prev: _p, ...e }) => e as unknown as AuditEvent);
    const resealed = fx.seal(events);
    expect(resealed).toHaveLength(records.length);
    const verdict = verify({ ...fx.bundle(resealed), slices: bundle.slices });
    expect(verdict.findings).toEqual([
      {
        device: 's-01',
        check: 'counter',
        message: expect.stringMatching(/counter 1 reused: counter 1 \(slice trail .*apply-rest-0 record 2\)/),
      },
    ]);
  });

  it('a link to a trail that is not a slice of this rollout is refused', () => {
    const other = 'rollout:web:20990101-000000/abcd1234/apply-rest-0';
    const { bundle } = build({ linkTrail: other });
    const verdict = verify({ ...bundle, slices: [{ ...bundle.slices![0]!, trail: other }] });
    expect(verdict.findings).toContainEqual({
      check: 'trail',
      message: expect.stringContaining(`not a slice of rollout ${ROLLOUT}`),
    });
  });

  it('written and read back: slices/<stem>.jsonl listed in bundle.json with its record count; a missing one named', () => {
    const { bundle } = build();
    const dir = join(scratch, 'written');
    const manifest = writeReceiptsBundle(dir, {
      ...fx.content(bundle),
      slices: [...bundle.slices!, { trail: `${SLICE}x`, segments: null }],
    });
    expect(manifest.slices).toEqual([
      {
        trail: SLICE,
        file: expect.stringMatching(/^slices\/rollout%3Aweb%3A.*%2Fapply-rest-0\.jsonl$/),
        segments: [{ name: 'slice.jsonl', records: 2 }],
      },
      { trail: `${SLICE}x`, missing: true },
    ]);
    expect(manifest.counts).toMatchObject({ slices: 1, sliceRecords: 2 });
    expect(readdirSync(join(dir, 'slices'))).toHaveLength(1);
    const read = readReceiptsBundle(dir);
    expect(read.slices).toEqual([
      { trail: SLICE, segments: [{ name: 'slice.jsonl', text: bundle.slices![0]!.segments![0]!.text }] },
      { trail: `${SLICE}x`, segments: null },
    ]);
    expect(verify(read).findings).toEqual([]);
    // A manifest that points a slice at another file is refused, naming bundle.json.
    const m = JSON.parse(readFileSync(join(dir, 'bundle.json'), 'utf8'));
    m.slices[0].file = 'trail.jsonl';
    writeFileSync(join(dir, 'bundle.json'), JSON.stringify(m));
    expect(() => readReceiptsBundle(dir)).toThrow(/bundle\.json: slices\[0\]\.file: must be slices\//);
  });
});

describe('audit export of a sliced rollout', () => {
  const auditDir = join(scratch, 'audit');
  const { records, slice } = build();
  for (const [id, rs] of [
    [ROLLOUT, records],
    [SLICE, slice],
  ] as const) {
    const file = auditFilePath(auditDir, id);
    mkdirSync(dirname(file), { recursive: true, mode: 0o700 });
    writeFileSync(file, jsonl(rs), { mode: 0o600 });
  }
  const inventory = join(scratch, 'inventory.yaml');
  writeFileSync(
    inventory,
    stringify({
      defaults: { user: 'ops', pool: 'lab' },
      devices: [...fx.devices.values()].map((d) =>
        d.kind === 'agent'
          ? { id: d.id, transport: 'agent', agentKey: d.key }
          : { id: d.id, host: `${d.id}.lab`, receipts: { key: d.key } },
      ),
    }),
  );
  const logKey = join(scratch, 'log.pub');
  writeFileSync(logKey, `${pinnedKeyText({ name: LOG_NAME, publicKey: fx.log.publicKey })}\n`);
  const witnessKey = join(scratch, 'witness.pub');
  writeFileSync(witnessKey, `${pinnedKeyText({ name: WITNESS_NAME, publicKey: fx.witness.publicKey })}\n`);
  const exportTo = (bundle: string) =>
    runCli([
      'audit',
      'export',
      ROLLOUT,
      '--bundle',
      bundle,
      '--inventory',
      inventory,
      '--profiles',
      fx.profile.root,
      '--audit-dir',
      auditDir,
    ]);

  it('follows the link: the slice trail in the bundle byte for byte, every receipt verified by a separate process', async () => {
    const bundle = join(scratch, 'exported');
    const exported = await exportTo(bundle);
    expect(exported.stderr).toBe('');
    expect(exported.stdout).toMatch(/7 records, 1 slice trail\(s\) of 2 records, 7 receipts of 6 devices/);
    expect(exported.code).toBe(0);
    const read = readReceiptsBundle(bundle);
    expect(read.slices).toEqual([{ trail: SLICE, segments: [{ name: expect.any(String), text: jsonl(slice) }] }]);
    const checked = await runCli(['audit', 'verify', '--receipts', bundle, '--no-checkpoints-expected']);
    expect(checked.stdout).toMatch(/receipts: 7 checked for 6 devices; 7 proven, 1 claimed/);
    expect(checked.stdout).toMatch(
      /slices: 1 of 1 linked slice trail\(s\) anchored at the head their link names \(2 records, 4 receipts/,
    );
    expect(checked.code).toBe(0);
  });

  it('a slice trail the store has not is exported as missing and named; the verifier refuses it', async () => {
    rmSync(auditFilePath(auditDir, SLICE));
    const bundle = join(scratch, 'exported-missing');
    const exported = await exportTo(bundle);
    expect(exported.stdout).toContain(`missing: slice trail ${SLICE}`);
    expect(exported.code).toBe(0);
    const checked = await runCli(['audit', 'verify', '--receipts', bundle, '--no-checkpoints-expected']);
    expect(checked.stdout).toContain(
      `-: trail: record 5 of ${ROLLOUT} links slice trail ${SLICE}, which the bundle does not hold`,
    );
    expect(checked.code).toBe(1);
  });
});
