import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { parseAuditLog, type AuditSegment } from '../core/audit';
import { WavegateError } from '../core/errors';
import { checkProfileName } from '../core/profile-name';
import { linkOf } from '../core/trail-link';
import {
  enrolledPublicKey,
  RECEIPTS_BUNDLE_FORMAT,
  type BundleRevision,
  type BundleSliceTrail,
  type EnrolledDevice,
  type KeyRotationStep,
  type ReceiptsBundle,
} from '../core/receipt-verify';
import { parseProof } from '../core/agent-rotation';
import { parseReceipt, receiptKeyId, type ReceiptKeyKind } from '../core/receipt';
import { parseTrust, type Trust } from '../core/signing';
import { envelopeDigestOf } from '../core/twin';
import { checkedDocument, MAX_DOCUMENT_BYTES, parseDocumentText, readBytes, readDocument } from '../intake/files';
import { readRotationState } from '../intake/rotation-state';
import { readProofs } from '../intake/rotation-proofs';
import { readPinnedKey } from '../intake/checkpoint-keys';
import { loadInventory } from '../intake/inventory';
import { pinnedKeyText } from '../core/trail-checkpoints';
import { profileDir, revisionNumbers } from '../intake/profile-dir';
import { auditFileStem } from './file-names';
import { openAuditStore, readAuditTrail, withAuditReader } from './index';

/**
 * A receipts bundle (docs/formats.md, "Receipts bundle"): one rollout's trail with everything an auditor needs to
 * check its receipts offline, as a directory of plain files. `exportReceiptsBundle` writes it from the audit store,
 * the inventory and the profiles root (`wavegate audit export --bundle`); `readReceiptsBundle` reads one back for
 * core/receipt-verify.ts (`wavegate audit verify --receipts`), every file bounded and refused naming it.
 *
 *   bundle.json           { format, rollout, run, exportedAt, segments: [{ name, records }], counts }
 *   trail.jsonl           every record of the trail as the store holds it, segment after segment
 *   enrolment.json        { devices: [{ id, kind: agent|ssh, key, revoked?: { at, reason }, history?: [...] }] }
 *   revisions/<p>/<n>.json  the signed envelopes the trail names; trust/<p>.yaml their pins
 *   checkpoints.jsonl     one JSON string a line: a checkpoint note (C2SP signed note)
 *   keys/log.pub, keys/witness.pub   the log's and the witness's public keys ([<name>=]ed25519:<base64>)
 *   slices/<stem>.jsonl   each slice trail the trail links (its store file's name), segment after segment
 */

/** Bounds of what a bundle's files may hold: a trail of 100,000 receipts is about 80 MB (`trail`: with its slices'). */
const LIMITS = {
  manifest: 1024 * 1024,
  trail: 512 * 1024 * 1024,
  enrolment: 128 * 1024 * 1024,
  checkpoints: 64 * 1024 * 1024,
  key: 4096,
  revisions: 10_000,
};

export interface BundleManifest {
  format: typeof RECEIPTS_BUNDLE_FORMAT;
  rollout: string;
  /** The run that wrote the trail (its first record's runId). */
  run: string | null;
  exportedAt: string;
  segments: { name: string; records: number }[];
  /** The slice trails the trail links (absent: none), each in its file, or missing from the store it was read from. */
  slices?: BundleManifestSlice[];
  counts: {
    records: number;
    receipts: number;
    devices: number;
    revisions: number;
    checkpoints: number;
    /** Slice trails exported, and their records (receipts and devices above count theirs too). */
    slices?: number;
    sliceRecords?: number;
  };
}

/** A slice trail in bundle.json: its file (`slices/<the store's file stem>.jsonl`) and segments, or missing. */
export type BundleManifestSlice =
  | { trail: string; file: string; segments: { name: string; records: number }[] }
  | { trail: string; missing: true };

/** A slice trail's file in a bundle: the file store's name for its id (audit/file-names.ts auditFileStem). */
const sliceFile = (trail: string) => `slices/${auditFileStem(trail)}.jsonl`;

