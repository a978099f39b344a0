/**
 * Offline verification of a receipts bundle (`wavegate audit verify --receipts`, issue 44: 10,000 receipts in
 * ≤ 5 s, 100,000 in ≤ 60 s on this 2-core machine). For each size: a bundle of one rollout whose N devices each
 * sent one receipt (agents signing with Ed25519, `--ssh-share` of them SSH devices with SSHSIG receipts), recorded
 * 500 devices a devices.outcome record as the workflow does, with a checkpoint every 10 records and at the end
 * (log-signed, witness-cosigned); then the real CLI verifies it `--runs` times, as an auditor runs it. Reported:
 * wall, CPU (the CLI's, bench/cpu-account.ts), bundle size, and the verdict (it must find nothing).
 * `--slices <n>`: the devices recorded in slice trails of n devices each, as a phase run in slices keeps them (each
 * receipt naming its slice's workflow id and run, the rollout's trail one linking record per slice).
 *
 *   npx tsx bench/receipts-verify.ts --receipts 10000,100000 [--runs 3] [--ssh-share 0.01] [--slices 500] [--keep DIR]
 *
 * The CLI runs from dist/ when it is built (`npm run build`: what the installed package runs), else through tsx.
 */
import { spawnSync } from 'node:child_process';
import { createHash, generateKeyPairSync } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { writeReceiptsBundle } from '../audit/bundle';
import { GENESIS_HASH, sealRecord, type AuditEvent, type AuditRecord } from '../core/audit';
import { toBase64 } from '../core/bytes';
import { checkpointBody, checkpointOrigin, cosign, signCheckpoint, signedNote } from '../core/checkpoint';
import { leafHash, treeRoot } from '../core/merkle';
import {
  parseReceipt,
  RECEIPT_GENESIS,
  RECEIPT_SSH_NAMESPACE,
  receiptBody,
  receiptKeyId,
  receiptNonce,
  receiptSignatureValid,
  receiptText,
  sshEd25519Wire,
  type ReceiptFields,
} from '../core/receipt';
import type { EnrolledDevice } from '../core/receipt-verify';
import { pinnedKeyText } from '../core/trail-checkpoints';
import { keyPairFromSeed } from '../core/signing';
import { envelopeDigestOf } from '../core/twin';
import { nativeEd25519Sign } from '../device/ed25519-native';
import { PROJECT_ROOT } from '../intake/package-layout';
import { writeSignedProfile } from '../test/support/signed-profile';
import { processCpu } from './cpu-account';
import { wholeFlag } from './flags';

const { values: flags } = parseArgs({
  options: {
    receipts: { type: 'string', default: '10000,100000' },
    runs: { type: 'string', default: '3' },
    'ssh-share': { type: 'string', default: '0.01' },
    slices: { type: 'string', default: '0' },
    keep: { type: 'string' },
  },
});
const SLICE = wholeFlag('slices', flags.slices, 0, 1_000_000);
const SIZES = (flags.receipts ?? '').split(',').map((s) => wholeFlag('receipts', s, 1, 1_000_000));
const RUNS = wholeFlag('runs', flags.runs, 1, 20);
const SSH_SHARE = Number(flags['ssh-share']);
if (!(SSH_SHARE >= 0 && SSH_SHARE <= 1)) throw new Error(`--ssh-share: a fraction 0-1, got ${flags['ssh-share']}`);

const ROLLOUT = 'rollout:web:20261207-101500';
const RUN = '0b5c1e1e-8a1f-4b11-9a53-3a3d0c7c1a11';
const CHUNK = 500;
/** A slice's workflow id and run, as workflows/batches.ts names them (docs/formats.md, "Slice trails"). */
const sliceId = (k: number) => `${ROLLOUT}/${RUN.slice(0, 8)}/apply-all-${k}`;
const sliceRun = (k: number) => `5e1ce000-0000-4000-8000-${String(k).padStart(12, '0')}`;

