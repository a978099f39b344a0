import type { Command } from 'commander';
import {
  chainRunOf,
  latestRunMismatch,
  missingTrailMessage,
  parseAuditLog,
  verifyAuditSegments,
  type AuditHead,
  type AuditProblem,
  type AuditRecord,
  type AuditSegment,
  type SegmentReport,
  type TrailVerdict,
} from '../../core/audit';
import { WavegateError } from '../../core/errors';
import { linkOf, type TrailLink } from '../../core/trail-link';
import { DEFAULT_AUDIT_DIR, readAuditKey, resolveAuditLocation, type AuditLocation } from '../../audit/file';
import { readAuditTrail, redactStoreUrl, withAuditReader, type AuditTrailReader } from '../../audit';
import type { TemporalFlags } from '../../workers/connection';
import { withWorkflowHeads, workflowAuditHead, type WorkflowHead } from '../audit-head';
import { withTemporalOptions } from '../client';
import { gateVerdictLines } from '../../core/rollout/verdict';
import { action, EXIT_FAILED } from '../run';
import { registerBundleCommands } from '../audit-bundle';
import { checkKeptCheckpoints, checkpointKeysOf, checkpointLines, type KeptCheckpoints } from '../audit-checkpoints';

export interface AuditFlags extends TemporalFlags {
  verify?: boolean;
  json?: boolean;
  /** Resolved once by the action (resolveAuditLocation): absolute. */
  auditDir: string;
  run?: string;
  head?: string;
  auditKeyFile?: string;
  auditStore?: string;
  strict?: boolean;
  withSlices?: boolean;
  logKey?: string;
  witnessKey?: string;
}

/** `--head 12:ab34…`: the last seq and hash the writer acknowledged, to catch records cut off the end. */
function parseHead(text: string): AuditHead {
  const match = /^(\d+):([0-9a-f]{64})$/.exec(text);
  if (!match || Number(match[1]) < 1)
    throw new WavegateError(
      'INVALID_INPUT',
      `--head ${JSON.stringify(text)}: expected <seq>:<64 lowercase hex hash>, e.g. 7:${'0'.repeat(64)}`,
    );
  return { seq: Number(match[1]), hash: match[2]! };
}

function countsSummary(counts: Record<string, number> | null): string {
  if (!counts) return '-';
  const entries = Object.entries(counts).filter(([name, n]) => n !== 0 || name === 'total');
  entries.sort(([a], [b]) => (a === 'total' ? -1 : b === 'total' ? 1 : 0));
  return entries.map(([name, n]) => `${name} ${n}`).join(', ') || '-';
}

function oneLine(text: string | null): string {
  if (!text) return '-';
  return text.replace(/\s+/g, ' ').trim() || '-';
}

/**
 * Text in lines of at most `width` characters, broken at spaces (a word longer than a line is broken
 * inside it): every character is kept, so a reason is printed whole, never cut to fit its column.
 */
export function wrapText(text: string, width: number): string[] {
  const lines: string[] = [];
  let line = '';
  for (let word of text.split(' ')) {
    while (word.length > width) {
      if (line) lines.push(line);
      lines.push(word.slice(0, width));
      word = word.slice(width);
      line = '';
    }
    if (!line) line = word;
    else if (line.length + 1 + word.length <= width) line += ` ${word}`;
    else {
      lines.push(line);
      line = word;
    }
  }
  if (line || lines.length === 0) lines.push(line);
  return lines;
}

/**
 * The records as a table, one entry per record: its row, and when its reason is longer than the REASON
 * column, the rest of the reason on lines of their own under that column (joined by newlines).
 */
export function table(records: AuditRecord[], reasonWidth = 48): string[] {
  const reasons = records.map((r) => wrapText(oneLine(r.reason), reasonWidth));
  const rows = records.map((r, i) => [
    String(r.seq),
    r.at,
    r.event,
    r.phase ?? '-',
    r.by,
    reasons[i]![0]!,
    countsSummary(r.counts),
  ]);
  const header = ['SEQ', 'AT', 'EVENT', 'PHASE', 'BY', 'REASON', 'COUNTS'];
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((row) => row[i]!.length)));
  const format = (row: string[]) =>
    row.map((cell, i) => (i === row.length - 1 ? cell : cell.padEnd(widths[i]!))).join('  ');
  const reasonAt = widths.slice(0, 5).reduce((n, w) => n + w + 2, 0);
  return [
    format(header),
    ...rows.map((row, i) =>
      [format(row), ...reasons[i]!.slice(1).map((more) => `${' '.repeat(reasonAt)}${more}`)].join('\n'),
    ),
  ];
}

/** The lines saying which segments an operator's override started, and what each set aside. */
function segmentLines(segments: SegmentReport[], prefix = ''): string[] {
  const out: string[] = [];
  for (const [i, segment] of segments.entries()) {
    const o = segment.override;
    if (o) {
      out.push(
        `${prefix}segment ${i + 1} (${segment.name}): started by an operator override, record ${o.seq} by ${o.by} at ${o.at}: "${oneLine(o.reason)}"; continues after record ${o.lastGood.seq}${o.confirmed ? '' : ' (NOT confirmed by the segment before: it does not hold that record intact)'}`,
      );
    }
    if (segment.problem && i < segments.length - 1) {
      out.push(
        `${prefix}segment ${i + 1} (${segment.name}): ${segment.problem.problem} at seq ${segment.problem.seq}: ${segment.problem.message} — set aside by the override in segment ${i + 2}, kept as it is`,
      );
    }
  }
  return out;
}