const bad = (file: string, why: string) => new WavegateError('INVALID_INPUT', `${file}: ${why}`, { source: file });

function readFile(dir: string, name: string, max: number): string {
  return readBytes(join(dir, name), max).toString('utf8');
}

function readJson(dir: string, name: string, max: number): unknown {
  const path = join(dir, name);
  return checkedDocument(parseDocumentText(readFile(dir, name, max), path, 'json'), path);
}

/** The manifest's shape, or INVALID_INPUT naming bundle.json and the field. */
function parseManifest(data: unknown, path: string): BundleManifest {
  const m = data as Partial<BundleManifest> | null;
  if (m === null || typeof m !== 'object') throw bad(path, 'must be a JSON object');
  if (m.format !== RECEIPTS_BUNDLE_FORMAT)
    throw bad(path, `format ${JSON.stringify(m.format)}: expected "${RECEIPTS_BUNDLE_FORMAT}"`);
  if (typeof m.rollout !== 'string' || !m.rollout) throw bad(path, 'rollout: must name the rollout');
  if (
    !Array.isArray(m.segments) ||
    m.segments.length === 0 ||
    !m.segments.every(
      (s) => typeof s?.name === 'string' && Number.isSafeInteger(s.records) && (s.records as number) >= 0,
    )
  )
    throw bad(path, 'segments: must be a list of { name, records } (one per segment of trail.jsonl)');
  if (m.slices !== undefined && !Array.isArray(m.slices)) throw bad(path, 'slices: must be a list');
  for (const [i, slice] of (m.slices ?? []).entries()) {
    const field = `slices[${i}]`;
    if (typeof slice?.trail !== 'string' || !slice.trail) throw bad(path, `${field}.trail: must name the slice trail`);
    if ('missing' in slice) {
      if (slice.missing !== true) throw bad(path, `${field}.missing: must be true`);
      continue;
    }
    // The file is named by the id, never by the manifest: a bundle cannot point the reader elsewhere.
    if (slice.file !== sliceFile(slice.trail)) throw bad(path, `${field}.file: must be ${sliceFile(slice.trail)}`);
    if (!Array.isArray(slice.segments) || !slice.segments.every(isSegmentCount))
      throw bad(path, `${field}.segments: must be a list of { name, records }`);
  }
  return m as BundleManifest;
}

function isSegmentCount(s: unknown): boolean {
  const c = s as { name?: unknown; records?: unknown } | null;
  return typeof c?.name === 'string' && Number.isSafeInteger(c.records) && (c.records as number) >= 0;
}

/** trail.jsonl (or a slice's file) cut back into its segments by the manifest's counts. */
function splitTrail(text: string, counts: BundleManifest['segments'], path: string): AuditSegment[] {
  const lines = text.length === 0 ? [] : (text.endsWith('\n') ? text.slice(0, -1) : text).split('\n');
  const total = counts.reduce((n, s) => n + s.records, 0);
  if (lines.length !== total)
    throw bad(path, `${lines.length} lines, bundle.json's segments say ${total}: a line was added or cut`);
  let at = 0;
  return counts.map((s) => {
    const part = lines.slice(at, at + s.records);
    at += s.records;
    return { name: s.name, text: part.length ? `${part.join('\n')}\n` : '' };
  });
}

function parseEnrolment(data: unknown, path: string): EnrolledDevice[] {
  const devices = (data as { devices?: unknown } | null)?.devices;
  if (!Array.isArray(devices)) throw bad(path, 'devices: must be a list');
  return devices.map((d, i) => {
    const e = d as Partial<EnrolledDevice> | null;
    const field = `devices[${i}]`;
    if (typeof e?.id !== 'string' || !e.id) throw bad(path, `${field}.id: must name the device`);
    if (e.kind !== 'agent' && e.kind !== 'ssh') throw bad(path, `${field}.kind: must be agent or ssh`);
    if (typeof e.key !== 'string') throw bad(path, `${field}.key: must be the device's public key`);
    const r = e.revoked;
    if (
      r !== undefined &&
      (typeof r?.at !== 'string' || Number.isNaN(Date.parse(r.at)) || typeof r.reason !== 'string')
    )
      throw bad(path, `${field}.revoked: must be { at: <ISO instant>, reason }`);
    const history = e.history === undefined ? undefined : parseHistory(e.history, path, `${field}.history`);
    return {
      id: e.id,
      kind: e.kind,
      key: e.key,
      ...(r ? { revoked: { at: r.at, reason: r.reason } } : {}),
      ...(history ? { history } : {}),
    };
  });
}

