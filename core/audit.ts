import { hmac } from '@noble/hashes/hmac.js';
import { sha256 } from '@noble/hashes/sha2.js';
import { bytesToHex } from '@noble/hashes/utils.js';
import { utf8Encode } from './bytes';
import { canonicalize } from './canonical';
import { WavegateError } from './errors';

/**
 * The audit trail (docs/architecture.md, "Audit"): one append-only chain of records per rollout. Each record carries the hash
 * of the one before it (`prev`) and its own `hash` = SHA-256 over the canonical JSON of every field but
 * `hash`, so editing, dropping, reordering or inserting a record breaks the chain at a place we can name.
 *
 * What a hash chain alone cannot show: records cut from the *end* (the shorter file is still a valid
 * chain) and a whole chain rewritten from some record on. Both need an anchor held elsewhere — the last
 * `{ seq, hash }` the writer returned — which `verifyAuditChain` takes as `head`. A record may also carry
 * `mac` = HMAC-SHA256 under a worker-held key of its `hash` (auditRecordMac): since the hash covers `prev`,
 * a valid MAC on a record vouches for the whole chain up to it, so a chain rewritten and resealed by
 * someone without the key is detected without the workflow's head.
 *
 * Segments. A trail that became unreadable is never rewritten: an `audit.override` record (an operator's
 * explicit, recorded decision) starts a new segment that continues the chain from `lastGood`, the last
 * head the workflow holds; verifyAuditSegments checks each segment and names the override and its reason.
 *
 * Pure (no Node APIs): safe to import from workflows.
 */
export const AUDIT_EVENTS = [
  'rollout.started',
  'phase.started',
  'phase.applied',
  'gate.passed',
  'gate.failed',
  'gate.inconclusive',
  'rollout.paused',
  'rollout.resumed',
  'rollout.aborted',
  'rollout.cancelled',
  'rollout.approved',
  /** An approval the two-person rule did not count (core/approval.ts), with why and who, as far as proven. */
  'rollout.approval-refused',
  /** The starter the two-person rule knows, from a verified signed statement (core/approval.ts). */
  'rollout.starter',
  'rollback.started',
  'rollback.completed',
  'rollout.completed',
  /** The end of a rollout an operator aborted (the abort itself is recorded once, as rollout.aborted). */
  'rollout.ended',
  'rollout.failed',
  'canary.verdict',
  'audit.override',
  /** What happened to each device of a batch (apply or rollback): started, then applied/claimed/failed/rolled back. */
  'devices.outcome',
  /** Devices that never started, or failed before they could (refused or offline at snapshot), with the reason. */
  'devices.skipped',
  /** The floor a completed rollout raised on its devices (core/floor.ts), and any it could not write. */
  'floor.confirmed',
  /** A progressDeadline or phaseDeadline passed in active time: which, the phase, the unconfirmed devices, the action. */
  'deadline.passed',
  /** Every phase passed and the spec's watch began: how long, how often, which checks, over how many devices. */
  'watch.started',
  /** A check of the watch passed (or was inconclusive and the watch went on): its results. */
  'watch.passed',
  'watch.inconclusive',
  /** A check of the watch failed: its results, the devices named, and what follows (revert or alert). */
  'watch.failed',
  /** The watch ran its time: how many checks, and the alerts it raised (onFail: alert). */
  'watch.completed',
] as const;
export type AuditEventName = (typeof AUDIT_EVENTS)[number];

export interface AuditEvent {
  /** 1-based and contiguous within one rollout's chain; the writer's idempotency key. */
  seq: number;
  /** ISO-8601 UTC instant (`Date.prototype.toISOString` form). */
  at: string;
  rolloutId: string;
  runId: string;
  event: AuditEventName;
  phase: string | null;
  /** Who caused it: the operator for a control, `wavegate` for the workflow's own transitions. */
  by: string;
  reason: string | null;
  counts: Record<string, number> | null;
  /** Any JSON: gate results, device lists. Secrets are stripped before sealing (see redactSecrets). */
  evidence: unknown;
  /**
   * Only on `audit.override` (and required there): the last record the workflow holds as written
   * (`{ seq: 0, hash: GENESIS_HASH }` when none). The override is record `lastGood.seq + 1`, chained to
   * `lastGood.hash`; when the trail does not end whole at that head it starts a new segment.
   */
  lastGood?: AuditHead;
}