/** At most this many linked trails' failures are printed one a line (--json lists them all). */
const LINK_FAILURES_SHOWN = 20;

/**
 * The lines `--verify` prints: overrides and set-aside segments, the verdict, then what was and was not
 * compared. With `linked` (verifyLinkedTrails), the trails the chain links are said too: on the verdict
 * line when the chain is intact (`…, chain intact, and 50 linked slice trails (10,000 device records)`),
 * then one line per linked trail that failed.
 */
export function verifyReport(
  label: string,
  verdict: TrailVerdict,
  head: { checked: string | null; why: string | null },
  key: { file?: string; from?: string; lookedFor: string },
  linked?: LinkedTrailsVerdict,
): string[] {
  const out: string[] = segmentLines(verdict.segments);
  const links = linked && linked.trails > 0 ? linked : undefined;
  if (links)
    for (const r of links.results) if (r.segments) out.push(...segmentLines(r.segments, `linked trail ${r.trail}: `));
  const linkSummary = links
    ? `${links.trails - links.failed} linked slice trail${links.trails - links.failed === 1 ? '' : 's'} (${number(links.deviceRecords)} device record${links.deviceRecords === 1 ? '' : 's'})`
    : '';
  if (!verdict.ok)
    out.push(`${label}: ${verdict.failure!.problem} at seq ${verdict.failure!.seq}: ${verdict.failure!.message}`);
  else if (!links) out.push(`${label}: ${verdict.count} records, chain intact`);
  else if (links.ok) out.push(`${label}: ${verdict.count} records, chain intact, and ${linkSummary}`);
  else
    out.push(
      `${label}: ${verdict.count} records, chain intact; ${links.failed} of ${links.trails} linked slice trail${links.trails === 1 ? '' : 's'} FAILED`,
    );
  if (links && (!verdict.ok || !links.ok)) {
    const before = verdict.ok ? '' : ` (linked by records before seq ${verdict.failure!.seq})`;
    if (links.ok) out.push(`linked: ${linkSummary} intact${before}`);
    else {
      const failures = links.results.filter((r) => !r.ok);
      for (const r of failures.slice(0, LINK_FAILURES_SHOWN)) out.push(`linked: ${r.message}`);
      if (failures.length > LINK_FAILURES_SHOWN)
        out.push(`linked: … and ${failures.length - LINK_FAILURES_SHOWN} more failed (--json lists them all)`);
      if (links.failed < links.trails) out.push(`linked: ${linkSummary} intact${before}`);
    }
  }
  const notes = links?.notes ?? [];
  for (const note of notes.slice(0, LINK_FAILURES_SHOWN)) out.push(`linked: note: ${note}`);
  if (notes.length > LINK_FAILURES_SHOWN)
    out.push(`linked: … and ${notes.length - LINK_FAILURES_SHOWN} more notes (--json lists them all)`);
  out.push(
    head.checked
      ? `head: compared with ${head.checked}`
      : `head: NOT checked: ${head.why}; records cut off the end or a resealed file cannot be ruled out (give --head <seq>:<hash>, or reach the rollout's Temporal server)`,
  );
  out.push(
    key.file
      ? `MAC: every record checked against the audit key ${key.file} (${key.from})${links ? ', in the linked trails too' : ''}`
      : `MAC: NOT checked: ${macNotChecked(key.lookedFor)}`,
  );
  return out;
}

function number(n: number): string {
  return n.toLocaleString('en-US');
}

/** Why no MAC was checked: where the key was looked for, and how to name the worker's. */
function macNotChecked(lookedFor: string): string {
  return `no audit key found (${lookedFor}); give the key the worker was started with by --audit-key-file <path> or $WAVEGATE_AUDIT_KEY_FILE; a chain rewritten and resealed wholesale cannot be ruled out`;
}

/** The store is the audit directory (not a database): a trail not found there may be in the worker's own. */
function readsDirectory(opts: AuditFlags): boolean {
  const value = opts.auditStore ?? (process.env.WAVEGATE_AUDIT_STORE || undefined);
  return value === undefined || value === 'file';
}

/**
 * A trail not in the directory: say which directory, what named it, and how to point at the worker's
 * (the one its --audit-dir / $WAVEGATE_AUDIT_DIR names, or `<state dir>/audit` for `wavegate dev`).
 */
function directoryHint(where: AuditLocation): string {
  return `looked in ${where.auditDir} (${where.dirFrom}); if the worker keeps its trails elsewhere, give its directory with --audit-dir <dir> or $WAVEGATE_AUDIT_DIR (the worker's own --audit-dir / $WAVEGATE_AUDIT_DIR; <state dir>/audit for \`wavegate dev --state-dir\`)`;
}