/** A device's key history (its shape: whether each proof holds is the verifier's finding, naming the device). */
function parseHistory(data: unknown, path: string, field: string): KeyRotationStep[] {
  if (!Array.isArray(data) || data.length > MAX_HISTORY)
    throw bad(path, `${field}: must be a list of at most ${MAX_HISTORY} { rotation, provenAt, proof, retiredAt? }`);
  return data.map((d, i) => {
    const s = d as Partial<KeyRotationStep> | null;
    const at = `${field}[${i}]`;
    if (typeof s?.rotation !== 'string' || !s.rotation) throw bad(path, `${at}.rotation: must name the rotation`);
    for (const name of ['provenAt', 'retiredAt'] as const) {
      const v = s[name];
      if ((v !== undefined || name === 'provenAt') && (typeof v !== 'string' || Number.isNaN(Date.parse(v))))
        throw bad(path, `${at}.${name}: must be an ISO-8601 instant`);
    }
    const proof = parseProof(s.proof);
    if (typeof proof === 'string') throw bad(path, `${at}.${proof.replace(/^rotationProof/, 'proof')}`);
    return {
      rotation: s.rotation,
      provenAt: s.provenAt!,
      proof: { id: proof.id, old: proof.old, new: proof.new, byOld: proof.byOld, byNew: proof.byNew },
      ...(s.retiredAt ? { retiredAt: s.retiredAt } : {}),
    };
  });
}

/** Rotations a device's history may hold: one a day for decades is far less. */
const MAX_HISTORY = 1_000;

/** The signed envelopes and their pins, revisions/<profile>/<n>.json and trust/<profile>.yaml. */
function readRevisions(dir: string): { revisions: BundleRevision[]; trust: Record<string, Trust> } {
  const revisions: BundleRevision[] = [];
  const trust: Record<string, Trust> = {};
  const root = join(dir, 'revisions');
  const profiles = existsSync(root) ? readdirSync(root).sort() : [];
  for (const profile of profiles) {
    const names = readdirSync(join(root, profile)).sort();
    for (const name of names) {
      const file = join('revisions', profile, name);
      const m = /^(0|[1-9][0-9]{0,8})\.json$/.exec(name);
      if (!m) throw bad(join(dir, file), 'not a revision envelope (<n>.json)');
      if (revisions.length >= LIMITS.revisions) throw bad(root, `more than ${LIMITS.revisions} envelopes`);
      revisions.push({ profile, revision: Number(m[1]), envelope: readJson(dir, file, MAX_DOCUMENT_BYTES) });
    }
  }
  const trustDir = join(dir, 'trust');
  for (const name of existsSync(trustDir) ? readdirSync(trustDir).sort() : []) {
    const path = join(trustDir, name);
    if (!name.endsWith('.yaml')) throw bad(path, 'not a trust file (<profile>.yaml)');
    const text = readFile(trustDir, name, MAX_DOCUMENT_BYTES);
    trust[name.slice(0, -'.yaml'.length)] = parseTrust(
      checkedDocument(parseDocumentText(text, path, 'yaml'), path),
      path,
    );
  }
  return { revisions, trust };
}