export interface AuditRecord extends AuditEvent {
  /** Hash of the previous record, or GENESIS_HASH for seq 1. */
  prev: string;
  /** SHA-256 hex of the canonical JSON of the record without `hash` and `mac`. */
  hash: string;
  /** HMAC-SHA256 hex of `hash` under the worker's audit key (auditRecordMac); absent when it has none. */
  mac?: string;
}

export const GENESIS_HASH = '0'.repeat(64);

export type AuditProblem =
  | 'edited'
  | 'dropped'
  | 'reordered'
  | 'broken-chain'
  | 'bad-seq'
  | 'truncated'
  | 'unsigned'
  | 'bad-mac';
export type AuditVerdict =
  | { ok: true; count: number }
  | { ok: false; seq: number; problem: AuditProblem; message: string };

/** The last record a writer acknowledged, kept outside the file: lets verification see a cut-off tail. */
export interface AuditHead {
  seq: number;
  hash: string;
}

const HEX64 = /^[0-9a-f]{64}$/;
const ISO_INSTANT = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?Z$/;

function refuse(field: string, value: unknown, allowed: string): never {
  const shown = value === undefined ? 'missing' : (JSON.stringify(value)?.slice(0, 80) ?? String(value));
  throw new WavegateError('INVALID_INPUT', `audit event ${field}: ${shown} is not allowed; ${allowed}`, { field });
}

function checkEvent(event: AuditEvent): void {
  if (event === null || typeof event !== 'object') refuse('(root)', event, 'expected an object');
  if (!Number.isSafeInteger(event.seq) || event.seq < 1) refuse('seq', event.seq, 'expected an integer ≥ 1');
  if (typeof event.at !== 'string' || !ISO_INSTANT.test(event.at) || Number.isNaN(Date.parse(event.at))) {
    refuse('at', event.at, 'expected an ISO-8601 UTC instant like 2026-01-01T00:00:00.000Z');
  }
  for (const field of ['rolloutId', 'runId', 'by'] as const) {
    if (typeof event[field] !== 'string' || event[field].length === 0)
      refuse(field, event[field], 'expected a non-empty string');
  }
  if (!(AUDIT_EVENTS as readonly string[]).includes(event.event))
    refuse('event', event.event, `expected one of ${AUDIT_EVENTS.join(', ')}`);
  for (const field of ['phase', 'reason'] as const) {
    if (event[field] !== null && typeof event[field] !== 'string')
      refuse(field, event[field], 'expected a string or null');
  }
  checkOverride(event);
  if (event.counts !== null) {
    if (typeof event.counts !== 'object' || Array.isArray(event.counts))
      refuse('counts', event.counts, 'expected an object of counts or null');
    for (const [name, n] of Object.entries(event.counts)) {
      if (!Number.isSafeInteger(n) || n < 0) refuse(`counts.${name}`, n, 'expected an integer ≥ 0');
    }
  }
}

function isHead(value: unknown, minSeq: number): value is AuditHead {
  const head = value as AuditHead;
  return (
    isRecordLike(value) &&
    Number.isSafeInteger(head.seq) &&
    head.seq >= minSeq &&
    typeof head.hash === 'string' &&
    HEX64.test(head.hash)
  );
}