function withDirectoryHint(err: unknown, opts: AuditFlags, where: AuditLocation): unknown {
  if (!(err instanceof WavegateError && err.code === 'NOT_FOUND' && readsDirectory(opts))) return err;
  return new WavegateError('NOT_FOUND', `${err.message}; ${directoryHint(where)}`, err.details);
}

/** A trail as the store holds it, for `--verify`: `--run` also names the current chain when that run wrote it. */
export async function readChain(
  id: string,
  opts: AuditFlags,
): Promise<{ segments: AuditSegment[]; location: string; checkpoints: KeptCheckpoints }> {
  try {
    const { segments, location, checkpoints } = await readAuditTrail({
      store: opts.auditStore,
      auditDir: opts.auditDir,
      rolloutId: id,
      runId: opts.run,
    });
    return { segments, location, checkpoints };
  } catch (err) {
    if (!(opts.run && err instanceof WavegateError && err.code === 'NOT_FOUND')) throw err;
    // The file store keeps a run's chain under its run id only once a later run moved it aside.
    const current = await readAuditTrail({ store: opts.auditStore, auditDir: opts.auditDir, rolloutId: id }).catch(
      () => undefined,
    );
    if (current && chainRunOf(current.segments) === opts.run)
      return { segments: current.segments, location: current.location, checkpoints: current.checkpoints };
    throw err;
  }
}

// ---- linked trails: a rollout's chain links each slice's own trail ----