/** A bundle directory, read whole and bounded; INVALID_INPUT naming the file that cannot be read. */
export function readReceiptsBundle(bundleDir: string): ReceiptsBundle & { manifest: BundleManifest } {
  const dir = resolve(bundleDir);
  const manifest = parseManifest(readJson(dir, 'bundle.json', LIMITS.manifest), join(dir, 'bundle.json'));
  const trailPath = join(dir, 'trail.jsonl');
  const trailText = readFile(dir, 'trail.jsonl', LIMITS.trail);
  const segments = splitTrail(trailText, manifest.segments, trailPath);
  // One bound for the trail and its slices together: the bundle's, not one per file.
  let budget = LIMITS.trail - Buffer.byteLength(trailText);
  const slices: BundleSliceTrail[] = (manifest.slices ?? []).map((slice) => {
    if ('missing' in slice) return { trail: slice.trail, segments: null };
    const text = readFile(dir, slice.file, Math.max(0, budget));
    budget -= Buffer.byteLength(text);
    return { trail: slice.trail, segments: splitTrail(text, slice.segments, join(dir, slice.file)) };
  });
  const enrolment = parseEnrolment(readJson(dir, 'enrolment.json', LIMITS.enrolment), join(dir, 'enrolment.json'));
  const { revisions, trust } = readRevisions(dir);
  const checkpointsPath = join(dir, 'checkpoints.jsonl');
  const checkpoints = readFile(dir, 'checkpoints.jsonl', LIMITS.checkpoints)
    .split('\n')
    .filter((line) => line.length > 0)
    .map((line, i) => {
      let note: unknown;
      try {
        note = JSON.parse(line);
      } catch {
        note = undefined;
      }
      if (typeof note !== 'string')
        throw bad(checkpointsPath, `line ${i + 1}: must be a JSON string (a checkpoint note)`);
      return note;
    });
  const key = (name: string) =>
    existsSync(join(dir, 'keys', name)) ? readFile(dir, join('keys', name), LIMITS.key).trim() : undefined;
  const logKey = key('log.pub');
  const witnessKey = key('witness.pub');
  return {
    manifest,
    rollout: manifest.rollout,
    segments,
    enrolment,
    revisions,
    trust,
    checkpoints,
    ...(logKey !== undefined ? { logKey } : {}),
    ...(witnessKey !== undefined ? { witnessKey } : {}),
    ...(slices.length > 0 ? { slices } : {}),
  };
}

export interface ExportOptions {
  rolloutId: string;
  /** The directory to create (absent or empty). */
  bundleDir: string;
  inventory: string;
  profilesRoot: string;
  /** A YAML list of { key, at, reason }: enrolments revoked, by key (its text or its id). */
  revoked?: string;
  /** Agent identity key rotations' proofs files (the gateway's `<id>.proofs.json`): each device's key history. */
  rotations?: string[];
  /** The log's and the witness's keys as the checkpoint flags take them (intake/checkpoint-keys.ts readPinnedKey). */
  logKey?: string;
  witnessKey?: string;
  store?: string;
  auditDir?: string;
  now?: Date;
}

/** A device entry's id and receipt, from the trail's devices.outcome records. */
function trailDevices(segments: AuditSegment[]) {
  const ids = new Set<string>();
  const receipts: { profile: string; revision: number; observed: string | null }[] = [];
  let from: number | undefined;
  let to: number | undefined;
  let receiptCount = 0;
  for (const segment of segments)
    for (const record of parseAuditLog(segment.text).records) {
      const evidence = record.evidence as { devices?: unknown; from?: unknown; to?: unknown } | null;
      if (record.event === 'rollout.started' && evidence) {
        if (typeof evidence.from === 'number') from = evidence.from;
        if (typeof evidence.to === 'number') to = evidence.to;
      }
      if (record.event !== 'devices.outcome' || !Array.isArray(evidence?.devices)) continue;
      for (const entry of evidence.devices as { id?: unknown; receipt?: unknown }[]) {
        if (typeof entry?.id === 'string') ids.add(entry.id);
        if (entry?.receipt === undefined) continue;
        receiptCount++;
        const parsed = parseReceipt(entry.receipt);
        if (parsed.ok) receipts.push(parsed.receipt.fields);
      }
    }
  return { ids, receipts, receiptCount, from, to };
}

