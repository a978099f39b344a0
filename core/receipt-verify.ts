import { bytesEqual, fromBase64, toBase64 } from './bytes';
import { parseAuditLog, verifyAuditSegments, type AuditRecord, type AuditSegment, type TrailVerdict } from './audit';
import { parseCheckpoint, type SignerKind } from './checkpoint';
import { WavegateError } from './errors';
import { HASH_BYTES, inclusionProofOf, memoizedRangeRoot, verifyInclusion } from './merkle';
import { checkTrailCheckpoints, parsePinnedKey, type PinnedKey } from './trail-checkpoints';
import { linkOf, type TrailLink } from './trail-link';
import { recordLeafHash, TrailTree } from './trail-tree';
import {
  parseReceipt,
  RECEIPT_GENESIS,
  receiptHash,
  receiptKeyId,
  receiptNonce,
  receiptSignatureValid,
  sshEd25519Key,
  type Ed25519Check,
  type Receipt,
  type ReceiptKeyKind,
  type ReceiptResult,
} from './receipt';
import { ed25519Verify, keyId, MAX_CLOCK_SKEW_MS, verifyEnvelope, type Trust, type VerifyResult } from './signing';
import { proofProblem, type RotationProof } from './agent-rotation';
import { envelopeDigestOf } from './twin';
import type { Envelope } from './signing';

/**
 * The offline verifier of a receipts bundle (docs/formats.md, "Receipts bundle"): what an auditor who trusts
 * neither the worker nor Temporal nor the audit store runs over an exported rollout (`wavegate audit verify
 * --receipts`). It takes the bundle as parsed (audit/bundle.ts reads it from a directory) and returns findings,
 * each naming the device (when one is concerned) and the check; none means every receipt in the trail says, under
 * the device's own enrolled key, what the trail says of it, and the trail is the one the checkpoints signed.
 *
 * Pure (no Node API): the Ed25519 check is passed in (Node's own is ten times @noble's: 100,000 receipts).
 */

export const RECEIPTS_BUNDLE_FORMAT = 'wavegate-receipts-bundle-v1';

/** What a device enrolled with: its id, the kind of key that signs its receipts, the key, and its revocation. */
export interface EnrolledDevice {
  id: string;
  kind: ReceiptKeyKind;
  /** agent: `ed25519:<base64 of 32 bytes>` (the inventory's agentKey); ssh: `ssh-ed25519 AAAA…` (receipts.key). */
  key: string;
  /** Receipts made at or after `at` (by the device's clock or the trail's) are refused. */
  revoked?: { at: string; reason: string };
  /**
   * An agent's identity key rotations, oldest first (docs/formats.md "The bundle", "Key history"): each step's
   * proof hands over from the key before it to the next. `key` is one of the keys they name; receipts verify under
   * every key linked to it by proofs that verify.
   */
  history?: KeyRotationStep[];
}

/** One rotation of an agent's identity key as a bundle carries it (the gateway's proofs file, the CLI's state file). */
export interface KeyRotationStep {
  /** The rotation's id (the proof's, and the device's in its statements). */
  rotation: string;
  /** When the gateway recorded the proof (its word: the order of the steps, not a check). */
  provenAt: string;
  proof: RotationProof;
  /** When the operator's retire was recorded for this device: the old key's receipts from then on are refused. */
  retiredAt?: string;
}

/** A signed revision the trail names, as the profile's envelopes/<n>.json holds it. */
export interface BundleRevision {
  profile: string;
  revision: number;
  envelope: unknown;
}

export interface ReceiptsBundle {
  rollout: string;
  /** The trail as the store held it: segment 1 from the genesis, each later one started by an audit.override. */
  segments: AuditSegment[];
  enrolment: EnrolledDevice[];
  revisions: BundleRevision[];
  /** Each profile's pins (trust/<profile>.yaml), parsed. */
  trust: Record<string, Trust>;
  /** Checkpoint notes (C2SP signed notes) in the order the log made them. */
  checkpoints: string[];
  /** The log's and the witness's verifier keys (C2SP vkey lines), when the bundle holds them. */
  logKey?: string;
  witnessKey?: string;
  /** The slice trails the trail links (a phase run in slices keeps its devices' records there), as exported. */
  slices?: BundleSliceTrail[];
}

/** A slice trail as the bundle holds it: its segments, or null when the export found it missing from the store. */
export interface BundleSliceTrail {
  trail: string;
  segments: AuditSegment[] | null;
}

/** Links are followed this deep, as `wavegate audit --verify` follows them (a slice's trail may link its own). */
const MAX_LINK_DEPTH = 3;

/** The checks, as findings name them. */
export type ReceiptCheck =
  | 'trail'
  | 'receipt'
  | 'enrolment'
  | 'key'
  | 'rotation'
  | 'signature'
  | 'revoked'
  | 'nonce'
  | 'rollout'
  | 'device'
  | 'phase'
  | 'counter'
  | 'chain'
  | 'revision'
  | 'observed'
  | 'floor'
  | 'state'
  | 'checkpoint'
  | 'fork'
  | 'inclusion'
  | 'pinned-key';

export interface ReceiptFinding {
  device?: string;
  check: ReceiptCheck;
  message: string;
}

