import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { toBase64 } from '../../core/bytes';
import { sealRecord, GENESIS_HASH, type AuditEvent, type AuditRecord } from '../../core/audit';
import { checkpointBody, checkpointOrigin, cosign, signCheckpoint, signedNote } from '../../core/checkpoint';
import { leafHash, treeRoot } from '../../core/merkle';
import {
  chainAfter,
  parseReceipt,
  RECEIPT_CHAIN_START,
  receiptBody,
  receiptKeyId,
  receiptNonce,
  receiptText,
  signAgentReceipt,
  sshEd25519Key,
  sshsigFromArmor,
  type ReceiptChainState,
  type ReceiptFields,
} from '../../core/receipt';
import type { EnrolledDevice, ReceiptsBundle } from '../../core/receipt-verify';
import { pinnedKeyText } from '../../core/trail-checkpoints';
import { keyPairFromSeed, parseTrust, type KeyPair } from '../../core/signing';
import { envelopeDigestOf } from '../../core/twin';
import type { BundleContent } from '../../audit/bundle';
import { parse as parseYaml } from 'yaml';
import { writeSignedProfile, type SignedProfile } from './signed-profile';

/**
 * A receipts bundle that passes, built with real keys: agent devices sign with signAgentReceipt, SSH devices with
 * `ssh-keygen -Y sign` (OpenSSH's own), over a trail sealed with core/audit.ts and checkpoints the log signs and the
 * witness cosigns (core/checkpoint.ts). The tamper corpus (test/unit/core/receipt-verify.test.ts) changes one thing of
 * it at a time; the CLI and standalone-verifier tests write it with audit/bundle.ts writeReceiptsBundle.
 *
 * The good trail (rollout r1 → r2 of profile `web`):
 *   1 rollout.started {from 1, to 2}   2 phase.started canary   3 devices.outcome [a-01]
 *   4 phase.started rest               5 devices.outcome [a-02, a-03, s-01, s-02, a-04 (no receipt: claimed)]
 *   6 devices.outcome [a-01, s-01 already-applied, each its second receipt]   7 rollout.completed
 * Checkpoints at sizes 2, 6 and 7.
 */

export const ROLLOUT = 'rollout:web:20261207-101500';
export const RUN = '0b5c1e1e-8a1f-4b11-9a53-3a3d0c7c1a11';
export const LOG_NAME = 'wavegate-log';
export const WITNESS_NAME = 'wavegate-witness';

export interface DeviceSigner {
  id: string;
  kind: 'agent' | 'ssh';
  /** The enrolled key's text (agentKey, or the ssh-ed25519 line). */
  key: string;
  pair?: KeyPair;
  keyFile?: string;
}

export interface EntryPlan {
  device: string;
  request: string;
  state: string;
  /** No receipt: the control plane's word alone. */
  bare?: boolean;
  /** Receipt fields over the defaults (applied r2, counter and prev from the device's chain). */
  over?: Partial<ReceiptFields>;
  /** Sign with another device's key (the key line and signature are that device's). */
  signer?: string;
}

export interface Fixture {
  scratch: string;
  profile: SignedProfile;
  devices: Map<string, DeviceSigner>;
  log: KeyPair;
  witness: KeyPair;
  /** Envelope digest of revision n. */
  digest(n: number): string;
  /** A receipt's text for a device (keyed by `signer`, default its own key), fields over the plan's. */
  receipt(plan: EntryPlan, chain: ReceiptChainState, clock: number): string;
  /** The good trail's events; `entries` replaces the devices of record 3, 5 or 6. */
  events(entries?: Partial<Record<3 | 5 | 6, EntryPlan[]>>): AuditEvent[];
  /** Seal events into records. */
  seal(events: AuditEvent[]): AuditRecord[];
  /** A checkpoint note over the first `size` records, signed by the log and (unless `cosigned: false`) the witness. */
  checkpoint(records: AuditRecord[], size: number, opts?: { cosigned?: boolean }): string;
  /** The bundle of these records with checkpoints at `sizes` (default 2, 6, 7). */
  bundle(records: AuditRecord[], opts?: { sizes?: number[]; enrolment?: EnrolledDevice[] }): ReceiptsBundle;
  /** The same, as audit/bundle.ts writeReceiptsBundle takes it. */
  content(bundle: ReceiptsBundle): BundleContent;
  enrolment(): EnrolledDevice[];
}

const BASE_CLOCK = Date.now() - 60_000;