/** A fresh Ed25519 key by Node (keyPairFromSeed's @noble would take ~1 ms a key): its seed and public key. */
function newKey(): { seed: Uint8Array; publicKey: Uint8Array } {
  const { privateKey, publicKey } = generateKeyPairSync('ed25519');
  const pkcs8 = privateKey.export({ format: 'der', type: 'pkcs8' });
  const spki = publicKey.export({ format: 'der', type: 'spki' });
  return { seed: new Uint8Array(pkcs8.subarray(-32)), publicKey: new Uint8Array(spki.subarray(-32)) };
}

const u32 = (n: number) => {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(n);
  return b;
};
const sshString = (b: Uint8Array | string) => {
  const bytes = typeof b === 'string' ? Buffer.from(b) : Buffer.from(b);
  return Buffer.concat([u32(bytes.length), bytes]);
};

/** The SSHSIG blob `ssh-keygen -Y sign -n wavegate-receipt` makes (PROTOCOL.sshsig, sha512), made here in-process. */
function sshsig(message: string, key: { seed: Uint8Array; publicKey: Uint8Array }): string {
  const hash = createHash('sha512').update(message).digest();
  const signed = Buffer.concat([
    Buffer.from('SSHSIG'),
    sshString(RECEIPT_SSH_NAMESPACE),
    sshString(''),
    sshString('sha512'),
    sshString(hash),
  ]);
  const sig = nativeEd25519Sign(signed, key.seed);
  const blob = Buffer.concat([
    Buffer.from('SSHSIG'),
    u32(1),
    sshString(sshEd25519Wire(key.publicKey)),
    sshString(RECEIPT_SSH_NAMESPACE),
    sshString(''),
    sshString('sha512'),
    sshString(Buffer.concat([sshString('ssh-ed25519'), sshString(sig)])),
  ]);
  return blob.toString('base64');
}