export interface ReceiptsVerdict {
  findings: ReceiptFinding[];
  records: number;
  /** Device entries that carry a receipt, and of those the ones no finding names (proven); the rest are claimed. */
  receipts: number;
  proven: number;
  /** Device entries of devices.outcome records without a verified receipt: the control plane's word alone. */
  claimed: number;
  devices: number;
  checkpoints: number;
  /** Inclusion under the last checkpoint: proofs checked and the largest one's size (null: no checkpoint). */
  inclusion: { proofs: number; largestBytes: number; size: number } | null;
  /**
   * The slice trails the trail links: those anchored (their chain intact, ending at the head their linking record
   * names), their records, and the receipts in them. A receipt in a slice trail is included through that chain up
   * to the anchored head and the linking record's own inclusion under the last checkpoint.
   */
  slices: { trails: number; anchored: number; records: number; receipts: number };
  /**
   * The log's and the witness's keys the checkpoints were checked under: their key ids and whether the auditor
   * pinned them or the bundle named them (its own word: compared with nothing unless pinned). Null: none.
   */
  keys: Record<SignerKind, TrustedKey | null>;
}

/** A checkpoint key the verification trusted. */
export interface TrustedKey {
  keyId: string;
  from: 'pinned' | 'bundle';
}

export interface ReceiptsVerifyOptions {
  /** The Ed25519 check (default @noble's): the CLI passes Node's (device/ed25519-native.ts). */
  verifySignature?: Ed25519Check;
  /**
   * The auditor's own copies of the log's and the witness's keys (`--log-key`, `--witness-key`): the bundle's
   * keys/<kind>.pub must be these, and the checkpoints are checked under them. Without, the bundle vouches for its
   * own keys.
   */
  pinned?: Partial<Record<SignerKind, PinnedKey>>;
  /**
   * False when the operator says the rollout ran without checkpoints (`--no-checkpoints-expected`): a bundle with
   * none is then not a finding. Default true: checkpoints stripped from a bundle would otherwise pass unseen.
   */
  checkpointsExpected?: boolean;
}

/** A device's enrolled key, decoded once, and the keys its verified rotation proofs link to it. */
interface EnrolledKey {
  device: EnrolledDevice;
  publicKey: Uint8Array;
  keyId: string;
  revokedAt?: number;
  /** Oldest first; the enrolled key among them (just it without a history). */
  linked: LinkedKey[];
  /** Keys the history names that no verified proof links to the enrolled key, by id: why not. */
  unlinked: Map<string, string>;
}

/** A key of a device's history that receipts may be signed with. */
interface LinkedKey {
  publicKey: Uint8Array;
  keyId: string;
  /** Its place in the history (0: the first key): a device's receipts never go back to a lower one. */
  index: number;
  /** The rotation that handed over from it and that rotation's retire for the device (epoch ms), if any. */
  handedOver?: { rotation: string; retiredAt?: number };
}

/** Per device: its last receipt in the bundle (counter, hash, where) and its floor per profile. */
interface DeviceChain {
  counter: number;
  hash: string;
  /** Where its last receipt is (`record <seq>`, or a slice trail's record). */
  at: string;
  floor: Map<string, number>;
}

/** A device entry of a devices.outcome record, as the trail holds it. */
interface DeviceEntry {
  id?: unknown;
  state?: unknown;
  receipt?: unknown;
  request?: unknown;
  phaseIndex?: unknown;
}

const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);

/** The trail states that say a device reached the revision, and the receipt results that back each. */
const STATE_NEEDS: Record<string, readonly ReceiptResult[]> = {
  applied: ['applied', 'already-applied'],
  claimed: ['applied', 'already-applied', 'claimed'],
  'rolled-back': ['applied', 'already-applied', 'claimed'],
};
/** Results that say the revision is in place (the floor's business). */
const IN_PLACE: readonly ReceiptResult[] = ['applied', 'already-applied', 'claimed'];

/** Verify a bundle; findings in trail order (the trail's and the checkpoints' first, a slice's at its link). */
export function verifyReceiptsBundle(bundle: ReceiptsBundle, opts: ReceiptsVerifyOptions = {}): ReceiptsVerdict {
  const verify = opts.verifySignature ?? ed25519Verify;
  const findings: ReceiptFinding[] = [];
  const trail = verifyAuditSegments(bundle.segments);
  findings.push(...trailFindings(trail));
  const records = bundle.segments.flatMap((s) => parseAuditLog(s.text).records);
  const checkpoints = checkCheckpoints(bundle, records, opts);
  findings.push(...checkpoints.findings);
  const ctx: ReceiptContext = {
    bundle,
    verify,
    keys: enrolledKeys(bundle.enrolment, findings),
    revisions: revisionIndex(bundle, verify),
    chains: new Map(),
    nonces: new Map(),
    keyAt: new Map(),
    from: fromRevision(records),
    findings,
    slices: new Map((bundle.slices ?? []).map((s) => [s.trail, s.segments])),
    linkedBy: new Map(),
    tally: { receipts: 0, proven: 0, claimed: 0, devices: new Set() },
    sliceTally: { trails: 0, anchored: 0, records: 0, receipts: 0 },
  };
  const place: TrailPlace = {
    id: bundle.rollout,
    at: (seq) => `record ${seq}`,
    included: checkpoints.included,
    unanchored: false,
    depth: 0,
  };
  checkRecords(ctx, records, place);
  const { tally } = ctx;
  return {
    findings,
    records: records.length,
    receipts: tally.receipts,
    proven: tally.proven,
    claimed: tally.claimed,
    devices: tally.devices.size,
    checkpoints: bundle.checkpoints.length,
    inclusion: checkpoints.inclusion,
    slices: ctx.sliceTally,
    keys: checkpoints.keys,
  };
}