function sshSign(keyFile: string, body: string, scratch: string): string {
  const msg = join(scratch, `msg-${process.pid}-${Math.random().toString(36).slice(2)}`);
  writeFileSync(msg, body);
  try {
    execFileSync('ssh-keygen', ['-q', '-Y', 'sign', '-f', keyFile, '-n', 'wavegate-receipt', msg]);
    return toBase64(sshsigFromArmor(readFileSync(`${msg}.sig`, 'utf8'))!);
  } finally {
    rmSync(msg, { force: true });
    rmSync(`${msg}.sig`, { force: true });
  }
}

function hexBytes(hex: string): Uint8Array {
  return Uint8Array.from(Buffer.from(hex, 'hex'));
}

export function receiptsFixture(scratch: string): Fixture {
  mkdirSync(scratch, { recursive: true });
  const profile = writeSignedProfile({
    root: join(scratch, 'profiles'),
    name: 'web',
    keys: 1,
    revisions: [
      {
        revision: 1,
        apply: 'install -m 0644 "$WAVEGATE_STAGING/conf" /etc/web.conf',
        verify: 'grep -q r1 /etc/web.conf',
        payload: { conf: 'r1\n' },
      },
      {
        revision: 2,
        apply: 'install -m 0644 "$WAVEGATE_STAGING/conf" /etc/web.conf',
        verify: 'grep -q r2 /etc/web.conf',
        payload: { conf: 'r2\n' },
      },
    ],
  });
  const devices = new Map<string, DeviceSigner>();
  for (const [i, id] of ['a-01', 'a-02', 'a-03', 'a-04'].entries()) {
    const pair = keyPairFromSeed(new Uint8Array(32).fill(i + 1));
    devices.set(id, { id, kind: 'agent', key: `ed25519:${toBase64(pair.publicKey)}`, pair });
  }
  for (const id of ['s-01', 's-02']) {
    const keyFile = join(scratch, `${id}_receipt_key`);
    execFileSync('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-C', id, '-f', keyFile]);
    const line = readFileSync(`${keyFile}.pub`, 'utf8').trim().split(' ').slice(0, 2).join(' ');
    devices.set(id, { id, kind: 'ssh', key: line, keyFile });
  }
  const log = keyPairFromSeed(new Uint8Array(32).fill(101));
  const witness = keyPairFromSeed(new Uint8Array(32).fill(102));
  const digest = (n: number) => envelopeDigestOf(profile.envelope(n));

  const receipt = (plan: EntryPlan, chain: ReceiptChainState, clock: number): string => {
    const signer = devices.get(plan.signer ?? plan.device)!;
    const fields = {
      device: plan.device,
      rollout: ROLLOUT,
      phase: null,
      nonce: receiptNonce({ rollout: ROLLOUT, run: RUN, activity: plan.request, device: plan.device }),
      counter: chain.counter + 1,
      profile: 'web',
      revision: 2,
      requested: digest(2),
      observed: digest(2),
      result: 'applied' as const,
      reason: null,
      prev: chain.last,
      clock,
      ...plan.over,
    };
    if (signer.kind === 'agent') return receiptText(signAgentReceipt(fields, signer.pair!));
    const publicKey = sshEd25519Key(signer.key)!;
    const body = receiptBody({ ...fields, keyKind: 'ssh', keyId: receiptKeyId('ssh', publicKey) });
    return receiptText({ body, sig: sshSign(signer.keyFile!, body, scratch) });
  };

  const good: Record<3 | 5 | 6, EntryPlan[]> = {
    3: [{ device: 'a-01', request: '7', state: 'applied' }],
    5: [
      { device: 'a-02', request: '11', state: 'applied' },
      { device: 'a-03', request: '12', state: 'applied' },
      { device: 's-01', request: '13', state: 'applied' },
      { device: 's-02', request: '14', state: 'applied' },
      { device: 'a-04', request: '15', state: 'applied', bare: true },
    ],
    6: [
      { device: 'a-01', request: '21', state: 'applied', over: { result: 'already-applied' } },
      { device: 's-01', request: '22', state: 'applied', over: { result: 'already-applied' } },
    ],
  };
  // Receipts are made once per plan (ssh-keygen is a process each): a plan object signs the same text again.
  const made = new Map<EntryPlan, string>();

  const events = (entries: Partial<Record<3 | 5 | 6, EntryPlan[]>> = {}): AuditEvent[] => {
    const chains = new Map<string, ReceiptChainState>();
    const outcome = (seq: 3 | 5 | 6, phase: string): AuditEvent => ({
      ...base(seq, 'devices.outcome', phase),
      evidence: {
        mode: 'apply',
        devices: (entries[seq] ?? good[seq]).map((plan) => {
          if (plan.bare) return { id: plan.device, state: plan.state };
          const chain = chains.get(plan.device) ?? RECEIPT_CHAIN_START;
          let text = made.get(plan);
          if (!text) {
            text = receipt(plan, chain, BASE_CLOCK + seq * 1000);
            made.set(plan, text);
          }
          const parsed = parseReceipt(text);
          if (parsed.ok) chains.set(plan.device, chainAfter(parsed.receipt));
          return { id: plan.device, state: plan.state, receipt: text, request: plan.request };
        }),
      },
    });
    return [
      { ...base(1, 'rollout.started', null), evidence: { from: 1, to: 2, phases: 2 } },
      base(2, 'phase.started', 'canary'),
      outcome(3, 'canary'),
      base(4, 'phase.started', 'rest'),
      outcome(5, 'rest'),
      outcome(6, 'rest'),
      base(7, 'rollout.completed', null),
    ];
  };

  const seal = (evs: AuditEvent[]): AuditRecord[] => {
    const out: AuditRecord[] = [];
    let prev = GENESIS_HASH;
    for (const e of evs) {
      const r = sealRecord(e, prev);
      out.push(r);
      prev = r.hash;
    }
    return out;
  };

  const checkpoint = (records: AuditRecord[], size: number, opts: { cosigned?: boolean } = {}): string => {
    const root = treeRoot(
      records.map((r) => leafHash(hexBytes(r.hash))),
      size,
    );
    const body = checkpointBody({ origin: checkpointOrigin(ROLLOUT), size, root });
    const lines = [signCheckpoint(body, log, LOG_NAME)];
    if (opts.cosigned !== false) lines.push(cosign(body, witness, WITNESS_NAME, Math.floor(BASE_CLOCK / 1000) + size));
    return signedNote(body, lines);
  };

  const enrolment = (): EnrolledDevice[] => [...devices.values()].map((d) => ({ id: d.id, kind: d.kind, key: d.key }));

  const trustText = readFileSync(profile.trustFile, 'utf8');
  const bundle = (records: AuditRecord[], opts: { sizes?: number[]; enrolment?: EnrolledDevice[] } = {}) => ({
    rollout: ROLLOUT,
    segments: [{ name: 'trail.jsonl', text: records.map((r) => `${JSON.stringify(r)}\n`).join('') }],
    enrolment: opts.enrolment ?? enrolment(),
    revisions: [1, 2].map((n) => ({ profile: 'web', revision: n, envelope: profile.envelope(n) })),
    trust: { web: parseTrust(parseYaml(trustText), profile.trustFile) },
    checkpoints: (opts.sizes ?? [2, 6, 7]).map((size) => checkpoint(records, size)),
    logKey: pinnedKeyText({ name: LOG_NAME, publicKey: log.publicKey }),
    witnessKey: pinnedKeyText({ name: WITNESS_NAME, publicKey: witness.publicKey }),
  });

  const content = (b: ReceiptsBundle): BundleContent => ({
    rollout: b.rollout,
    segments: b.segments,
    enrolment: b.enrolment,
    revisions: b.revisions.map((r) => ({
      profile: r.profile,
      revision: r.revision,
      text: `${JSON.stringify(r.envelope, null, 2)}\n`,
    })),
    trust: [{ profile: 'web', text: trustText }],
    checkpoints: b.checkpoints,
    ...(b.logKey ? { logKey: b.logKey } : {}),
    ...(b.witnessKey ? { witnessKey: b.witnessKey } : {}),
    receipts: 7,
    devices: 6,
  });

  return {
    scratch,
    profile,
    devices,
    log,
    witness,
    digest,
    receipt,
    events,
    seal,
    checkpoint,
    bundle,
    content,
    enrolment,
  };
}

function base(seq: number, event: AuditEvent['event'], phase: string | null): AuditEvent {
  return {
    seq,
    at: new Date(BASE_CLOCK + seq * 1000).toISOString(),
    rolloutId: ROLLOUT,
    runId: RUN,
    event,
    phase,
    by: 'wavegate',
    reason: null,
    counts: null,
    evidence: null,
  };
}