/** An override names the head it continues from and why; no other event carries `lastGood`. */
function checkOverride(event: AuditEvent): void {
  if (event.event !== 'audit.override') {
    if (event.lastGood !== undefined)
      refuse('lastGood', event.lastGood, 'only an audit.override record carries lastGood');
    return;
  }
  if (!isHead(event.lastGood, 0))
    refuse('lastGood', event.lastGood, 'audit.override needs the last good head { seq ≥ 0, hash: 64 lowercase hex }');
  if (event.lastGood.seq === 0 && event.lastGood.hash !== GENESIS_HASH)
    refuse('lastGood.hash', event.lastGood.hash, 'seq 0 is the chain start: expected 64 zeros');
  if (event.seq !== event.lastGood.seq + 1)
    refuse(
      'seq',
      event.seq,
      `audit.override continues after lastGood.seq ${event.lastGood.seq}: expected ${event.lastGood.seq + 1}`,
    );
  if (typeof event.reason !== 'string' || event.reason.trim().length === 0)
    refuse('reason', event.reason, "audit.override needs the operator's reason");
}

/** SHA-256 hex over the canonical JSON of every field of `record` except `hash` and `mac`. */
export function auditRecordHash(record: object): string {
  const { hash: _ignored, mac: _mac, ...body } = record as Record<string, unknown>;
  return bytesToHex(sha256(utf8Encode(canonicalize(body))));
}

/** Plain JSON copy in canonical key order: what goes into the file is exactly what was hashed. */
function normalizeJson(value: unknown, field: string): unknown {
  try {
    return JSON.parse(canonicalize(value ?? null));
  } catch (err) {
    if (!(err instanceof WavegateError)) throw err;
    throw new WavegateError('INVALID_INPUT', err.message.replace('canonical JSON: (root)', `audit event ${field}`), {
      field,
    });
  }
}

/**
 * Seal an event onto a chain whose last hash is `prev`. Secrets are redacted from `evidence` and PEM
 * private keys from `reason` first; an event with a field out of bounds is refused as INVALID_INPUT naming
 * the field and value.
 */
export function sealRecord(event: AuditEvent, prev: string): AuditRecord {
  checkEvent(event);
  if (typeof prev !== 'string' || !HEX64.test(prev)) refuse('prev', prev, 'expected 64 lowercase hex characters');
  if (event.seq === 1 && prev !== GENESIS_HASH) refuse('prev', prev, 'seq 1 starts a chain: expected 64 zeros');
  if (event.lastGood && prev !== event.lastGood.hash)
    refuse('prev', prev, `audit.override chains to lastGood.hash ${event.lastGood.hash.slice(0, 12)}…`);
  const body: Omit<AuditRecord, 'hash'> = {
    seq: event.seq,
    at: event.at,
    rolloutId: event.rolloutId,
    runId: event.runId,
    event: event.event,
    phase: event.phase,
    by: event.by,
    reason: event.reason === null ? null : redactPem(event.reason),
    counts: event.counts === null ? null : (normalizeJson(event.counts, 'counts') as Record<string, number>),
    evidence: normalizeJson(redactSecrets(event.evidence), 'evidence'),
    ...(event.lastGood ? { lastGood: { seq: event.lastGood.seq, hash: event.lastGood.hash } } : {}),
    prev,
  };
  return { ...body, hash: auditRecordHash(body) };
}

/**
 * The content an append is idempotent on: the event as sealed (after redaction and normalization),
 * without `prev` and `hash`. Two appends of one seq are "the same" exactly when these strings are equal.
 */
export function auditContentKey(record: AuditEvent): string {
  const { prev: _p, hash: _h, mac: _m, ...content } = record as AuditRecord;
  return canonicalize(content);
}

/** Seal an event for comparison only (its chain position is not known yet). */
export function auditContentOfEvent(event: AuditEvent): string {
  const lastGood = event?.lastGood as Partial<AuditHead> | undefined;
  return auditContentKey(sealRecord(event, typeof lastGood?.hash === 'string' ? lastGood.hash : GENESIS_HASH));
}

function isRecordLike(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

/** Domain-separated so an audit MAC can never be replayed as any other HMAC made with the same key. */
const MAC_DOMAIN = 'wavegate-audit-mac-v1\n';

/** HMAC-SHA256 hex of a record's hash under the worker's audit key. */
export function auditRecordMac(key: Uint8Array, hash: string): string {
  return bytesToHex(hmac(sha256, key, utf8Encode(`${MAC_DOMAIN}${hash}`)));
}

/** The record with its MAC (replacing any). */
export function macRecord(record: AuditRecord, key: Uint8Array): AuditRecord {
  return { ...record, mac: auditRecordMac(key, record.hash) };
}

/** Equal in time independent of where two hex strings differ. */
function sameHex(a: string, b: string): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a.charCodeAt(i) ^ b.charCodeAt(i);
  return diff === 0;
}