/** Where a trail's records stand: the rollout's own trail, or a slice trail reached through its link. */
interface TrailPlace {
  /** The trail's id: the rollout's, or the slice's workflow id. */
  id: string;
  /** How a finding names one of its records. */
  at: (seq: number) => string;
  /** Why a record is not included under the last checkpoint (null: it is; undefined here: no checkpoint). */
  included: ((record: AuditRecord) => string | null) | undefined;
  /** A slice trail whose chain does not hold up to its link's head: its receipts are claimed, not proven. */
  unanchored: boolean;
  depth: number;
}

/** Every receipt of the trail's devices.outcome records, and each slice trail its links name, in trail order. */
function checkRecords(ctx: ReceiptContext, records: AuditRecord[], place: TrailPlace): void {
  const { tally } = ctx;
  for (const record of records) {
    const link = linkOf(record);
    if (link) {
      followLink(ctx, record, link, place);
      continue;
    }
    if (record.event !== 'devices.outcome' || !isObject(record.evidence)) continue;
    const { devices: entries, mode } = record.evidence;
    if (!Array.isArray(entries)) continue;
    for (const entry of entries as DeviceEntry[]) {
      if (!isObject(entry)) continue;
      if (typeof entry.id === 'string') tally.devices.add(entry.id);
      if (entry.receipt === undefined) {
        tally.claimed++;
        continue;
      }
      tally.receipts++;
      if (place.depth > 0) ctx.sliceTally.receipts++;
      const own = checkReceipt(ctx, place, record, entry, typeof mode === 'string' ? mode : null);
      ctx.findings.push(...own);
      if (own.length === 0 && !place.unanchored) tally.proven++;
      else tally.claimed++;
    }
  }
}

/**
 * A slice trail a record links: a slice of this rollout, linked once, in the bundle, its own chain intact and its
 * last record the head the link names (the parent's record, under the checkpoints, anchors it: a slice record
 * changed after the link breaks the chain or moves the head). Its receipts are then checked where the link stands.
 */
function followLink(
  ctx: ReceiptContext,
  record: AuditRecord,
  link: TrailLink | { trail: string; bad: string },
  holder: TrailPlace,
): void {
  const linking = holder.depth === 0 ? `record ${record.seq} of ${holder.id}` : holder.at(record.seq);
  const where = `${linking} links slice trail ${link.trail}`;
  const refuse = (message: string) => ctx.findings.push({ check: 'trail', message: `${where}${message}` });
  ctx.sliceTally.trails++;
  if ('bad' in link) return void refuse(`, but ${link.bad}`);
  const earlier = ctx.linkedBy.get(link.trail);
  if (earlier) return void refuse(`, which ${earlier} links already: each slice's trail is linked once`);
  ctx.linkedBy.set(link.trail, linking);
  if (holder.depth + 1 > MAX_LINK_DEPTH)
    return void refuse(`, nested ${holder.depth + 1} links deep: links are followed ${MAX_LINK_DEPTH} deep`);
  if (!link.trail.startsWith(`${ctx.bundle.rollout}/`))
    return void refuse(`: not a slice of rollout ${ctx.bundle.rollout} (its id must start ${ctx.bundle.rollout}/)`);
  const segments = ctx.slices.get(link.trail);
  if (link.head === null) {
    const count = segments ? segments.reduce((n, s) => n + parseAuditLog(s.text).records.length, 0) : 0;
    if (count > 0) refuse(` with no head (the slice wrote no record), but the bundle holds ${count} record(s) of it`);
    else ctx.sliceTally.anchored++;
    return;
  }
  const { head } = link;
  const pinned = `record ${head.seq}, hash ${head.hash.slice(0, 12)}…`;
  if (!segments)
    return void refuse(
      `, which the bundle does not hold (the link pins its end at ${pinned}): its receipts cannot be checked`,
    );
  const v = verifyAuditSegments(segments, { head });
  const records = segments.flatMap((s) => parseAuditLog(s.text).records);
  let problem: string | null = null;
  if (!v.ok) problem = `: ${v.failure!.problem} at seq ${v.failure!.seq}: ${v.failure!.message}`;
  else if (!v.head || v.head.seq !== head.seq || v.head.hash !== head.hash)
    problem = `, whose last record is ${v.head ? `record ${v.head.seq} (hash ${v.head.hash.slice(0, 12)}…)` : 'none'}, not the end its link pins (${pinned}): the slice trail was changed after the link`;
  else {
    const stranger = records.find((r) => r.rolloutId !== link.trail);
    if (stranger) problem = `: its record ${stranger.seq} is of trail ${String(stranger.rolloutId)}`;
  }
  if (problem) refuse(problem);
  else {
    ctx.sliceTally.anchored++;
    ctx.sliceTally.records += records.length;
  }
  const parentIncluded = holder.included;
  const through = `through ${holder.at(record.seq)} (its link)`;
  checkRecords(ctx, records, {
    id: link.trail,
    at: (seq) => `slice trail ${link.trail} record ${seq}`,
    // The slice's records are anchored by the chain up to the head; the link record itself by the checkpoints.
    included:
      parentIncluded &&
      (() => {
        const why = parentIncluded(record);
        return why === null ? null : `${through}: ${why}`;
      }),
    unanchored: problem !== null || holder.unanchored,
    depth: holder.depth + 1,
  });
}

function trailFindings(trail: TrailVerdict): ReceiptFinding[] {
  if (trail.ok) return [];
  const f = trail.failure!;
  return [{ check: 'trail', message: `${f.problem} at seq ${f.seq} (${f.segment}): ${f.message}` }];
}