/** The --revoked file: a YAML list of { key, at, reason }, each key an enrolled key's text or its id. */
function readRevoked(path: string): { key: string; at: string; reason: string }[] {
  const data = checkedDocument(parseDocumentText(readBytes(path).toString('utf8'), path, 'yaml'), path);
  if (!Array.isArray(data)) throw bad(`--revoked ${path}`, 'must be a YAML list of { key, at, reason }');
  return data.map((item, i) => {
    const e = item as { key?: unknown; at?: unknown; reason?: unknown } | null;
    if (typeof e?.key !== 'string' || typeof e.at !== 'string' || typeof e.reason !== 'string')
      throw bad(
        `--revoked ${path}`,
        `[${i}]: must be { key: <the device's key or its id>, at: <ISO instant>, reason }`,
      );
    if (Number.isNaN(Date.parse(e.at)))
      throw bad(`--revoked ${path}`, `[${i}].at ${JSON.stringify(e.at)}: must be an ISO-8601 instant`);
    return { key: e.key.trim(), at: new Date(e.at).toISOString(), reason: e.reason };
  });
}

/** The enrolment of each device the trail names: its kind, key and any revocation of that key. */
function enrolmentOf(
  ids: Set<string>,
  inventoryPath: string,
  revokedPath?: string,
  rotations: readonly string[] = [],
): EnrolledDevice[] {
  const inventory = loadInventory(inventoryPath);
  const revoked = revokedPath ? readRevoked(revokedPath) : [];
  const histories = keyHistories(rotations);
  const out: EnrolledDevice[] = [];
  for (const device of inventory.devices) {
    if (!ids.has(device.id)) continue;
    const kind: ReceiptKeyKind = device.transport === 'agent' ? 'agent' : 'ssh';
    // An agent signs with its identity key; an SSH device with the key its receipt signer made (`receipts.key`).
    const key = kind === 'agent' ? device.agentKey : device.receipts?.key;
    if (typeof key !== 'string') continue;
    const raw = enrolledPublicKey(kind, key);
    const names = raw ? [key, receiptKeyId(kind, raw)] : [key];
    const r = revoked.find((x) => names.includes(x.key));
    const history = kind === 'agent' ? histories.get(device.id) : undefined;
    out.push({
      id: device.id,
      kind,
      key,
      ...(r ? { revoked: { at: r.at, reason: r.reason } } : {}),
      ...(history ? { history } : {}),
    });
  }
  return out;
}

/**
 * The key history of each agent device from the rotations' proofs files (`--rotation`, the gateway's
 * `<id>.proofs.json`, its only writer) and, beside each, the CLI's state file `<id>.json` for each device's retire.
 * Copied as recorded: the verifier checks every proof itself. Steps in the order the gateway recorded them.
 */
function keyHistories(files: readonly string[]): Map<string, KeyRotationStep[]> {
  const out = new Map<string, KeyRotationStep[]>();
  for (const path of files) {
    const head = readDocument(path, 'json') as { id?: unknown; schedule?: unknown } | null;
    if (typeof head?.id !== 'string' || typeof head.schedule !== 'string')
      throw bad(
        `--rotation-proofs ${path}`,
        "not a rotation's proofs file (<id>.proofs.json: { type, id, schedule, devices })",
      );
    const proofs = readProofs(path, head.id, head.schedule);
    const statePath = join(dirname(path), `${proofs.id}.json`);
    const state = existsSync(statePath) ? readRotationState(statePath, proofs.id, proofs.schedule) : undefined;
    for (const [device, entry] of Object.entries(proofs.devices)) {
      const retiredAt = state?.devices[device]?.retired;
      const step = { rotation: proofs.id, provenAt: entry.at, proof: entry.proof, ...(retiredAt ? { retiredAt } : {}) };
      out.set(device, [...(out.get(device) ?? []), step]);
    }
  }
  for (const steps of out.values()) steps.sort((a, b) => Date.parse(a.provenAt) - Date.parse(b.provenAt));
  return out;
}