export interface ChainOptions {
  /** Where this chain (a later segment) continues from; default the genesis `{ seq: 0, hash: GENESIS_HASH }`. */
  start?: AuditHead;
  /** The audit key: every record must then carry a valid MAC. */
  key?: Uint8Array;
  /**
   * The line (or row) of the segment `records[0]` is on; default 1. A store re-checking only the records
   * after a prefix it found whole passes where they start, so a message names the line an operator repairs.
   */
  firstLine?: number;
}

/**
 * Check a chain from its first record. Returns the first problem, named by the seq where it shows:
 * - `edited`: a record's content no longer matches its own hash (or a line is not a record at all);
 * - `dropped`: records are missing (seq jumps and the chain link is broken, the missing seq is nowhere);
 * - `reordered`: the missing seq appears later in the file;
 * - `broken-chain`: the seq is right but `prev` does not match the record before (that one was rewritten
 *   and resealed, or a sealed record was inserted before this one);
 * - `bad-seq`: a seq that is not a positive integer, or a record chained correctly but sealed with the
 *   wrong seq (a writer bug, not an edit);
 * - `unsigned` / `bad-mac` (with `key`): a record without a MAC, or whose MAC is not the key's: the chain
 *   was resealed by someone without the key, or written under another key;
 * - `truncated`: `head` says the chain went further than the records do.
 */
export function verifyAuditChain(records: AuditRecord[], head?: AuditHead, opts: ChainOptions = {}): AuditVerdict {
  const start = opts.start ?? { seq: 0, hash: GENESIS_HASH };
  const firstLine = opts.firstLine ?? 1;
  let prevHash = start.hash;
  for (let i = 0; i < records.length; i++) {
    const expected = start.seq + i + 1;
    const line = `line ${firstLine + i}`;
    const record = records[i] as unknown;
    if (!isRecordLike(record)) return fail(expected, 'edited', `${line}: not an audit record`);
    const seq = record.seq;
    if (typeof seq !== 'number' || !Number.isSafeInteger(seq) || seq < 1) {
      return fail(
        expected,
        'bad-seq',
        `${line}: seq ${JSON.stringify(seq)} is not an integer ≥ 1 (expected ${expected})`,
      );
    }
    let actual: string;
    try {
      actual = auditRecordHash(record);
    } catch {
      return fail(seq, 'edited', `record ${seq} (${line}) holds a value with no JSON form`);
    }
    if (record.hash !== actual) {
      return fail(
        seq,
        'edited',
        `record ${seq} (${line}) was edited: its content hashes to ${actual.slice(0, 12)}…, the record says ${String(record.hash).slice(0, 12)}…`,
      );
    }
    const linked = record.prev === prevHash;
    if (seq === expected) {
      if (!linked) {
        return fail(
          seq,
          'broken-chain',
          `record ${seq} (${line}) does not chain to record ${seq - 1}: record ${seq - 1} was rewritten and resealed, or a record was inserted or replaced before ${seq}`,
        );
      }
    } else if (linked) {
      return fail(
        expected,
        'bad-seq',
        `${line} is chained right after record ${expected - 1} but sealed as seq ${seq} (expected ${expected})`,
      );
    } else if (seq > expected) {
      const later = records.slice(i + 1).findIndex((r) => isRecordLike(r) && r.seq === expected);
      if (later >= 0) {
        return fail(
          expected,
          'reordered',
          `record ${expected} is out of order: ${line} holds record ${seq}, record ${expected} is on line ${firstLine + i + 1 + later}`,
        );
      }
      const missing = seq - 1 === expected ? `record ${expected} is` : `records ${expected}–${seq - 1} are`;
      return fail(
        expected,
        'dropped',
        `${missing} missing: ${line} holds record ${seq} right after record ${expected - 1}`,
      );
    } else {
      return fail(
        seq,
        'broken-chain',
        `record ${seq} appears again on ${line} (expected ${expected}): a record was inserted or duplicated before it`,
      );
    }
    if (opts.key) {
      if (typeof record.mac !== 'string')
        return fail(
          seq,
          'unsigned',
          `record ${seq} (${line}) carries no MAC: it was not written by a worker holding the audit key (resealed, or written before the key was configured)`,
        );
      if (!sameHex(record.mac, auditRecordMac(opts.key, actual))) {
        return fail(
          seq,
          'bad-mac',
          `record ${seq} (${line}) has a MAC that is not the audit key's: the chain was rewritten and resealed without the key, or written under another key`,
        );
      }
    }
    prevHash = record.hash as string;
  }
  if (head) {
    const last = start.seq + records.length;
    if (head.seq > last) {
      return fail(
        last + 1,
        'truncated',
        `the chain ends at record ${last} but the writer acknowledged record ${head.seq}: records ${last + 1}–${head.seq} were cut off`,
      );
    }
    const anchored =
      head.seq === start.seq
        ? { hash: start.hash }
        : head.seq > start.seq
          ? records[head.seq - start.seq - 1]!
          : undefined;
    if (!anchored) {
      return fail(
        head.seq,
        'edited',
        `the writer acknowledged record ${head.seq}, but this segment starts after record ${start.seq}`,
      );
    }
    if (anchored.hash !== head.hash) {
      return fail(
        head.seq,
        'edited',
        `record ${head.seq} has hash ${anchored.hash.slice(0, 12)}… but the writer acknowledged ${head.hash.slice(0, 12)}…: the chain was rewritten up to here`,
      );
    }
  }
  return { ok: true, count: records.length };
}