/** A bundle of `n` devices, one receipt each, written to `dir`. */
function makeBundle(dir: string, n: number): void {
  const profile = writeSignedProfile({
    root: join(dir, 'profiles'),
    name: 'web',
    keys: 1,
    revisions: [
      {
        revision: 1,
        apply: 'install -m 0644 "$WAVEGATE_STAGING/c" /etc/c',
        verify: 'grep -q r1 /etc/c',
        payload: { c: 'r1\n' },
      },
      {
        revision: 2,
        apply: 'install -m 0644 "$WAVEGATE_STAGING/c" /etc/c',
        verify: 'grep -q r2 /etc/c',
        payload: { c: 'r2\n' },
      },
    ],
  });
  const digest = envelopeDigestOf(profile.envelope(2));
  const clock = Date.now() - 60_000;
  const enrolment: EnrolledDevice[] = [];
  const entries: object[] = [];
  /** Per slice (with --slices), its devices' entries; without, the one group of the rollout's own trail. */
  const groups = new Map<number, object[]>();
  for (let i = 0; i < n; i++) {
    const id = `dev-${String(i).padStart(6, '0')}`;
    const ssh = i < Math.round(n * SSH_SHARE);
    const key = newKey();
    const request = String(1000 + i);
    const k = SLICE > 0 ? Math.floor(i / SLICE) : -1;
    const rollout = k >= 0 ? sliceId(k) : ROLLOUT;
    const run = k >= 0 ? sliceRun(k) : RUN;
    const fields: ReceiptFields = {
      device: id,
      keyKind: ssh ? 'ssh' : 'agent',
      keyId: receiptKeyId(ssh ? 'ssh' : 'agent', key.publicKey),
      rollout,
      phase: 1,
      nonce: receiptNonce({ rollout, run, activity: request, device: id }),
      counter: 1,
      profile: 'web',
      revision: 2,
      requested: digest,
      observed: digest,
      result: 'applied',
      reason: null,
      prev: RECEIPT_GENESIS,
      clock: clock + i,
    };
    const body = receiptBody(fields);
    const sig = ssh ? sshsig(body, key) : toBase64(nativeEd25519Sign(new TextEncoder().encode(body), key.seed));
    const text = receiptText({ body, sig });
    // The first of each kind checked here with the product's own verifier: the bench signs what a device signs.
    if (i === 0 || i === Math.round(n * SSH_SHARE)) {
      const parsed = parseReceipt(text);
      if (!parsed.ok || !receiptSignatureValid(parsed.receipt, key.publicKey)) throw new Error('bench: a bad receipt');
    }
    enrolment.push({
      id,
      kind: ssh ? 'ssh' : 'agent',
      key: ssh ? `ssh-ed25519 ${toBase64(sshEd25519Wire(key.publicKey))}` : `ed25519:${toBase64(key.publicKey)}`,
    });
    entries.push({ id, state: 'applied', receipt: text, request });
    if (!groups.has(k)) groups.set(k, []);
    groups.get(k)!.push(entries.at(-1)!);
  }
  const seal = (evs: AuditEvent[]): AuditRecord[] => {
    let last = GENESIS_HASH;
    return evs.map((e) => {
      const r = sealRecord(e, last);
      last = r.hash;
      return r;
    });
  };
  const slices: { trail: string; segments: { name: string; text: string }[] }[] = [];
  const links: Omit<AuditEvent, 'seq' | 'at'>[] = [];
  if (SLICE > 0)
    for (const [k, mine] of groups) {
      const evs: AuditEvent[] = [];
      for (let i = 0; i < mine.length; i += CHUNK)
        evs.push({
          ...base('devices.outcome', 'all'),
          rolloutId: sliceId(k),
          runId: sliceRun(k),
          seq: evs.length + 1,
          at: new Date(clock + i).toISOString(),
          evidence: { mode: 'apply', devices: mine.slice(i, i + CHUNK) },
        });
      const sealed = seal(evs);
      const head = { seq: sealed.at(-1)!.seq, hash: sealed.at(-1)!.hash };
      slices.push({
        trail: sliceId(k),
        segments: [{ name: 'slice.jsonl', text: sealed.map((r) => `${JSON.stringify(r)}\n`).join('') }],
      });
      links.push({
        ...base('devices.outcome', 'all'),
        evidence: { mode: 'apply', trail: sliceId(k), head, devices: mine.length, counts: { applied: mine.length } },
      });
    }
  const events: Omit<AuditEvent, 'seq' | 'at'>[] = [
    { ...base('rollout.started', null), evidence: { from: 1, to: 2, phases: 1 } },
    base('phase.started', 'all'),
  ];
  events.push(...links);
  for (let i = 0; SLICE === 0 && i < entries.length; i += CHUNK)
    events.push({
      ...base('devices.outcome', 'all'),
      evidence: { mode: 'apply', devices: entries.slice(i, i + CHUNK) },
    });
  events.push(base('rollout.completed', null));
  const records = seal(
    events.map((e, i) => ({ ...e, seq: i + 1, at: new Date(clock + i).toISOString() }) as AuditEvent),
  );
  const log = keyPairFromSeed(new Uint8Array(32).fill(1));
  const witness = keyPairFromSeed(new Uint8Array(32).fill(2));
  const sizes = [...records.keys()].map((i) => i + 1).filter((s) => s % 10 === 0 || s === records.length);
  const leaves = records.map((r) => leafHash(Buffer.from(r.hash, 'hex')));
  const checkpoints = sizes.map((size) => {
    const b = checkpointBody({ origin: checkpointOrigin(ROLLOUT), size, root: treeRoot(leaves, size) });
    return signedNote(b, [signCheckpoint(b, log, 'log'), cosign(b, witness, 'witness', Math.floor(clock / 1000))]);
  });
  writeReceiptsBundle(join(dir, 'bundle'), {
    rollout: ROLLOUT,
    segments: [{ name: 'trail.jsonl', text: records.map((r) => `${JSON.stringify(r)}\n`).join('') }],
    enrolment,
    revisions: [1, 2].map((r) => ({ profile: 'web', revision: r, text: JSON.stringify(profile.envelope(r)) })),
    trust: [{ profile: 'web', text: readFileSync(profile.trustFile, 'utf8') }],
    checkpoints,
    logKey: pinnedKeyText({ name: 'log', publicKey: log.publicKey }),
    witnessKey: pinnedKeyText({ name: 'witness', publicKey: witness.publicKey }),
    ...(slices.length > 0 ? { slices } : {}),
    receipts: n,
    devices: n,
  });
}