/** --log-key / --witness-key as every checkpoint flag reads a pinned key, written as keys/<kind>.pub holds it. */
function readCheckpointKey(flag: string, value: string, kind: 'log' | 'witness'): string {
  return pinnedKeyText(readPinnedKey(flag, value, kind));
}

/** The envelopes of a profile the trail names (receipts' revisions, the rollout's from/to, observed digests). */
function profileFiles(
  profilesRoot: string,
  profile: string,
  named: Set<number>,
  optional: Set<number>,
  observed: Set<string>,
) {
  const layout = profileDir(profilesRoot, profile, 'receipt profile');
  if (!existsSync(layout.trustFile))
    throw new WavegateError(
      'INVALID_INPUT',
      `--profiles ${profilesRoot}: profile ${profile} has no pins (${layout.trustFile}); its receipts name signed revisions`,
      { field: '--profiles' },
    );
  const trust = readBytes(layout.trustFile).toString('utf8');
  const envelopes = new Map<number, string>();
  for (const n of revisionNumbers(layout, 'envelopes')) {
    const text = readBytes(layout.envelopeFile(n)).toString('utf8');
    let digest = '';
    try {
      digest = envelopeDigestOf(JSON.parse(text));
    } catch {
      digest = '';
    }
    if (named.has(n) || optional.has(n) || observed.has(digest)) envelopes.set(n, text);
  }
  for (const n of named)
    if (!envelopes.has(n))
      throw new WavegateError(
        'INVALID_INPUT',
        `--profiles ${profilesRoot}: the trail's receipts name ${profile} r${n}, which has no signed envelope (${layout.envelopeFile(n)})`,
        { field: '--profiles' },
      );
  return { trust, envelopes };
}

/** Refuse a --bundle that exists and is not an empty directory: a bundle is never written over another. */
function checkBundleDir(dir: string): void {
  if (!existsSync(dir)) return;
  const empty = statSync(dir).isDirectory() && readdirSync(dir).length === 0;
  if (!empty)
    throw new WavegateError('INVALID_INPUT', `--bundle ${dir}: exists and is not an empty directory; name a new one`, {
      field: '--bundle',
      value: dir,
    });
}

/** Write every file into a temp directory beside `dir`, then rename it into place: all of it or nothing. */
function writeAtomically(dir: string, files: Map<string, string>): void {
  const temp = join(dirname(dir), `.${basename(dir)}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`);
  // `--bundle exports/2026/r42`: its parent made as `mkdir -p` would, as a user expects.
  mkdirSync(dirname(dir), { recursive: true });
  try {
    mkdirSync(temp, { mode: 0o755 });
    for (const [name, text] of files) {
      mkdirSync(dirname(join(temp, name)), { recursive: true });
      writeFileSync(join(temp, name), text, { flag: 'wx' });
    }
    renameSync(temp, dir);
  } catch (err) {
    rmSync(temp, { recursive: true, force: true });
    throw err;
  }
}

/** What a bundle holds, before it is written (writeReceiptsBundle). */
export interface BundleContent {
  rollout: string;
  segments: AuditSegment[];
  enrolment: EnrolledDevice[];
  /** Envelopes and pins as their files hold them (copied byte for byte). */
  revisions: { profile: string; revision: number; text: string }[];
  trust: { profile: string; text: string }[];
  checkpoints: string[];
  logKey?: string;
  witnessKey?: string;
  /** The slice trails the trail links, as the store held them (segments null: not in the store). */
  slices?: BundleSliceTrail[];
  /** Device entries with a receipt (bundle.json's counts), the slices' too. */
  receipts: number;
  devices: number;
  now?: Date;
}