function fail(seq: number, problem: AuditProblem, message: string): AuditVerdict {
  return { ok: false, seq, problem, message };
}

/** A JSONL audit log read back: the records before the first unreadable line, and that line if any. */
export interface ParsedAuditLog {
  records: AuditRecord[];
  /** The first line that is not a JSON object (1-based); `torn` when it is the last and unterminated. */
  unreadable: { line: number; torn: boolean } | null;
}

/** Split a JSONL audit log. A final line without its newline that does not parse is a torn append. */
export function parseAuditLog(text: string): ParsedAuditLog {
  const records: AuditRecord[] = [];
  if (text.length === 0) return { records, unreadable: null };
  const terminated = text.endsWith('\n');
  const lines = (terminated ? text.slice(0, -1) : text).split('\n');
  for (let i = 0; i < lines.length; i++) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(lines[i]!);
    } catch {
      parsed = undefined;
    }
    if (!isRecordLike(parsed))
      return { records, unreadable: { line: i + 1, torn: !terminated && i === lines.length - 1 } };
    records.push(parsed as unknown as AuditRecord);
  }
  return { records, unreadable: null };
}

/** Verify a JSONL audit log as stored: unreadable lines first, then the chain (see verifyAuditChain). */
export function verifyAuditLog(text: string, head?: AuditHead, opts: ChainOptions = {}): AuditVerdict {
  const { records, unreadable } = parseAuditLog(text);
  if (unreadable) {
    const seq = (opts.start?.seq ?? 0) + records.length + 1;
    return unreadable.torn
      ? fail(seq, 'truncated', `line ${unreadable.line} (record ${seq}) is cut off mid-record: the file was truncated`)
      : fail(seq, 'edited', `line ${unreadable.line} (record ${seq}) is not a JSON audit record`);
  }
  return verifyAuditChain(records, head, opts);
}

/** One file of a trail: segment 1 from the genesis, each later one started by an `audit.override`. */
export interface AuditSegment {
  name: string;
  text: string;
}