function base(event: AuditEvent['event'], phase: string | null): Omit<AuditEvent, 'seq' | 'at'> {
  return { rolloutId: ROLLOUT, runId: RUN, event, phase, by: 'wavegate', reason: null, counts: null, evidence: null };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const fromDist = existsSync(join(PROJECT_ROOT, 'dist', 'cli', 'main.js'));

function runCli(bundle: string): { wall: number; cpu: number; stdout: string; code: number | null } {
  const before = processCpu(process.pid).reaped;
  const start = performance.now();
  const r = spawnSync(
    process.execPath,
    [join(PROJECT_ROOT, 'bin', 'wavegate.js'), 'audit', 'verify', '--receipts', bundle],
    {
      encoding: 'utf8',
      maxBuffer: 64 * 1024 * 1024,
      env: { ...process.env, ...(fromDist ? { WAVEGATE_RUN_FROM: 'dist' } : {}) },
    },
  );
  const wall = (performance.now() - start) / 1000;
  return { wall, cpu: processCpu(process.pid).reaped - before, stdout: r.stdout, code: r.status };
}

const scratch = flags.keep ?? mkdtempSync(join(tmpdir(), 'wg-receipts-bench-'));
mkdirSync(scratch, { recursive: true });
console.log(
  `receipts-verify: CLI from ${fromDist ? 'dist' : 'source (tsx)'}, load ${loadavg()[0]!.toFixed(1)}, ${RUNS} run(s)${SLICE > 0 ? `, in slice trails of ${SLICE} devices` : ''}`,
);
console.log(
  '| receipts | bundle | CLI wall (median; runs) | CLI CPU (median) | in-process read + verify, once | findings |',
);
console.log('|---:|---:|---:|---:|---:|');
try {
  for (const n of SIZES) {
    const dir = join(scratch, String(n));
    const made = performance.now();
    makeBundle(dir, n);
    const bundle = join(dir, 'bundle');
    const slicesDir = join(bundle, 'slices');
    const sliceFiles = existsSync(slicesDir) ? readdirSync(slicesDir).map((f) => join(slicesDir, f)) : [];
    const mb = [join(bundle, 'trail.jsonl'), ...sliceFiles].reduce((n, f) => n + statSync(f).size, 0) / 2 ** 20;
    process.stderr.write(`${n}: bundle made in ${((performance.now() - made) / 1000).toFixed(1)} s\n`);
    const cli = Array.from({ length: RUNS }, () => runCli(bundle));
    const bad = cli.find((c) => c.code !== 0);
    if (bad) throw new Error(`audit verify exited ${bad.code}:\n${bad.stdout.slice(0, 2000)}`);
    const walls = cli.map((c) => c.wall);
    console.log(
      `| ${n.toLocaleString('en-US')} | ${mb.toFixed(1)} MiB | ${median(walls).toFixed(2)} s (${walls.map((w) => w.toFixed(2)).join(', ')}) | ${median(cli.map((c) => c.cpu)).toFixed(2)} s | 0 |`,
    );
  }
} finally {
  if (!flags.keep) rmSync(scratch, { recursive: true, force: true });
}