/** Write a bundle into `dir` (absent or an empty directory), all of it or nothing. */
export function writeReceiptsBundle(bundleDir: string, content: BundleContent): BundleManifest {
  const dir = resolve(bundleDir);
  checkBundleDir(dir);
  const texts = content.segments.map(lineText);
  const slices = (content.slices ?? []).map((slice): { entry: BundleManifestSlice; text: string } => {
    if (!slice.segments) return { entry: { trail: slice.trail, missing: true }, text: '' };
    const parts = slice.segments.map(lineText);
    const segments = slice.segments.map((s, i) => ({ name: basename(s.name), records: lineCount(parts[i]!) }));
    return { entry: { trail: slice.trail, file: sliceFile(slice.trail), segments }, text: parts.join('') };
  });
  const sliceRecords = slices.reduce((n, s) => n + lineCount(s.text), 0);
  const manifest: BundleManifest = {
    format: RECEIPTS_BUNDLE_FORMAT,
    rollout: content.rollout,
    run: (parseAuditLog(texts[0] ?? '').records[0]?.runId as string | undefined) ?? null,
    exportedAt: (content.now ?? new Date()).toISOString(),
    segments: content.segments.map((s, i) => ({ name: basename(s.name), records: lineCount(texts[i]!) })),
    ...(slices.length > 0 ? { slices: slices.map((s) => s.entry) } : {}),
    counts: {
      records: texts.reduce((n, t) => n + lineCount(t), 0),
      receipts: content.receipts,
      devices: content.devices,
      revisions: content.revisions.length,
      checkpoints: content.checkpoints.length,
      ...(slices.length > 0 ? { slices: slices.filter((s) => 'file' in s.entry).length, sliceRecords } : {}),
    },
  };
  const files = new Map<string, string>();
  files.set('bundle.json', `${JSON.stringify(manifest, null, 2)}\n`);
  files.set('trail.jsonl', texts.join(''));
  files.set('enrolment.json', `${JSON.stringify({ devices: content.enrolment }, null, 2)}\n`);
  for (const t of content.trust) files.set(`trust/${t.profile}.yaml`, t.text);
  for (const r of content.revisions) files.set(`revisions/${r.profile}/${r.revision}.json`, r.text);
  files.set('checkpoints.jsonl', content.checkpoints.map((note) => `${JSON.stringify(note)}\n`).join(''));
  if (content.logKey) files.set('keys/log.pub', `${content.logKey}\n`);
  if (content.witnessKey) files.set('keys/witness.pub', `${content.witnessKey}\n`);
  for (const s of slices) if ('file' in s.entry) files.set(s.entry.file, s.text);
  writeAtomically(dir, files);
  return manifest;
}

/** A trail's text, its last line ended. */
function lineText(s: AuditSegment): string {
  return s.text.length === 0 || s.text.endsWith('\n') ? s.text : `${s.text}\n`;
}

/** The links of a trail's records (core/trail-link.ts), each with how deep it is. */
function linksIn(segments: AuditSegment[], depth: number) {
  return segments.flatMap((s) =>
    parseAuditLog(s.text).records.flatMap((record) => {
      const link = linkOf(record);
      return link ? [{ link, depth }] : [];
    }),
  );
}

/**
 * Every slice trail the trail links, read from the same store, its own links followed (3 deep, as `audit --verify`
 * follows them), each once. A trail the store has not is kept as missing (the verifier names it); a link without a
 * head, or whose head is null (the slice wrote no record), names nothing to export. The trail and its slices together
 * stay within the bundle's bound: past it the export is refused naming the slice trail it reached.
 */
async function readSliceTrails(opts: ExportOptions, segments: AuditSegment[]): Promise<BundleSliceTrail[]> {
  const queue = linksIn(segments, 1);
  if (queue.length === 0) return [];
  let bytes = segments.reduce((n, s) => n + Buffer.byteLength(s.text), 0);
  const out: BundleSliceTrail[] = [];
  const seen = new Set<string>();
  await withAuditReader({ store: opts.store, auditDir: opts.auditDir }, async (reader) => {
    while (queue.length > 0) {
      const { link, depth } = queue.shift()!;
      if ('bad' in link || link.head === null || seen.has(link.trail) || depth > 3) continue;
      seen.add(link.trail);
      let found: AuditSegment[];
      try {
        found = await reader.segments(link.trail);
      } catch (err) {
        if (!(err instanceof WavegateError && err.code === 'NOT_FOUND')) throw err;
        out.push({ trail: link.trail, segments: null });
        continue;
      }
      bytes += found.reduce((n, s) => n + Buffer.byteLength(s.text), 0);
      if (bytes > LIMITS.trail)
        throw new WavegateError(
          'INVALID_STATE',
          `rollout ${opts.rolloutId}: its trail and slice trails up to ${link.trail} hold more than ${LIMITS.trail} bytes, a bundle's bound: no bundle written`,
        );
      out.push({ trail: link.trail, segments: found });
      queue.push(...linksIn(found, depth + 1));
    }
  });
  return out;
}