/** The fromRevision a rollback-mode record may go back to: the rollout.started record's `from`. */
function fromRevision(records: AuditRecord[]): number | undefined {
  const started = records.find((r) => r.event === 'rollout.started');
  const from = isObject(started?.evidence) ? started.evidence.from : undefined;
  return typeof from === 'number' ? from : undefined;
}

/** The 32-byte key an enrolment names, or undefined for a key text of the wrong kind or shape. */
export function enrolledPublicKey(kind: ReceiptKeyKind, key: string): Uint8Array | undefined {
  if (kind === 'ssh') return sshEd25519Key(key);
  const m = /^ed25519:([A-Za-z0-9+/]{43}=)$/.exec(key);
  const raw = m ? fromBase64(m[1]!) : undefined;
  return raw?.length === 32 ? raw : undefined;
}

function enrolledKeys(enrolment: EnrolledDevice[], findings: ReceiptFinding[]): Map<string, EnrolledKey> {
  const keys = new Map<string, EnrolledKey>();
  for (const device of enrolment) {
    const publicKey = enrolledPublicKey(device.kind, device.key);
    if (!publicKey) {
      findings.push({
        device: device.id,
        check: 'enrolment',
        message: `enrolled key ${JSON.stringify(device.key.slice(0, 80))} is not ${device.kind === 'agent' ? 'ed25519:<base64 of 32 bytes>' : 'an ssh-ed25519 public key line'}`,
      });
      continue;
    }
    const revokedAt = device.revoked ? Date.parse(device.revoked.at) : undefined;
    const keyId = receiptKeyId(device.kind, publicKey);
    keys.set(device.id, {
      device,
      publicKey,
      keyId,
      ...(revokedAt === undefined ? {} : { revokedAt: Number.isNaN(revokedAt) ? 0 : revokedAt }),
      ...keyHistory(device, { publicKey, keyId, index: 0 }, findings),
    });
  }
  return keys;
}

/**
 * The keys of an agent's history linked to its enrolled key (the anchor: the inventory's pin when exported): from
 * the enrolled key back through each step whose proof verifies (the newer key, signing `new-accepts`, names the
 * older one) and forward likewise (the older key, signing `old-hands-over`, names the newer one). A step whose proof
 * does not verify, or whose old key is not the step before's new key, cuts the history there: the keys beyond it
 * are not the device's, and the step is a finding.
 */
function keyHistory(
  device: EnrolledDevice,
  enrolled: LinkedKey,
  findings: ReceiptFinding[],
): Pick<EnrolledKey, 'linked' | 'unlinked'> {
  const steps = device.history ?? [];
  const unlinked = new Map<string, string>();
  if (steps.length === 0) return { linked: [enrolled], unlinked };
  const refuse = (message: string) => findings.push({ device: device.id, check: 'enrolment', message });
  if (device.kind !== 'agent') {
    refuse('a key history is an agent identity key rotation: an ssh receipt key has none');
    return { linked: [enrolled], unlinked };
  }
  // pins[i] is the key before step i, pins[i + 1] the one after; good[i]: step i links them.
  const pins = [steps[0]!.proof.old, ...steps.map((s) => s.proof.new)];
  const why = steps.map((step, i): string | null => {
    if (i > 0 && step.proof.old !== steps[i - 1]!.proof.new)
      return `its old key is not the new key of rotation ${steps[i - 1]!.rotation}, the step before`;
    if (step.proof.id !== step.rotation) return `its proof is rotation ${step.proof.id}'s`;
    return proofProblem(step.proof, { id: step.rotation, device: device.id, pinned: step.proof.old });
  });
  for (const [i, problem] of why.entries())
    if (problem) refuse(`key history: rotation ${steps[i]!.rotation}: ${problem}`);
  const anchor = pins.indexOf(device.key);
  if (anchor < 0) {
    refuse(`key history: the enrolled key ${device.key.slice(0, 20)}… is none of the keys its rotations name`);
    return { linked: [enrolled], unlinked };
  }
  let lo = anchor;
  while (lo > 0 && why[lo - 1] === null) lo--;
  let hi = anchor;
  while (hi < steps.length && why[hi] === null) hi++;
  const linked: LinkedKey[] = [];
  for (const [i, pin] of pins.entries()) {
    const publicKey = enrolledPublicKey('agent', pin);
    if (!publicKey) continue;
    const keyId = receiptKeyId('agent', publicKey);
    if (i < lo || i > hi) {
      const cut = i < lo ? lo - 1 : hi;
      unlinked.set(keyId, `rotation ${steps[cut]!.rotation}'s proof does not link it: ${why[cut]}`);
      continue;
    }
    const next = steps[i];
    const retiredAt = next?.retiredAt === undefined ? undefined : Date.parse(next.retiredAt);
    linked.push({
      publicKey,
      keyId,
      index: i,
      ...(next && i < hi
        ? { handedOver: { rotation: next.rotation, ...(retiredAt === undefined ? {} : { retiredAt }) } }
        : {}),
    });
  }
  return { linked, unlinked };
}

interface ReceiptContext {
  bundle: ReceiptsBundle;
  verify: Ed25519Check;
  keys: Map<string, EnrolledKey>;
  revisions: RevisionIndex;
  chains: Map<string, DeviceChain>;
  /** Nonce → where it was first seen (`record <seq>`, or a slice trail's record). */
  nonces: Map<string, string>;
  /** Per device: the history index of the newest key its receipts were signed with so far, and where. */
  keyAt: Map<string, { index: number; at: string }>;
  from: number | undefined;
  findings: ReceiptFinding[];
  /** The bundle's slice trails by id (null: exported as missing), and each linked so far, by which record. */
  slices: Map<string, AuditSegment[] | null>;
  linkedBy: Map<string, string>;
  tally: { receipts: number; proven: number; claimed: number; devices: Set<string> };
  sliceTally: ReceiptsVerdict['slices'];
}