/** The override that started a segment, and whether the segment before it holds the head it names. */
export interface AuditOverride {
  seq: number;
  at: string;
  by: string;
  reason: string;
  lastGood: AuditHead;
  /** The previous segment holds `lastGood` before any problem of its own (else the override asserts it). */
  confirmed: boolean;
}

export interface SegmentReport {
  name: string;
  records: number;
  /** The segment's first problem; on a segment before the last it is what the next segment's override set aside. */
  problem: Extract<AuditVerdict, { ok: false }> | null;
  override?: AuditOverride;
}

export interface TrailVerdict {
  ok: boolean;
  /** Readable records in all segments. */
  count: number;
  /** The last record of the last segment (what a writer's head is compared with). */
  head: AuditHead | null;
  segments: SegmentReport[];
  /** Why `ok` is false: the last segment's problem, or a segment that does not start with an override. */
  failure: { segment: string; seq: number; problem: AuditProblem | 'no-override'; message: string } | null;
}

function overrideOf(record: AuditRecord | undefined): AuditRecord | undefined {
  return record && isRecordLike(record) && record.event === 'audit.override' && isHead(record.lastGood, 0)
    ? record
    : undefined;
}

/**
 * Verify a whole trail, segment by segment (docs/architecture.md, "Audit"). Segment 1 chains from the
 * genesis; every later segment must start with an `audit.override` record and chains from its `lastGood`.
 * A problem in a segment before the last was set aside by that override (it is reported, with the
 * override's author and reason, and does not fail the trail); a problem in the last segment fails it.
 * `head` (the writer's acknowledged head) is checked against the last segment, `key` on every record.
 */
export function verifyAuditSegments(
  segments: AuditSegment[],
  opts: { head?: AuditHead; key?: Uint8Array } = {},
): TrailVerdict {
  const reports: SegmentReport[] = [];
  let count = 0;
  let failure: TrailVerdict['failure'] = null;
  let head: AuditHead | null = null;
  let previous: { start: AuditHead; records: AuditRecord[]; problem: SegmentReport['problem'] } | undefined;
  for (const [i, segment] of segments.entries()) {
    const last = i === segments.length - 1;
    const { records } = parseAuditLog(segment.text);
    count += records.length;
    let start: AuditHead = { seq: 0, hash: GENESIS_HASH };
    let override: AuditOverride | undefined;
    if (i > 0) {
      const first = overrideOf(records[0]);
      if (!first) {
        failure = {
          segment: segment.name,
          seq: 0,
          problem: 'no-override',
          message: `${segment.name} does not start with an audit.override record: a segment after the first is only ever started by an operator's override`,
        };
        reports.push({ name: segment.name, records: records.length, problem: null });
        break;
      }
      start = { seq: first.lastGood!.seq, hash: first.lastGood!.hash };
      const prev = previous!;
      const held =
        start.seq === prev.start.seq
          ? prev.start.hash === start.hash
          : prev.records.some((r) => r.seq === start.seq && r.hash === start.hash);
      override = {
        seq: first.seq,
        at: first.at,
        by: first.by,
        reason: first.reason ?? '',
        lastGood: start,
        confirmed: held && (prev.problem === null || start.seq < prev.problem.seq),
      };
    }
    const verdict = verifyAuditLog(segment.text, last ? opts.head : undefined, { start, key: opts.key });
    const problem = verdict.ok ? null : verdict;
    reports.push({ name: segment.name, records: records.length, problem, ...(override ? { override } : {}) });
    if (last) {
      if (problem)
        failure = { segment: segment.name, seq: problem.seq, problem: problem.problem, message: problem.message };
      const tail = records.at(-1);
      head = tail ? { seq: tail.seq, hash: tail.hash } : start.seq > 0 ? start : null;
    }
    previous = { start, records, problem };
  }
  return { ok: failure === null, count, head, segments: reports, failure };
}

/** The one line a record is stored as: fixed field order for people reading the file, JSON for tools. */
export function serializeAuditRecord(record: AuditRecord): string {
  const { seq, at, rolloutId, runId, event, phase, by, reason, counts, evidence, lastGood, prev, hash, mac } = record;
  return JSON.stringify({
    seq,
    at,
    rolloutId,
    runId,
    event,
    phase,
    by,
    reason,
    counts,
    evidence,
    lastGood,
    prev,
    hash,
    mac,
  });
}