function isObject(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

/**
 * The records of a trail that its verdict vouches for, in order: in each segment those before its
 * problem and, in a segment an override continued from, those up to the override's `lastGood`; in a
 * segment that does not start with an override, none. Only these records' links are followed.
 */
export function* verifiedRecords(segments: AuditSegment[], verdict: TrailVerdict): Generator<AuditRecord> {
  for (const [i, report] of verdict.segments.entries()) {
    if (verdict.failure?.problem === 'no-override' && verdict.failure.segment === report.name) return;
    let limit = report.problem ? report.problem.seq : Number.POSITIVE_INFINITY;
    const next = verdict.segments[i + 1]?.override;
    if (next) limit = Math.min(limit, next.lastGood.seq + 1);
    for (const record of parseAuditLog(segments[i]!.text).records) {
      if (!(typeof record.seq === 'number' && record.seq < limit)) break;
      yield record;
    }
  }
}

/** Why a linked trail failed: the chain's own problems (as a rollout's), or the link's. */
export type LinkProblem =
  | AuditProblem
  | 'no-override'
  | 'missing'
  | 'past-head'
  | 'bad-link'
  | 'linked-twice'
  | 'too-deep';

/** One linked trail as verified (no records: a verification holds one trail's records at a time). */
export interface LinkedTrailReport {
  /** The trail that holds the linking record (the rollout id, or a linked trail's id), and its seq. */
  from: string;
  seq: number;
  trail: string;
  /** The end the link pins (null for a bad link). */
  head: AuditHead | null;
  /** What the linking record says: the slice's devices and counts. */
  devices: number | null;
  counts: Record<string, number> | null;
  ok: boolean;
  /** Records in the linked trail, and device entries in its records' `evidence.devices` lists. */
  records: number;
  deviceRecords: number;
  /** Set on a failure: what is wrong, at which seq of the linked trail (0 when not one record), and a message naming it all. */
  problem?: LinkProblem;
  problemSeq?: number;
  message: string;
  /** The linked trail's segments, when an operator's override started more than one. */
  segments?: SegmentReport[];
}

export interface LinkedTrailsVerdict {
  /** Every linked trail verified, each ending exactly at the head its link pins. */
  ok: boolean;
  /** Links followed, and how many failed. */
  trails: number;
  failed: number;
  /** Records and device entries in the trails that verified. */
  records: number;
  deviceRecords: number;
  /** One per link, in the order the links appear (a linked trail's own links after it). */
  results: LinkedTrailReport[];
  /** What was seen but is not a failure (a slice whose device entries differ from the count its link says). */
  notes: string[];
}

export interface LinkedTrailsOptions {
  /** The store (as `--audit-store`) and the file store's directory. */
  store?: string;
  auditDir: string;
  /** The audit key: every record of every linked trail must carry its MAC. */
  key?: Uint8Array;
  /** Trails read and verified at once (default 4). */
  concurrency?: number;
  /** Links inside linked trails are followed this deep (default 3: a slice's trail may link its own). */
  maxDepth?: number;
}

interface PendingLink {
  order: number;
  depth: number;
  from: string;
  seq: number;
  link: TrailLink | { trail: string; bad: string };
}

function deviceEntries(record: AuditRecord): number {
  const evidence = (record as { evidence?: unknown }).evidence;
  return isObject(evidence) && Array.isArray(evidence.devices) ? evidence.devices.length : 0;
}

const short = (hash: string) => `${hash.slice(0, 12)}…`;

/**
 * Verify every trail a verified chain links (linkOf), in the same store: each must exist, verify on its
 * own exactly as a rollout's chain does (verifyAuditSegments: the hash chain, segments and overrides,
 * the MAC of every record with a key) and end exactly at the head its link pins (seq and hash). A
 * trail linked twice, a link without a head and links nested deeper than `maxDepth` fail too. Trails
 * are read `concurrency` at a time and let go once verified: only links and per-trail results are
 * kept. A store that cannot be read is thrown (UNAVAILABLE, …), as for the rollout's own chain.
 */
export async function verifyLinkedTrails(
  from: string,
  segments: AuditSegment[],
  verdict: TrailVerdict,
  opts: LinkedTrailsOptions,
): Promise<LinkedTrailsVerdict> {
  const queue: PendingLink[] = [];
  let order = 0;
  const walk: LinkWalk = {
    maxDepth: opts.maxDepth ?? 3,
    ...(opts.key ? { key: opts.key } : {}),
    linkedBy: new Map(),
    notes: [],
    enqueue: (trailId, segs, v, depth) => {
      for (const record of verifiedRecords(segs, v)) {
        const link = linkOf(record);
        if (link) queue.push({ order: order++, depth, from: trailId, seq: record.seq, link });
      }
    },
  };
  walk.enqueue(from, segments, verdict, 1);
  const results: LinkedTrailReport[] = [];
  const { notes } = walk;
  if (queue.length === 0) return { ok: true, trails: 0, failed: 0, records: 0, deviceRecords: 0, results, notes };
  const orders = new Map<LinkedTrailReport, number>();
  await withAuditReader({ store: opts.store, auditDir: opts.auditDir }, (reader) =>
    drainQueue(queue, Math.max(1, opts.concurrency ?? 4), async (item) => {
      const report = await checkLink(reader, item, walk);
      orders.set(report, item.order);
      results.push(report);
    }),
  );
  results.sort((a, b) => orders.get(a)! - orders.get(b)!);
  notes.sort();
  const good = results.filter((r) => r.ok);
  return {
    ok: good.length === results.length,
    trails: results.length,
    failed: results.length - good.length,
    records: good.reduce((n, r) => n + r.records, 0),
    deviceRecords: good.reduce((n, r) => n + r.deviceRecords, 0),
    results,
    notes,
  };
}

/** What the links followed so far share: how deep they go, the key, the trails linked already, the notes. */
interface LinkWalk {
  maxDepth: number;
  key?: Uint8Array;
  /** Each trail linked so far, by which record of which trail. */
  linkedBy: Map<string, { from: string; seq: number }>;
  notes: string[];
  /** Queues the links of a verified trail's records, `depth` links deep. */
  enqueue: (trailId: string, segs: AuditSegment[], v: TrailVerdict, depth: number) => void;
}

/**
 * `check` over the queue's items, `width` at a time, workers starting as items join it (a trail's own links
 * join once it is verified). The first error thrown stops the walk and is thrown once the running ones end.
 */
async function drainQueue<T>(queue: T[], width: number, check: (item: T) => Promise<void>): Promise<void> {
  let thrown: unknown;
  let failedOnce = false;
  const worker = async () => {
    while (!failedOnce && queue.length > 0) {
      const item = queue.shift()!;
      try {
        await check(item);
      } catch (err) {
        failedOnce = true;
        thrown ??= err;
      }
    }
  };
  const running = new Set<Promise<void>>();
  while (!failedOnce && (queue.length > 0 || running.size > 0)) {
    while (running.size < width && queue.length > 0) {
      const p: Promise<void> = worker().finally(() => running.delete(p));
      running.add(p);
    }
    if (running.size > 0) await Promise.race(running);
  }
  await Promise.all(running);
  if (thrown !== undefined) throw thrown;
}

/** One link's report: the trail it names read and verified against the head it pins (its own links queued). */
async function checkLink(reader: AuditTrailReader, item: PendingLink, walk: LinkWalk): Promise<LinkedTrailReport> {
  const { link, from: holder, seq } = item;
  const where = `record ${seq} of ${holder} links slice trail ${link.trail}`;
  const base = {
    from: holder,
    seq,
    trail: link.trail,
    head: 'bad' in link ? null : link.head,
    devices: 'bad' in link ? null : link.devices,
    counts: 'bad' in link ? null : link.counts,
    records: 0,
    deviceRecords: 0,
  };
  const failed = (
    problem: LinkProblem,
    problemSeq: number,
    message: string,
    extra: Partial<LinkedTrailReport> = {},
  ): LinkedTrailReport => ({ ...base, ...extra, ok: false, problem, problemSeq, message });
  if ('bad' in link) return failed('bad-link', 0, `${where}, but ${link.bad}`);
  const earlier = walk.linkedBy.get(link.trail);
  if (earlier)
    return failed(
      'linked-twice',
      0,
      `${where}, which record ${earlier.seq} of ${earlier.from} links already: each slice's trail is linked once`,
    );
  walk.linkedBy.set(link.trail, { from: holder, seq });
  if (item.depth > walk.maxDepth)
    return failed('too-deep', 0, `${where}, nested ${item.depth} links deep: links are followed ${walk.maxDepth} deep`);
  let segs: AuditSegment[];
  try {
    segs = await reader.segments(link.trail);
  } catch (err) {
    if (!(err instanceof WavegateError && err.code === 'NOT_FOUND')) throw err;
    if (link.head === null)
      return { ...base, ok: true, message: `${where}: no record, as linked (the slice wrote none)` };
    return failed(
      'missing',
      0,
      `${where}, which ${reader.location} does not have (the link pins its end at record ${link.head.seq}, hash ${short(link.head.hash)}): the trail was deleted or is kept in another store`,
    );
  }
  if (link.head === null) {
    const count = verifyAuditSegments(segs).count;
    return failed(
      'past-head',
      1,
      `${where} with no head (the slice wrote no record), but ${reader.location} holds ${count} record${count === 1 ? '' : 's'} of it`,
      { records: count },
    );
  }
  const { head } = link;
  const v = verifyAuditSegments(segs, { head, ...(walk.key ? { key: walk.key } : {}) });
  const extra: Partial<LinkedTrailReport> = segs.length > 1 ? { segments: v.segments } : {};
  if (!v.ok) {
    const f = v.failure!;
    return failed(f.problem, f.seq, `${where}: ${f.problem} at seq ${f.seq}: ${f.message}`, {
      ...extra,
      records: v.count,
    });
  }
  if (!v.head || v.head.seq !== head.seq || v.head.hash !== head.hash) {
    const end = v.head ? `record ${v.head.seq} (hash ${short(v.head.hash)})` : 'no record';
    return failed(
      'past-head',
      head.seq + 1,
      `${where}, which goes on past the end its link pins (record ${head.seq}, hash ${short(head.hash)}): it ends at ${end}; records ${head.seq + 1}–${v.head?.seq ?? '?'} were written after the slice reported its end`,
      { ...extra, records: v.count },
    );
  }
  let deviceRecords = 0;
  for (const record of verifiedRecords(segs, v)) deviceRecords += deviceEntries(record);
  if (link.devices !== null && deviceRecords !== link.devices)
    walk.notes.push(
      `slice trail ${link.trail} holds ${number(deviceRecords)} device entries; record ${seq} of ${holder} says ${number(link.devices)} devices`,
    );
  walk.enqueue(link.trail, segs, v, item.depth + 1);
  return {
    ...base,
    ...extra,
    ok: true,
    records: v.count,
    deviceRecords,
    message: `${where}: ${v.count} records, chain intact, ending at record ${head.seq} as linked`,
  };
}

/** Where a store is, fit to print: the directory, or the database URL with no secret in it. */
function storeLocation(opts: AuditFlags): string {
  const value = opts.auditStore ?? (process.env.WAVEGATE_AUDIT_STORE || undefined);
  if (value === undefined || value === 'file') return `the audit directory ${opts.auditDir}`;
  try {
    return `the audit store ${redactStoreUrl(value)}`;
  } catch {
    return 'the audit store';
  }
}

/**
 * No trail in the store. With a head acknowledged for it (the workflow's, or `--head`) the trail was
 * deleted: exit 1 naming what is missing. With neither a trail nor a rollout: NOT_FOUND (exit 2). When
 * the head could not be asked, the store's NOT_FOUND stands, saying what was not checked (`--strict`: exit 1).
 */
async function verifyMissing(
  id: string,
  opts: AuditFlags,
  where: AuditLocation,
  notFound: WavegateError,
  offlineHead: AuditHead | undefined,
): Promise<number> {
  const location = storeLocation(opts);
  const found: WorkflowHead = offlineHead
    ? {
        head: offlineHead,
        source: `--head ${offlineHead.seq}:${offlineHead.hash.slice(0, 12)}…`,
        runId: opts.run ?? '-',
        state: 'given',
      }
    : await workflowAuditHead(opts, id, opts.run);
  if (found.head) {
    const message = missingTrailMessage(found.head, found.source, location);
    const label = `audit ${id}${opts.run ? ` run ${opts.run}` : ''}`;
    // A directory that is not the worker's reads the same as a deleted trail: say where it looked.
    const hint = readsDirectory(opts) ? directoryHint(where) : null;
    if (opts.json)
      console.log(
        JSON.stringify(
          {
            ok: false,
            problem: 'deleted',
            seq: 1,
            message,
            count: 0,
            head: null,
            headChecked: found.source,
            headRun: found.runId,
            missing: found.head,
            ...(hint ? { looked: hint } : {}),
          },
          null,
          2,
        ),
      );
    else {
      console.log(`${label}: ${message}`);
      if (hint) console.log(`trail: ${hint}`);
    }
    return EXIT_FAILED;
  }
  if (found.kind === 'no-rollout')
    throw new WavegateError('NOT_FOUND', `${notFound.message}, and ${found.why}: no such rollout`, notFound.details);
  if (found.kind === 'no-head')
    throw new WavegateError('NOT_FOUND', `${notFound.message}; ${found.why}`, notFound.details);
  const unchecked = `${notFound.message}; head NOT checked: ${found.why}; a trail deleted wholesale cannot be ruled out (give --head <seq>:<hash>, or reach the rollout's Temporal server)`;
  if (opts.strict) {
    process.stderr.write(`wavegate: --strict: ${unchecked}\n`);
    return EXIT_FAILED;
  }
  throw new WavegateError('NOT_FOUND', unchecked, notFound.details);
}

async function verify(id: string, opts: AuditFlags, where: AuditLocation): Promise<number> {
  const key = where.keyFile === undefined ? undefined : readAuditKey(where.keyFile, where.keyFrom);
  const offlineHead = opts.head !== undefined ? parseHead(opts.head) : undefined;
  const checkpointKeys = checkpointKeysOf(opts); // a bad key: exit 2 before anything is read
  let chain: Awaited<ReturnType<typeof readChain>>;
  try {
    chain = await readChain(id, opts);
  } catch (err) {
    if (err instanceof WavegateError && err.code === 'NOT_FOUND')
      return verifyMissing(id, opts, where, err, offlineHead);
    throw err;
  }
  const { segments } = chain;
  // The run that wrote this chain: its head is the one to compare with, whichever run is the latest.
  const chainRun = opts.run ?? chainRunOf(segments);
  let head: AuditHead | undefined;
  let compared: { checked: string | null; why: string | null };
  let headRun: string | null = null;
  let latestNote: string | null = null;
  let latestFailure: string | null = null;
  if (offlineHead) {
    head = offlineHead;
    compared = { checked: `--head ${head.seq}:${head.hash.slice(0, 12)}…`, why: null };
  } else {
    const found = await withWorkflowHeads(opts, id, async (heads) => {
      const own = await heads.headOf(chainRun);
      // The current chain (no --run) is also held against the latest run: one that is not this chain's
      // run and holds a head wrote a trail this store does not have as its current one.
      if (!opts.run && chainRun && (own.head || own.kind !== 'unreachable')) {
        const latest = await heads.headOf(undefined);
        // No rollout of that id at all: say so, not that one run of it is missing.
        if (!own.head && own.kind === 'no-rollout' && !latest.head && latest.kind === 'no-rollout') return latest;
        if (latest.runId && latest.runId !== chainRun) {
          latestFailure = latestRunMismatch(chainRun, { runId: latest.runId, head: latest.head }, chain.location);
          if (!latestFailure)
            latestNote = `the rollout's latest run is ${latest.runId} (${(latest.state ?? 'unknown').toLowerCase()}), another run than this chain's: ${latest.head ? '' : `${latest.why}; `}this chain is compared with its own run's head`;
        }
      }
      return own;
    });
    head = found.head ?? undefined;
    headRun = found.runId ?? null;
    compared = found.head
      ? {
          checked: `${found.source}: record ${found.head.seq} ${found.head.hash.slice(0, 12)}…${chainRun && !opts.run ? ', the run that wrote this chain' : ''}`,
          why: null,
        }
      : { checked: null, why: found.why };
  }
  const verdict = verifyAuditSegments(segments, { head, key });
  // The trails its records link (a slice's own trail), each verified the same way, in the same store.
  const linked = await verifyLinkedTrails(id, segments, verdict, {
    store: opts.auditStore,
    auditDir: opts.auditDir,
    ...(key ? { key } : {}),
  });
  // The checkpoints kept beside the chain (a worker with --checkpoint-key), against the trail as read.
  const checkpoints = checkKeptCheckpoints(id, segments, chain.checkpoints, checkpointKeys);
  const label = `audit ${id}${opts.run ? ` run ${opts.run}` : ''}`;
  const ok = verdict.ok && !latestFailure && linked.ok && (checkpoints?.ok ?? true);
  if (opts.json) {
    const { failure } = verdict;
    const linkFailure = linked.results.find((r) => !r.ok);
    console.log(
      JSON.stringify(
        {
          ...verdict,
          ok,
          ...(failure
            ? { seq: failure.seq, problem: failure.problem, message: failure.message }
            : latestFailure
              ? { problem: 'deleted', message: latestFailure }
              : linkFailure
                ? { seq: linkFailure.seq, problem: 'linked-trail', message: linkFailure.message }
                : checkpoints && !checkpoints.ok
                  ? { problem: 'checkpoint', message: checkpointLines(checkpoints, checkpointKeys)[0] }
                  : {}),
          chainRun: chainRun ?? null,
          headRun,
          headChecked: compared.checked,
          headNotChecked: compared.why,
          latestRun: latestFailure ?? latestNote,
          macChecked: !!key,
          auditKeyFile: where.keyFile ?? null,
          linked,
          checkpoints,
        },
        null,
        2,
      ),
    );
  } else {
    for (const line of verifyReport(
      label,
      verdict,
      compared,
      { file: where.keyFile, from: where.keyFrom, lookedFor: where.keyLookedFor },
      linked,
    ))
      console.log(line);
    if (latestNote) console.log(`latest run: ${latestNote}`);
    if (latestFailure) console.log(`latest run: ${latestFailure}`);
    for (const line of checkpointLines(checkpoints, checkpointKeys)) console.log(line);
  }
  if (!ok) return EXIT_FAILED;
  if (opts.strict && (!compared.checked || !key)) {
    process.stderr.write(
      `wavegate: --strict: ${[!compared.checked && 'the head', !key && 'the MAC'].filter(Boolean).join(' and ')} could not be checked${key ? '' : ` (MAC: ${macNotChecked(where.keyLookedFor)})`}\n`,
    );
    return EXIT_FAILED;
  }
  return 0;
}

/** A device chunk's states, counted: `100 devices: applied 99, failed 1`. */
function deviceSummary(record: AuditRecord): string | null {
  const evidence = (record as { evidence?: unknown }).evidence;
  if (!isObject(evidence) || !Array.isArray(evidence.devices)) return null;
  const states = new Map<string, number>();
  for (const d of evidence.devices) {
    const state = isObject(d) && typeof d.state === 'string' ? d.state : '?';
    states.set(state, (states.get(state) ?? 0) + 1);
  }
  const n = evidence.devices.length;
  return `${number(n)} device${n === 1 ? '' : 's'}${states.size ? `: ${[...states].map(([k, v]) => `${k} ${number(v)}`).join(', ')}` : ''}`;
}

/** The line under a linking record: the trail it links, the slice's devices and counts, the end it pins. */
function linkLine(link: TrailLink | { trail: string; bad: string }): string {
  if ('bad' in link) return `↳ links slice trail ${link.trail} with no usable head (run with --verify)`;
  const devices = link.devices === null ? '' : ` ${number(link.devices)} device${link.devices === 1 ? '' : 's'}`;
  const counts = link.counts ? ` (${countsSummary(link.counts)})` : '';
  const end = link.head ? `ends at record ${link.head.seq} (${short(link.head.hash)})` : 'no record written';
  return `↳ slice trail ${link.trail}:${devices}${counts}, ${end}`;
}

/**
 * `wavegate audit <id>`: the records as a table (a linking record with the slice trail it links under
 * it), or `--json` the records as stored. `--with-slices`: each linked trail's records after the record
 * that links it, read one trail at a time; with `--json` the shape is `{ rolloutId, records, slices:
 * [{ seq, trail, head, devices, counts, records }] }` (docs/cli.md), a trail that cannot be listed
 * carrying `error: { code, message }` and `records: null`.
 */
async function list(id: string, opts: AuditFlags): Promise<number | undefined> {
  const { segments, earlierRuns } = await readAuditTrail({
    store: opts.auditStore,
    auditDir: opts.auditDir,
    rolloutId: id,
    runId: opts.run,
  });
  const parsed = segments.map((segment) => ({ segment, ...parseAuditLog(segment.text) }));
  const records = parsed.flatMap((p) => p.records);
  let failed = false;
  const unreadable = (name: string, p: { unreadable: { line: number; torn: boolean } | null }, setAside = '') => {
    if (p.unreadable)
      process.stderr.write(
        `wavegate: ${name} line ${p.unreadable.line} ${p.unreadable.torn ? 'is cut off mid-record' : 'is not a JSON audit record'}${setAside}; run with --verify\n`,
      );
  };
  /** A linked trail's records, or why it has none to list (reported, and the exit is 1). */
  const readLinked = async (
    reader: AuditTrailReader,
    link: TrailLink | { trail: string; bad: string },
    seq: number,
  ) => {
    if ('bad' in link) {
      failed = true;
      return { error: { code: 'INVALID_INPUT', message: `record ${seq} ${link.bad}` } };
    }
    try {
      const segs = await reader.segments(link.trail);
      const logs = segs.map((segment) => ({ segment, ...parseAuditLog(segment.text) }));
      for (const [i, p] of logs.entries()) {
        unreadable(p.segment.name, p, i < logs.length - 1 ? ' (set aside by the override in the next segment)' : '');
        if (p.unreadable && i === logs.length - 1) failed = true;
      }
      return { records: logs.flatMap((p) => p.records) };
    } catch (err) {
      if (!(err instanceof WavegateError && err.code === 'NOT_FOUND')) throw err;
      if (link.head === null) return { records: [] }; // the slice wrote none, as its link says
      failed = true;
      const message = `record ${seq} links slice trail ${link.trail}, which ${reader.location} does not have; run with --verify`;
      process.stderr.write(`wavegate: ${message}\n`);
      return { error: { code: err.code, message } };
    }
  };
  const withSlices = async (body: (reader: AuditTrailReader | undefined) => Promise<void>) =>
    opts.withSlices ? withAuditReader({ store: opts.auditStore, auditDir: opts.auditDir }, body) : body(undefined);

  await withSlices(async (reader) => {
    if (opts.json) {
      if (!reader) {
        console.log(JSON.stringify(records, null, 2));
        return;
      }
      // Streamed: one linked trail's records at a time.
      const out = (text: string) => process.stdout.write(text);
      out(`{\n"rolloutId": ${JSON.stringify(id)},\n"records": ${JSON.stringify(records, null, 2)},\n"slices": [`);
      let first = true;
      for (const record of records) {
        const link = linkOf(record);
        if (!link) continue;
        const listed = await readLinked(reader, link, record.seq);
        const entry =
          'bad' in link
            ? { seq: record.seq, trail: link.trail, head: null, devices: null, counts: null }
            : {
                seq: record.seq,
                trail: link.trail,
                head: link.head,
                mode: link.mode,
                devices: link.devices,
                counts: link.counts,
              };
        out(
          `${first ? '\n' : ',\n'}${JSON.stringify({ ...entry, records: listed.records ?? null, ...(listed.error ? { error: listed.error } : {}) })}`,
        );
        first = false;
      }
      out(`${first ? '' : '\n'}]\n}\n`);
      return;
    }
    const links = records.filter((r) => linkOf(r) !== null).length;
    console.log(
      `audit ${id}: ${records.length} records in ${segments.map((s) => s.name).join(', ')}${links ? `; ${links} record${links === 1 ? ' links' : 's link'} a slice trail${reader ? '' : ' (--with-slices lists their records)'}` : ''}`,
    );
    const lines = table(records);
    console.log(lines[0]);
    for (const [i, record] of records.entries()) {
      console.log(lines[i + 1]);
      const link = linkOf(record);
      if (!link) continue;
      console.log(`    ${linkLine(link)}`);
      if (!reader) continue;
      const listed = await readLinked(reader, link, record.seq);
      if (listed.error) {
        console.log(`      ${listed.error.message}`);
        continue;
      }
      const nested = listed.records ?? [];
      const rows = table(
        nested.map((r) => (r.reason === null && deviceSummary(r) ? { ...r, reason: deviceSummary(r) } : r)),
        72,
      );
      for (const line of rows.flatMap((row) => row.split('\n'))) console.log(`      ${line}`);
    }
    if (earlierRuns.length) console.log(`earlier executions (use --run): ${earlierRuns.join(', ')}`);
    // Why the rollout ended where it did: the deciding gate's verdict, as the board shows it.
    for (const line of gateVerdictLines(undefined, { records }, id)) console.log(line);
  });
  for (const [i, p] of parsed.entries())
    unreadable(p.segment.name, p, i < parsed.length - 1 ? ' (set aside by the override in the next segment)' : '');
  if (parsed.at(-1)?.unreadable || failed) return EXIT_FAILED;
  return undefined;
}

export function register(program: Command): void {
  const audit = withTemporalOptions(
    program
      .command('audit <id>')
      .description(
        'Show the audit trail of a rollout, or check it with --verify: the hash chain, every segment, the head the workflow holds, and with a key the MACs (exit 1 on the first problem)',
      )
      .option(
        '--verify',
        'check the trail: any edited, dropped, reordered or inserted record, a cut-off tail or a resealed chain fails with its seq; so does every slice trail it links',
      )
      .option('--json', 'print the records (or with --verify the verdict) as JSON')
      .option(
        '--with-slices',
        "list each linked slice trail's records after the record that links it (with --json: { rolloutId, records, slices })",
      )
      .option(
        '--audit-dir <dir>',
        `where the audit files are: the worker's --audit-dir (default $WAVEGATE_AUDIT_DIR, as the worker reads it, else ${DEFAULT_AUDIT_DIR}, the worker's default; <state dir>/audit for \`wavegate dev\`)`,
      )
      .option('--run <runId>', 'an earlier execution of a re-used rollout id (its chain was moved aside)')
      .option(
        '--head <seq:hash>',
        "with --verify, offline: the last record the writer acknowledged (the status's auditHead), instead of asking the workflow",
      )
      .option(
        '--audit-key-file <path>',
        "with --verify: the worker's audit key, to check every record's MAC (default $WAVEGATE_AUDIT_KEY_FILE, else audit.key beside the audit directory, where `wavegate dev` keeps its key)",
      )
      .option(
        '--audit-store <url>',
        'read the trail from this store instead of --audit-dir: postgres://user@host:port/db (default $WAVEGATE_AUDIT_STORE; password by $PGPASSWORD, $WAVEGATE_AUDIT_STORE_PASSWORD_FILE or ~/.pgpass)',
      )
      .option('--strict', 'with --verify: also exit 1 when the head or the MAC could not be checked')
      .option(
        '--log-key <key>',
        "with --verify: the worker's checkpoint key, to check each kept checkpoint's signature: a pin file (<key>.pub.yaml), ed25519:<base64> or a C2SP verifier key",
      )
      .option(
        '--witness-key <key>',
        "with --verify: the witness's key, to check each kept checkpoint's cosignature (an uncosigned one fails, named by its size): a pin file, ed25519:<base64> or a C2SP verifier key",
      ),
  ).action(
    action(async (id: string, opts: AuditFlags) => {
      if (opts.head !== undefined) parseHead(opts.head); // bad input refused before anything is read
      // The worker's configuration (flag, environment, default), never the working directory: absolute from here on.
      const where = resolveAuditLocation(opts, { besideKey: readsDirectory(opts) });
      opts.auditDir = where.auditDir;
      if (opts.verify)
        return verify(id, opts, where).catch((err: unknown) => Promise.reject(withDirectoryHint(err, opts, where)));
      return list(id, opts).catch((err: unknown) => Promise.reject(withDirectoryHint(err, opts, where)));
    }),
  );
  // `audit export <id> --bundle` and `audit verify --receipts`: receipts checked offline (cli/audit-bundle.ts).
  registerBundleCommands(audit);
}