/**
 * Every check of one receipt against its record, its entry, its device's enrolment and chain. A slice's receipt was
 * asked for by the slice's workflow (the apply activity runs there): its `rollout` and nonce are the slice trail's
 * records' rolloutId (the slice's workflow id) and runId, as the parent's are the rollout's.
 */
function checkReceipt(
  ctx: ReceiptContext,
  place: TrailPlace,
  record: AuditRecord,
  entry: DeviceEntry,
  mode: string | null,
) {
  const id = typeof entry.id === 'string' ? entry.id : '?';
  const out: ReceiptFinding[] = [];
  const find = (check: ReceiptCheck, message: string) => out.push({ device: id, check, message });
  const at = place.at(record.seq);
  const parsed = parseReceipt(entry.receipt);
  if (!parsed.ok) {
    find('receipt', `${at}: ${parsed.problem}`);
    return out;
  }
  const r = parsed.receipt;
  const f = r.fields;
  const signed = checkSigner(ctx, r, id, record, at, find);
  if (f.device !== id) find('device', `${at}: the receipt is device ${f.device}'s, the entry is ${id}'s`);
  if (f.rollout !== record.rolloutId)
    find('rollout', `${at}: the receipt is for rollout ${f.rollout}, this trail is ${record.rolloutId}'s`);
  checkNonce(ctx, record, entry, r, at, find);
  if (typeof entry.phaseIndex === 'number' && f.phase !== entry.phaseIndex)
    find('phase', `${at}: the receipt says phase ${f.phase ?? '-'}, the entry phase ${entry.phaseIndex}`);
  checkRevision(ctx, r, at, find);
  if (signed) checkChain(ctx, r, mode, at, find);
  const needs = typeof entry.state === 'string' ? STATE_NEEDS[entry.state] : undefined;
  if (needs && !needs.includes(f.result))
    find('state', `${at}: the trail says ${String(entry.state)}, the device's receipt says ${f.result}`);
  const excluded = place.included?.(record);
  if (excluded) find('inclusion', `${at}: ${excluded}`);
  return out;
}

type Find = (check: ReceiptCheck, message: string) => void;