const SECRET_FIELD = /private[-_ ]?key|secret|passw(?:or)?d|passphrase|credential|api[-_]?key|token/i;
const PEM_PRIVATE_KEY = /-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|$)/g;
export const REDACTED = '[redacted]';

function redactPem(text: string): string {
  return text.replace(PEM_PRIVATE_KEY, '[redacted private key]');
}

/**
 * Defensive: evidence comes from activities and operators, and secrets must never enter the audit. Values
 * of fields named like a secret (privateKey, secretKey, password, passphrase, token, credential, apiKey)
 * become "[redacted]", and PEM private-key blocks inside any string are cut out (an unterminated block to
 * the end of the string). Returns a copy; a circular value is refused.
 */
export function redactSecrets(value: unknown): unknown {
  const seen = new Set<object>();
  const walk = (v: unknown, path: string): unknown => {
    if (typeof v === 'string') return redactPem(v);
    if (v === null || typeof v !== 'object') return v;
    if (seen.has(v))
      throw new WavegateError(
        'INVALID_INPUT',
        `audit event evidence${path === '(root)' ? '' : path.replace('(root)', '')}: circular reference has no JSON form`,
        { path },
      );
    seen.add(v);
    try {
      if (Array.isArray(v)) return v.map((item, i) => walk(item, `${path}[${i}]`));
      // Not a plain object: leave it for canonical JSON to refuse by name rather than flatten it here.
      const proto = Object.getPrototypeOf(v);
      if (proto !== Object.prototype && proto !== null) return v;
      const out: Record<string, unknown> = {};
      for (const [key, item] of Object.entries(v))
        out[key] =
          SECRET_FIELD.test(key) && item !== null && item !== undefined ? REDACTED : walk(item, `${path}.${key}`);
      return out;
    } finally {
      seen.delete(v);
    }
  };
  return walk(value, '(root)');
}

/**
 * The run that wrote a chain: the runId of its first record. A re-used rollout id (`rollout:<profile>`)
 * starts a new chain at each run's first record, so this is the run whose head the chain is compared
 * with; the first record's runId is covered by its hash, so editing it breaks the chain. Undefined when
 * the first line is not a record.
 */
export function chainRunOf(segments: AuditSegment[]): string | undefined {
  const first = segments[0] ? parseAuditLog(segments[0].text).records[0] : undefined;
  return typeof first?.runId === 'string' && first.runId.length > 0 ? first.runId : undefined;
}

/**
 * A store that holds none of a trail whose writer acknowledged `head`: the trail was deleted (or is
 * kept elsewhere). A verification failure (exit 1), not bad input: the message names what is missing.
 */
export function missingTrailMessage(head: AuditHead, headSource: string, storeLocation: string): string {
  return `trail deleted: ${headSource} says ${head.seq} record${head.seq === 1 ? '' : 's'} up to seq ${head.seq} (hash ${head.hash}); ${storeLocation} has none`;
}

/**
 * Which run's head a chain is compared with. `chainRun` is the run that wrote the chain (the `--run`
 * given, else its first record's runId); `latest` is the rollout id's latest run as the server says.
 * The chain is compared with its own run's head; a latest run that is another run and holds a head of
 * its own means the store's current chain is not the latest run's: that run's trail is missing here.
 */
export function latestRunMismatch(
  chainRun: string | undefined,
  latest: { runId: string; head: AuditHead | null } | undefined,
  storeLocation: string,
): string | null {
  if (!chainRun || !latest || latest.runId === chainRun || !latest.head) return null;
  return `the rollout's latest run ${latest.runId} holds an audit head (${latest.head.seq} records up to seq ${latest.head.seq}, hash ${latest.head.hash.slice(0, 12)}…) but the current chain in ${storeLocation} is run ${chainRun}'s: run ${latest.runId}'s trail is missing there`;
}