/**
 * The trail as the store holds it (readAuditTrail), and the checkpoint notes the store keeps beside it: read with
 * the same store, by the store's `checkpoints` where it has one (none: an empty list).
 */
async function readTrail(opts: ExportOptions): Promise<{ segments: AuditSegment[]; checkpoints: string[] }> {
  const { segments } = await readAuditTrail({ store: opts.store, auditDir: opts.auditDir, rolloutId: opts.rolloutId });
  const value = opts.store ?? (process.env.WAVEGATE_AUDIT_STORE || undefined);
  const store = openAuditStore({ store: value, auditDir: opts.auditDir }) as ReturnType<typeof openAuditStore> & {
    checkpoints?: (rolloutId: string) => Promise<string[]>;
  };
  try {
    return { segments, checkpoints: store.checkpoints ? await store.checkpoints(opts.rolloutId) : [] };
  } catch (err) {
    if (err instanceof WavegateError) throw err;
    throw new WavegateError('UNAVAILABLE', (err as Error).message);
  } finally {
    await store.close();
  }
}

/** `wavegate audit export <id> --bundle <dir>`: the rollout's trail and all it needs to be checked offline. */
export async function exportReceiptsBundle(opts: ExportOptions): Promise<BundleManifest> {
  checkBundleDir(resolve(opts.bundleDir));
  const logKey = opts.logKey ? readCheckpointKey('--log-key', opts.logKey, 'log') : undefined;
  const witnessKey = opts.witnessKey ? readCheckpointKey('--witness-key', opts.witnessKey, 'witness') : undefined;
  const { segments, checkpoints } = await readTrail(opts);
  const slices = await readSliceTrails(opts, segments);
  const trail = trailDevices([...segments, ...slices.flatMap((s) => s.segments ?? [])]);
  const enrolment = enrolmentOf(trail.ids, opts.inventory, opts.revoked, opts.rotations);
  const revisions: BundleContent['revisions'] = [];
  const trust: BundleContent['trust'] = [];
  for (const profile of new Set(trail.receipts.map((r) => r.profile))) {
    checkProfileName(profile, 'receipt profile');
    const mine = trail.receipts.filter((r) => r.profile === profile);
    const optional = new Set([trail.from, trail.to].filter((n): n is number => n !== undefined));
    const observed = new Set(mine.flatMap((r) => (r.observed ? [r.observed] : [])));
    const found = profileFiles(opts.profilesRoot, profile, new Set(mine.map((r) => r.revision)), optional, observed);
    trust.push({ profile, text: found.trust });
    for (const [revision, text] of found.envelopes) revisions.push({ profile, revision, text });
  }
  return writeReceiptsBundle(opts.bundleDir, {
    rollout: opts.rolloutId,
    segments,
    enrolment,
    revisions,
    trust,
    checkpoints,
    ...(logKey ? { logKey } : {}),
    ...(witnessKey ? { witnessKey } : {}),
    ...(slices.length > 0 ? { slices } : {}),
    receipts: trail.receiptCount,
    devices: trail.ids.size,
    ...(opts.now ? { now: opts.now } : {}),
  });
}

function lineCount(text: string): number {
  let n = 0;
  for (let i = text.indexOf('\n'); i >= 0; i = text.indexOf('\n', i + 1)) n++;
  return n;
}