/** Enrolled, of the key's kind, the device's own key, signed by it, not revoked then. Whether it signed. */
function checkSigner(
  ctx: ReceiptContext,
  r: Receipt,
  id: string,
  record: AuditRecord,
  at: string,
  find: Find,
): boolean {
  const f = r.fields;
  const enrolled = ctx.keys.get(id);
  if (!enrolled) {
    find('enrolment', `${at}: device ${id} has no enrolled key in the bundle`);
    return false;
  }
  const key = f.keyKind === enrolled.device.kind ? enrolled.linked.find((k) => k.keyId === f.keyId) : undefined;
  if (!key) {
    const owner = [...ctx.keys.values()].find((k) => k.keyId === f.keyId && k.device.kind === f.keyKind);
    const cut = f.keyKind === enrolled.device.kind ? enrolled.unlinked.get(f.keyId) : undefined;
    find(
      'key',
      cut
        ? `${at}: signed by ${f.keyKind} key ${f.keyId}, which the device's key history names but does not prove: ${cut}`
        : `${at}: signed by ${f.keyKind} key ${f.keyId}${owner ? ` (device ${owner.device.id}'s)` : ''}, not the device's enrolled ${enrolled.device.kind} key ${enrolled.keyId}${enrolled.linked.length > 1 ? ' nor one its rotations link to it' : ''}`,
    );
    return false;
  }
  if (!receiptSignatureValid(r, key.publicKey, ctx.verify)) {
    find('signature', `${at}: the signature does not verify under the device's enrolled key ${key.keyId}`);
    return false;
  }
  checkKeyOrder(ctx, key, id, record, r, at, find);
  // The device's clock is its own word (a stolen key writes any clock): the record that carries it counts too.
  const revoked = enrolled.revokedAt;
  if (revoked !== undefined && (f.clock >= revoked || Date.parse(record.at) >= revoked)) {
    const { at: when, reason } = enrolled.device.revoked!;
    find(
      'revoked',
      `${at}: the device's key was revoked at ${when} (${reason}); the receipt's clock is ${new Date(f.clock).toISOString()}, the record's ${record.at}`,
    );
  }
  return true;
}

/**
 * A key of a rotated identity: used in the history's order (once a receipt is signed by a newer key, none by an
 * older one follows: the agent hands over and never goes back), and a key handed over from not after the retire
 * was recorded for the device (by the receipt's clock or the record's, as for a revocation).
 */
function checkKeyOrder(
  ctx: ReceiptContext,
  key: LinkedKey,
  id: string,
  record: AuditRecord,
  r: Receipt,
  at: string,
  find: Find,
) {
  const last = ctx.keyAt.get(id);
  if (last && key.index < last.index)
    find(
      'rotation',
      `${at}: signed by key ${key.keyId}, which rotation ${key.handedOver?.rotation ?? '?'} handed over from, after ${last.at} was signed by its newer key: a device never goes back to an old key`,
    );
  else ctx.keyAt.set(id, { index: key.index, at });
  const retired = key.handedOver?.retiredAt;
  if (retired !== undefined && (r.fields.clock >= retired || Date.parse(record.at) >= retired))
    find(
      'rotation',
      `${at}: signed by key ${key.keyId}, retired by rotation ${key.handedOver!.rotation} at ${new Date(retired).toISOString()}; the receipt's clock is ${new Date(r.fields.clock).toISOString()}, the record's ${record.at}`,
    );
}

/** The nonce is the one the request made, and no other receipt in the bundle carries it. */
function checkNonce(ctx: ReceiptContext, record: AuditRecord, entry: DeviceEntry, r: Receipt, at: string, find: Find) {
  const f = r.fields;
  const seen = ctx.nonces.get(f.nonce);
  if (seen !== undefined) find('nonce', `${at}: nonce ${f.nonce} replayed: ${seen} holds a receipt with it`);
  else ctx.nonces.set(f.nonce, at);
  if (typeof entry.request !== 'string') {
    find('nonce', `${at}: the entry names no request: the nonce cannot be recomputed`);
    return;
  }
  const expected = receiptNonce({
    rollout: record.rolloutId,
    run: record.runId,
    activity: entry.request,
    device: typeof entry.id === 'string' ? entry.id : '',
  });
  if (f.nonce !== expected)
    find(
      'nonce',
      `${at}: nonce ${f.nonce} is not request ${entry.request}'s of run ${record.runId} (${expected}): the receipt answers another request`,
    );
}

/** A revision the bundle holds, its envelope verified against its profile's pins once, expiry judged per receipt. */
interface RevisionInfo {
  digest: string;
  /** Why it is not a signed revision of this bundle, whatever the clock (no envelope, no pins, bad signature). */
  problem?: string;
  /** The verdict at a receipt's clock. */
  at(clock: number): string | null;
}

interface RevisionIndex {
  get(profile: string, revision: number): RevisionInfo;
  /** The revision of `profile` whose envelope digest this is, valid at `clock`; undefined when none. */
  byDigest(profile: string, digest: string, clock: number): number | undefined;
}

/** Reasons verifyEnvelope gives that depend on the clock it is asked at. */
const TIME_REASONS = new Set(['EXPIRED', 'NOT_YET_VALID', 'VALIDITY_TOO_LONG']);

function revisionIndex(bundle: ReceiptsBundle, verify: Ed25519Check): RevisionIndex {
  const infos = new Map<string, RevisionInfo>();
  const digests = new Map<string, Map<string, number>>();
  // Every device's receipt names the same few envelopes: each signature is checked once.
  const memo = new Map<string, boolean>();
  const verifySignature = (sig: Uint8Array, body: Uint8Array, key: Uint8Array) => {
    const k = `${toBase64(sig)}|${toBase64(key)}|${toBase64(body)}`;
    const known = memo.get(k);
    if (known !== undefined) return known;
    const ok = verify(sig, body, key);
    memo.set(k, ok);
    return ok;
  };
  for (const { profile, revision, envelope } of bundle.revisions) {
    const name = `${profile} r${revision}`;
    const trust = bundle.trust[profile];
    const digest = safeDigest(envelope);
    const verdictAt = (now: number): VerifyResult | { ok: false; message: string; reason: string } =>
      trust ? verifyEnvelope(envelope, trust, { now, verifySignature }) : { ok: false, reason: '', message: '' };
    let problem: string | undefined;
    if (!trust) problem = `${name}: the bundle holds no pins for profile ${profile} (trust/${profile}.yaml)`;
    else if (digest === undefined) problem = `${name}: the envelope is not JSON an envelope can be`;
    // Verified once (signatures, pins, content), at the first clock it is asked at; then only the validity window
    // moves with each receipt's clock. A verdict that depends on the clock is asked again at the next one.
    let signed: { issued?: number; expires: number } | undefined;
    const at = (clock: number): string | null => {
      if (problem) return problem;
      if (!signed) {
        const v = verdictAt(clock);
        if (!v.ok) {
          const refused = `${name}: envelope refused at the receipt's clock ${new Date(clock).toISOString()} (${v.reason}): ${v.message}`;
          if (!TIME_REASONS.has(v.reason)) problem = refused;
          return refused;
        }
        if (v.revision.profile !== profile || v.revision.revision !== revision) {
          problem = `${name}: the envelope holds ${v.revision.profile} r${v.revision.revision}`;
          return problem;
        }
        const { issuedAt, expiresAt } = v.revision;
        signed = { expires: Date.parse(expiresAt!), ...(issuedAt ? { issued: Date.parse(issuedAt) } : {}) };
      }
      const when = new Date(clock).toISOString();
      if (!(signed.expires > clock)) return `${name}: expired before the receipt's clock ${when} (EXPIRED)`;
      if (signed.issued !== undefined && signed.issued > clock + MAX_CLOCK_SKEW_MS)
        return `${name}: issued after the receipt's clock ${when} (NOT_YET_VALID)`;
      return null;
    };
    infos.set(`${profile}\n${revision}`, { digest: digest ?? '', ...(problem ? { problem } : {}), at });
    if (digest) {
      if (!digests.has(profile)) digests.set(profile, new Map());
      digests.get(profile)!.set(digest, revision);
    }
  }
  const missing = (profile: string, revision: number): RevisionInfo => {
    const problem = `${profile} r${revision}: the bundle holds no signed envelope of it (revisions/${profile}/${revision}.json)`;
    return { digest: '', problem, at: () => problem };
  };
  return {
    get: (profile, revision) => infos.get(`${profile}\n${revision}`) ?? missing(profile, revision),
    byDigest(profile, digest, clock) {
      const revision = digests.get(profile)?.get(digest);
      if (revision === undefined) return undefined;
      return infos.get(`${profile}\n${revision}`)!.at(clock) === null ? revision : undefined;
    },
  };
}

function safeDigest(envelope: unknown): string | undefined {
  try {
    return envelopeDigestOf(envelope as Envelope);
  } catch {
    return undefined;
  }
}

/**
 * The requested revision is a signed one (valid at the receipt's clock) and the digest the receipt names is its
 * envelope's; the observed digest is a signed revision's, and the requested one's when the receipt says applied.
 */
function checkRevision(ctx: ReceiptContext, r: Receipt, at: string, find: Find) {
  const f = r.fields;
  const info = ctx.revisions.get(f.profile, f.revision);
  const problem = info.at(f.clock);
  if (problem) find('revision', `${at}: ${problem}`);
  else if (f.requested !== info.digest)
    find(
      'revision',
      `${at}: requested digest ${f.requested.slice(0, 12)}… is not ${f.profile} r${f.revision}'s envelope digest ${info.digest.slice(0, 12)}…`,
    );
  if (f.result === 'applied' || f.result === 'already-applied') {
    if (f.observed !== f.requested)
      find(
        'observed',
        `${at}: the receipt says ${f.result} but observed ${f.observed ? `${f.observed.slice(0, 12)}…` : 'nothing'}, not the requested ${f.requested.slice(0, 12)}…`,
      );
  } else if (f.observed !== null && ctx.revisions.byDigest(f.profile, f.observed, f.clock) === undefined)
    find(
      'observed',
      `${at}: observed digest ${f.observed.slice(0, 12)}… is no signed revision of ${f.profile} in the bundle`,
    );
}

/**
 * The device's receipts in trail order: counters one apart (a gap is a receipt dropped; the same counter twice or a
 * smaller one, a reused counter or a reordered chain), each naming the one before as `prev`; a revision in place at
 * or above the floor its earlier receipts confirmed in apply-mode records (a rollback-mode record may go back to the
 * rollout's fromRevision).
 */
function checkChain(ctx: ReceiptContext, r: Receipt, mode: string | null, at: string, find: Find) {
  const f = r.fields;
  const chain = ctx.chains.get(f.device);
  const hash = receiptHash(r);
  if (!chain) {
    if (f.counter === 1 && f.prev !== RECEIPT_GENESIS)
      find('chain', `${at}: counter 1 is the device's first receipt, but prev names ${f.prev.slice(0, 12)}…`);
    ctx.chains.set(f.device, { counter: f.counter, hash, at, floor: new Map() });
  } else {
    const last = `counter ${chain.counter} (${chain.at})`;
    if (f.counter === chain.counter) find('counter', `${at}: counter ${f.counter} reused: ${last} has it too`);
    else if (f.counter < chain.counter)
      find('counter', `${at}: counter ${f.counter} after ${last}: the chain is out of order`);
    else if (f.counter > chain.counter + 1)
      find(
        'counter',
        `${at}: counter ${f.counter} after ${last}: ${f.counter - chain.counter - 1} receipt(s) missing (dropped)`,
      );
    else if (f.prev !== chain.hash)
      find('chain', `${at}: prev ${f.prev.slice(0, 12)}… is not the hash of the device's receipt of ${last}`);
    if (f.counter > chain.counter) Object.assign(chain, { counter: f.counter, hash, at });
  }
  const floors = ctx.chains.get(f.device)!.floor;
  const floor = floors.get(f.profile);
  if (IN_PLACE.includes(f.result) && floor !== undefined && f.revision < floor) {
    const back = mode === 'rollback' && ctx.from !== undefined && f.revision >= ctx.from;
    if (!back)
      find(
        'floor',
        `${at}: ${f.result} ${f.profile} r${f.revision}, below the floor r${floor} the device's earlier receipts confirmed`,
      );
  }
  if (mode === 'apply' && (f.result === 'applied' || f.result === 'already-applied'))
    floors.set(f.profile, Math.max(floor ?? 0, f.revision));
}

// ---- checkpoints: the log's signed tree heads over the trail, cosigned by the witness ----

/** Inclusion proofs of many leaves of one tree, every subtree hashed once (core/merkle.ts memoizedRangeRoot). */
function inclusionPaths(leaves: readonly Uint8Array[]) {
  const range = memoizedRangeRoot(leaves);
  return (index: number, size: number): Uint8Array[] => inclusionProofOf(range, index, size);
}

interface CheckpointResult {
  findings: ReceiptFinding[];
  included: TrailPlace['included'];
  inclusion: ReceiptsVerdict['inclusion'];
  keys: ReceiptsVerdict['keys'];
}

/** A checkpoint the log signed and the witness cosigned, over a tree of the trail's own records. */
interface GoodCheckpoint {
  n: number;
  size: number;
  root: Uint8Array;
}

/** keys/<kind>.pub as core/trail-checkpoints.ts parsePinnedKey reads a pinned key, or why not. */
function bundleKey(text: string | undefined, kind: SignerKind): PinnedKey | string {
  const file = `keys/${kind}.pub`;
  if (text === undefined) return `${file}: the bundle holds no ${kind} key`;
  try {
    return (
      parsePinnedKey(text, file, kind) ??
      `${file}: not a pinned key ([<name>=]ed25519:<base64>, or a C2SP verifier key)`
    );
  } catch (err) {
    if (err instanceof WavegateError) return err.message;
    throw err;
  }
}

/**
 * The checks `audit --verify` makes of the checkpoints kept beside a trail (core/trail-checkpoints.ts
 * checkTrailCheckpoints: this rollout's, signed by the log's key and cosigned by the witness's, the root of the
 * trail's first `size` records, none cut off, each consistent with the one before), with both keys required; any
 * two of one size with different roots are a fork; every record holding receipts is included under the last good one.
 */
function checkCheckpoints(
  bundle: ReceiptsBundle,
  records: AuditRecord[],
  opts: ReceiptsVerifyOptions,
): CheckpointResult {
  const findings: ReceiptFinding[] = [];
  const find = (check: ReceiptCheck, message: string) => findings.push({ check, message });
  const log = trustedKey(bundleKey(bundle.logKey, 'log'), opts.pinned?.log, 'log', find);
  const witness = trustedKey(bundleKey(bundle.witnessKey, 'witness'), opts.pinned?.witness, 'witness', find);
  const keys = { log: log.trusted, witness: witness.trusted };
  if (bundle.checkpoints.length === 0) {
    // Fail closed: a bundle whose checkpoints were stripped would otherwise verify a rewritten trail.
    if (opts.checkpointsExpected !== false)
      find(
        'checkpoint',
        'the bundle holds no checkpoint: the trail is not proved to be the one the log signed (a trail rewritten wholesale cannot be ruled out); if the rollout ran without checkpoints, say so with --no-checkpoints-expected',
      );
    return { findings, included: undefined, inclusion: null, keys };
  }
  for (const key of [log.key, witness.key]) if (typeof key === 'string') find('checkpoint', key);
  const tree = TrailTree.of(records);
  const verdict = checkTrailCheckpoints(bundle.rollout, bundle.checkpoints, tree, {
    ...(typeof log.key === 'string' ? {} : { log: log.key }),
    ...(typeof witness.key === 'string' ? {} : { witness: witness.key }),
  });
  const keysGiven = typeof log.key !== 'string' && typeof witness.key !== 'string';
  const seen: GoodCheckpoint[] = [];
  const good: GoodCheckpoint[] = [];
  for (const report of verdict.checkpoints) {
    for (const problem of report.problems)
      find('checkpoint', `checkpoint ${report.n} (size ${report.size ?? '?'}): ${problem}`);
    const parsed = parseCheckpoint(bundle.checkpoints[report.n - 1]);
    if (!parsed.ok) continue;
    const { size, root } = parsed.note.checkpoint;
    for (const other of seen)
      if (other.size === size && !bytesEqual(other.root, root))
        find(
          'fork',
          `checkpoint ${report.n}: size ${size} with another root than checkpoint ${other.n}: the trail was forked`,
        );
    seen.push({ n: report.n, size, root });
    if (keysGiven && report.problems.length === 0) good.push({ n: report.n, size, root });
  }
  return { findings, ...inclusionUnder(good.at(-1), records), keys };
}

/**
 * The key the checkpoints are checked under: the auditor's pinned one (the bundle's must be it: a finding naming
 * both key ids otherwise), else the bundle's; with why there is none when neither holds one.
 */
function trustedKey(
  inBundle: PinnedKey | string,
  pinned: PinnedKey | undefined,
  kind: SignerKind,
  find: (check: ReceiptCheck, message: string) => void,
): { key: PinnedKey | string; trusted: TrustedKey | null } {
  if (pinned) {
    const flag = `--${kind}-key`;
    if (typeof inBundle === 'string') find('pinned-key', `${flag} ${keyId(pinned.publicKey)}: ${inBundle}`);
    else if (!bytesEqual(inBundle.publicKey, pinned.publicKey))
      find(
        'pinned-key',
        `keys/${kind}.pub: the ${kind}'s key ${keyId(inBundle.publicKey)} is not the pinned ${flag} ${keyId(pinned.publicKey)}`,
      );
    return { key: pinned, trusted: { keyId: keyId(pinned.publicKey), from: 'pinned' } };
  }
  if (typeof inBundle === 'string') return { key: inBundle, trusted: null };
  return { key: inBundle, trusted: { keyId: keyId(inBundle.publicKey), from: 'bundle' } };
}

/** Each record's inclusion under the last good checkpoint, proved and checked once per record. */
function inclusionUnder(
  last: GoodCheckpoint | undefined,
  records: AuditRecord[],
): Omit<CheckpointResult, 'findings' | 'keys'> {
  if (!last)
    return {
      included: () => 'no checkpoint signed by the log and cosigned by the witness holds its record',
      inclusion: null,
    };
  const index = new Map(records.map((r, i) => [r, i]));
  const leaves = records.map(recordLeafHash);
  const path = inclusionPaths(leaves);
  const answers = new Map<number, string | null>();
  const inclusion = { proofs: 0, largestBytes: 0, size: last.size };
  const included = (record: AuditRecord): string | null => {
    const i = index.get(record)!;
    let answer = answers.get(i);
    if (answer !== undefined) return answer;
    if (i >= last.size) answer = `not under the last checkpoint (checkpoint ${last.n}, size ${last.size})`;
    else {
      const proof = path(i, last.size);
      // What a third party is handed for one receipt: the proof, its index and the tree size.
      inclusion.largestBytes = Math.max(inclusion.largestBytes, proof.length * HASH_BYTES + 16);
      inclusion.proofs++;
      const check = verifyInclusion({ index: i, size: last.size, leafHash: leaves[i]!, proof, root: last.root });
      answer = check.ok ? null : `inclusion under checkpoint ${last.n}: ${check.message}`;
    }
    answers.set(i, answer);
    return answer;
  };
  return { included, inclusion };
}
