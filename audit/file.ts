import { createHash, randomBytes } from 'node:crypto';
import {
  type Stats,
  chmodSync,
  closeSync,
  existsSync,
  fsyncSync,
  ftruncateSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  renameSync,
  statSync,
  unlinkSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import { readFlagFile } from '../intake/files';
import { hostname } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { ApplicationFailure } from '@temporalio/common';
import {
  auditContentKey,
  auditContentOfEvent,
  GENESIS_HASH,
  macRecord,
  parseAuditLog,
  sealRecord,
  serializeAuditRecord,
  verifyAuditChain,
  type AuditEvent,
  type AuditHead,
  type AuditRecord,
  type AuditSegment,
} from '../core/audit';
import { WavegateError } from '../core/errors';
import { recordAuditWriteFailure } from '../core/metrics';
import { nextAppend } from './append-rule';
import { activityMeter } from './activity-meter';
import { STATE_DIR } from '../intake/package-layout';
import type { AuditHealth, AuditHealthInput, AuditStore } from './types';

/**
 * The audit sink (docs/architecture.md, "Audit"): one append-only JSONL file per rollout, one sealed record per line.
 *
 * File names. A rollout id (`rollout:demo`) is mapped to a file name by percent-encoding every character
 * outside `[a-z0-9._-]` as its UTF-8 bytes (`%3A` for `:`, `%2F` for `/`, `%25` for `%`), upper-case
 * letters included so that two ids differing only in case stay two files on case-insensitive disks, and
 * a leading `.` so no id names a hidden file or `..`. `decodeURIComponent` reverses it. `rollout:demo`
 * → `rollout%3Ademo.jsonl`. A slice's trail (issue 26) is named by the slice's workflow id the same way
 * (`rollout:demo:20261205-102300/abcd1234/apply-bulk-12` → `rollout%3Ademo%3A20261205-102300%2Fabcd1234%2Fapply-bulk-12.jsonl`);
 * an id whose encoding passes 180 characters is named by a digest instead (auditFileStem).
 *
 * Re-used ids. `rollout:<profile>` is the workflow id of every rollout of that profile, one after another.
 * The current file holds the latest execution; when a seq-1 record of another run arrives, the finished
 * chain is moved aside to `<name>@<runId of its first record>.jsonl` (`@` never occurs in an encoded id)
 * and a new chain starts (with its later segments, `<name>@<run>+<n>.jsonl`). Continue-as-new keeps the
 * seq going, so its later run ids do not start a file.
 *
 * A trail that is not whole (a line that is not a record, a broken chain, a MAC that is not the key's, a
 * file that cannot be read) is never written to again: every append is `AuditCorrupt` until someone
 * repairs the file, or an operator's `audit.override` starts segment n+1 from the last good head. The
 * broken segment stays as it is. Files are 0600 and the directory 0700; looser modes are fixed and said.
 */
export const DEFAULT_AUDIT_DIR = join(STATE_DIR, 'audit');

/**
 * The key the dev stack keeps beside its audit directory: `wavegate dev` writes `<state dir>/audit` and
 * MACs it with `<state dir>/audit.key` (workers/dev-stack.ts), so the key of a dev trail is found from
 * the directory alone.
 */
export function auditKeyBesideDir(auditDir: string): string {
  return join(dirname(resolve(auditDir)), 'audit.key');
}

/** Where a reader of the audit looks, each path absolute, and what named it (for messages). */
export interface AuditLocation {
  auditDir: string;
  /** `--audit-dir`, `$WAVEGATE_AUDIT_DIR` or `the default`. */
  dirFrom: string;
  keyFile?: string;
  keyFrom?: string;
  /** Where a key was looked for when none was found, fit to print. */
  keyLookedFor: string;
}

/**
 * The audit directory and key a worker writes with, read from the same configuration it reads (flag,
 * then `$WAVEGATE_AUDIT_DIR` / `$WAVEGATE_AUDIT_KEY_FILE`, then DEFAULT_AUDIT_DIR), never from the
 * working directory: the default is absolute, and a relative value is resolved once, here, so that it
 * is printed as the absolute path it names. Without a configured key, the dev stack's key beside the
 * directory is taken when it exists (`besideKey: false` for a store that is not the directory).
 */
export function resolveAuditLocation(
  flags: { auditDir?: string; auditKeyFile?: string },
  opts: { env?: NodeJS.ProcessEnv; besideKey?: boolean } = {},
): AuditLocation {
  const env = opts.env ?? process.env;
  const dirFlag = flags.auditDir ?? undefined;
  const dirEnv = env.WAVEGATE_AUDIT_DIR || undefined;
  const auditDir = resolve(dirFlag ?? dirEnv ?? DEFAULT_AUDIT_DIR);
  const dirFrom = dirFlag !== undefined ? '--audit-dir' : dirEnv !== undefined ? '$WAVEGATE_AUDIT_DIR' : 'the default';
  if (flags.auditKeyFile !== undefined)
    return {
      auditDir,
      dirFrom,
      keyFile: resolve(flags.auditKeyFile),
      keyFrom: '--audit-key-file',
      keyLookedFor: '--audit-key-file',
    };
  const keyEnv = env.WAVEGATE_AUDIT_KEY_FILE || undefined;
  if (keyEnv !== undefined)
    return {
      auditDir,
      dirFrom,
      keyFile: resolve(keyEnv),
      keyFrom: '$WAVEGATE_AUDIT_KEY_FILE',
      keyLookedFor: '$WAVEGATE_AUDIT_KEY_FILE',
    };
  const beside = auditKeyBesideDir(auditDir);
  if (opts.besideKey !== false && existsSync(beside))
    return {
      auditDir,
      dirFrom,
      keyFile: beside,
      keyFrom: "the dev stack's key beside the audit directory",
      keyLookedFor: beside,
    };
  const keyLookedFor = `no --audit-key-file, no $WAVEGATE_AUDIT_KEY_FILE${opts.besideKey === false ? '' : `, no ${beside} (where \`wavegate dev\` keeps its key beside ${auditDir})`}`;
  return { auditDir, dirFrom, keyLookedFor };
}

/** A lock older than this whose holder cannot be checked is taken to be left by a crashed writer. */
const STALE_LOCK_MS = 30_000;
const LOCK_WAIT_MS = 2_000;

/** An encoded id longer than this is stored under a digest form (auditFileStem): room for `@<runId>+<n>.jsonl.lock`. */
export const MAX_AUDIT_STEM = 180;
/** Ids longer than this are refused (Temporal's own default limit on a workflow id). */
export const MAX_AUDIT_ID = 1000;
/** How much of the encoded id a digest-form stem keeps in front, for people listing the directory. */
const DIGEST_STEM_PREFIX = 100;

function encodeAuditId(rolloutId: string): string {
  let out = '';
  for (const ch of rolloutId) {
    if (/[a-z0-9_-]/.test(ch) || (ch === '.' && out.length > 0)) out += ch;
    else for (const byte of new TextEncoder().encode(ch)) out += `%${byte.toString(16).toUpperCase().padStart(2, '0')}`;
  }
  return out;
}

/**
 * The file name (without `.jsonl`) of an id's trail: the id percent-encoded (see the comment at the top),
 * or, when that is longer than MAX_AUDIT_STEM characters (a slice's trail under a long profile and phase
 * name: `rollout:<profile>:<stamp>/<run8>/<mode>-<phase>-<k>`), its first DIGEST_STEM_PREFIX encoded
 * characters (never cutting a `%XX`), `~` and the SHA-256 hex of the id: at most 165 characters. `~`
 * never occurs in an encoded id, so a digest-form name never equals an encoded one, and every id of
 * MAX_AUDIT_STEM encoded characters or fewer keeps the name it always had.
 */
export function auditFileStem(rolloutId: string): string {
  if (typeof rolloutId !== 'string' || rolloutId.length === 0) {
    throw new WavegateError('INVALID_INPUT', `rollout id ${JSON.stringify(rolloutId)}: expected a non-empty string`);
  }
  if (rolloutId.length > MAX_AUDIT_ID)
    throw new WavegateError(
      'INVALID_INPUT',
      `rollout id "${rolloutId.slice(0, 40)}…": too long for an audit trail (${rolloutId.length} > ${MAX_AUDIT_ID} characters)`,
    );
  const out = encodeAuditId(rolloutId);
  if (out.length <= MAX_AUDIT_STEM) return out;
  let prefix = out.slice(0, DIGEST_STEM_PREFIX);
  const cut = prefix.lastIndexOf('%');
  if (cut > prefix.length - 3) prefix = prefix.slice(0, cut);
  return `${prefix}~${createHash('sha256').update(rolloutId, 'utf8').digest('hex')}`;
}

/**
 * The rollout id a file stem (without `.jsonl`, `@run` suffix removed) stands for. A digest-form stem
 * (`…~<sha256>`, an id too long to encode in a file name) is not reversible: its records name the id.
 */
export function rolloutIdOfStem(stem: string): string {
  if (stem.includes('~'))
    throw new WavegateError(
      'INVALID_INPUT',
      `audit file stem "${stem.slice(0, 40)}…" is a digest of a long id: read the rolloutId of its records`,
    );
  return decodeURIComponent(stem);
}

/**
 * One segment file of a rollout's chain: segment 1 is `<stem>.jsonl` (or `<stem>@<run>.jsonl` for an
 * earlier execution); a later segment, started only by an `audit.override`, is `<stem>+<n>.jsonl`
 * (`+` never occurs in an encoded id either).
 */
export function auditFilePath(auditDir: string, rolloutId: string, runId?: string, segment = 1): string {
  const base = runId === undefined ? auditFileStem(rolloutId) : `${auditFileStem(rolloutId)}@${auditFileStem(runId)}`;
  return join(auditDir, `${base}${segment > 1 ? `+${segment}` : ''}.jsonl`);
}

/** The segment numbers of a chain that exist on disk, ascending. */
export function auditSegmentNumbers(auditDir: string, rolloutId: string, runId?: string): number[] {
  if (!existsSync(auditDir)) return [];
  const base = basename(auditFilePath(auditDir, rolloutId, runId), '.jsonl');
  const numbers: number[] = [];
  for (const name of readdirSync(auditDir)) {
    if (name === `${base}.jsonl`) numbers.push(1);
    const match = name.startsWith(`${base}+`) ? /^\+([1-9]\d{0,8})\.jsonl$/.exec(name.slice(base.length)) : null;
    if (match && Number(match[1]) > 1) numbers.push(Number(match[1]));
  }
  return numbers.sort((a, b) => a - b);
}

/** Run ids of earlier executions of this rollout id whose chains were moved aside, oldest file first. */
export function archivedAuditRuns(auditDir: string, rolloutId: string): string[] {
  const prefix = `${auditFileStem(rolloutId)}@`;
  if (!existsSync(auditDir)) return [];
  return readdirSync(auditDir)
    .filter((name) => name.startsWith(prefix) && name.endsWith('.jsonl') && !name.slice(prefix.length).includes('+'))
    .map((name) => ({ name, mtime: statSync(join(auditDir, name)).mtimeMs }))
    .sort((a, b) => a.mtime - b.mtime)
    .map(({ name }) => decodeURIComponent(name.slice(prefix.length, -'.jsonl'.length)));
}

/** Every segment of a chain as stored, in order; NOT_FOUND naming the path when there is none. */
export function readAuditSegments(auditDir: string, rolloutId: string, runId?: string): AuditSegment[] {
  const numbers = auditSegmentNumbers(auditDir, rolloutId, runId);
  if (numbers.length === 0) {
    const path = auditFilePath(auditDir, rolloutId, runId);
    throw new WavegateError(
      'NOT_FOUND',
      `no audit trail for rollout "${rolloutId}"${runId ? ` run ${runId}` : ''} (looked for ${path})`,
      { path },
    );
  }
  return numbers.map((n) => {
    const path = auditFilePath(auditDir, rolloutId, runId, n);
    return { name: path, text: readFileSync(path, 'utf8') };
  });
}

/**
 * Every record of a rollout's trail, segment by segment. A line that is not a record is an error naming
 * it, except in a segment an override set aside (its readable records are kept, the rest is its problem).
 */
export function readAuditFile(auditDir: string, rolloutId: string, runId?: string): AuditRecord[] {
  const segments = readAuditSegments(auditDir, rolloutId, runId);
  return segments.flatMap((segment, i) => {
    const { records, unreadable } = parseAuditLog(segment.text);
    if (unreadable && i === segments.length - 1) {
      throw new WavegateError(
        'FAILED',
        `${segment.name} line ${unreadable.line}: ${unreadable.torn ? 'cut off mid-record' : 'not a JSON audit record'}`,
      );
    }
    return records;
  });
}

/**
 * The worker's audit MAC key, read by reference from a file holding at least 32 bytes as hex. The file
 * must be the owner's alone (like an ssh private key); the key itself is never printed. `source` names
 * where the path came from in refusals.
 */
export function readAuditKey(path: string, source = '--audit-key-file'): Uint8Array {
  let stat: Stats;
  try {
    stat = statSync(path);
  } catch (err) {
    throw new WavegateError(
      'INVALID_INPUT',
      `${source} ${JSON.stringify(path)}: cannot read it (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`,
    );
  }
  if (!stat.isFile()) throw new WavegateError('INVALID_INPUT', `${source} ${JSON.stringify(path)}: not a regular file`);
  if ((stat.mode & 0o077) !== 0) {
    throw new WavegateError(
      'INVALID_INPUT',
      `${source} ${JSON.stringify(path)}: readable by others (mode ${(stat.mode & 0o777).toString(8)}); chmod 600 it`,
    );
  }
  if (stat.size > 4096)
    throw new WavegateError(
      'INVALID_INPUT',
      `${source} ${JSON.stringify(path)}: ${stat.size} bytes; expected one line of hex (64–4096 characters)`,
    );
  // Read through an fstat of the opened file: a FIFO swapped in after the stat above is refused, not waited on.
  const hex = readFlagFile(source, path).toString('utf8').trim();
  if (!/^(?:[0-9a-fA-F]{2}){32,}$/.test(hex)) {
    throw new WavegateError(
      'INVALID_INPUT',
      `${source} ${JSON.stringify(path)}: expected at least 32 bytes as hex on one line (e.g. \`openssl rand -hex 32\`)`,
    );
  }
  return Uint8Array.from(Buffer.from(hex, 'hex'));
}

/** The dev stack's audit key: created (32 random bytes, mode 0600) on first use, kept across restarts. */
export function ensureAuditKeyFile(path: string): string {
  try {
    writeFileSync(path, `${randomBytes(32).toString('hex')}\n`, { mode: 0o600, flag: 'wx' });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
  }
  return path;
}

/** Audit files are the owner's alone: a looser mode found on disk is fixed, and said. */
function restrictMode(path: string, mode: number, log: (line: string) => void): void {
  let current: number;
  try {
    current = statSync(path).mode & 0o777;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw err;
  }
  if ((current & ~mode) === 0) return;
  chmodSync(path, mode);
  log(`audit: ${path} had mode ${current.toString(8)} (readable by others); set to ${mode.toString(8)}`);
}

function fsyncDir(dir: string): void {
  const fd = openSync(dir, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

function lockHolderIsGone(lockPath: string): boolean {
  try {
    const [pid, host] = readFileSync(lockPath, 'utf8').split(' ');
    if (host === hostname() && pid && /^\d+$/.test(pid)) {
      try {
        process.kill(Number(pid), 0);
        return false;
      } catch (err) {
        return (err as NodeJS.ErrnoException).code === 'ESRCH';
      }
    }
    return Date.now() - statSync(lockPath).mtimeMs > STALE_LOCK_MS;
  } catch {
    return false;
  }
}

/**
 * Serialize writers of one file across processes (two workers may both run an attempt of the same append
 * when the first overran its timeout) with an O_EXCL lock file. Inside one process the critical section
 * is synchronous, so it cannot interleave with itself.
 */
async function withFileLock<T>(path: string, fn: () => T): Promise<T> {
  const lockPath = `${path}.lock`;
  const deadline = Date.now() + LOCK_WAIT_MS;
  for (;;) {
    let fd: number;
    try {
      fd = openSync(lockPath, 'wx', 0o600);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      if (lockHolderIsGone(lockPath)) {
        try {
          unlinkSync(lockPath);
        } catch {
          // another writer cleared it first
        }
        continue;
      }
      if (Date.now() > deadline) {
        throw ApplicationFailure.create({
          type: 'AuditBusy',
          message: `${lockPath} is held by another writer; retrying`,
          nonRetryable: false,
        });
      }
      await new Promise((resolve) => setTimeout(resolve, 10));
      continue;
    }
    try {
      writeSync(fd, `${process.pid} ${hostname()}`);
    } finally {
      closeSync(fd);
    }
    try {
      return fn();
    } finally {
      unlinkSync(lockPath);
    }
  }
}

export interface AuditActivityDeps {
  auditDir: string;
  /** The worker's audit key (readAuditKey): every record is written with its MAC, and checked on append. */
  macKey?: Uint8Array;
  log?: (line: string) => void;
}

/** Why a segment is not whole, with the place to look. */
interface SegmentProblem {
  /** 1-based line in the segment, or null when the file could not be read at all. */
  line: number | null;
  seq: number;
  problem: string;
  message: string;
}

/** The current (last) segment of a chain as found on disk. */
interface SegmentState {
  path: string;
  segment: number;
  text: string;
  /** Readable records, in file order (up to the first unreadable line). */
  records: AuditRecord[];
  /** Where this segment continues from: the genesis for segment 1, its override's lastGood after. */
  start: AuditHead;
  /** The last line is a torn, unacknowledged append (not a problem: the next append cuts it off). */
  torn: boolean;
  problem: SegmentProblem | null;
}

function headOf(state: SegmentState): AuditHead | null {
  const last = state.records.at(-1);
  if (last) return { seq: last.seq, hash: last.hash };
  return state.start.seq > 0 ? state.start : null;
}

/** Activities are built by a factory that takes their dependencies; the audit sink holds no state. */
export function createAuditActivities(deps: AuditActivityDeps) {
  const log = deps.log ?? (() => {});
  const dir = deps.auditDir;
  /**
   * What this process last found whole, per segment file: re-checking only what was appended since keeps
   * an append O(new records) instead of re-hashing the whole chain; the prefix is compared by digest, so
   * an edit before it is still seen.
   */
  const verified = new Map<string, { length: number; digest: string; records: AuditRecord[] }>();
  const digestOf = (text: string) => createHash('sha256').update(text).digest('hex');

  function currentSegment(rolloutId: string): number {
    return auditSegmentNumbers(dir, rolloutId).at(-1) ?? 1;
  }

  /** Read and check a segment: readable, chained from its start, each record's MAC the key's. */
  function inspect(rolloutId: string, segment: number): SegmentState {
    const path = auditFilePath(dir, rolloutId, undefined, segment);
    const genesis = { seq: 0, hash: GENESIS_HASH };
    let text: string;
    try {
      text = readFileSync(path, 'utf8');
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOENT')
        return { path, segment, text: '', records: [], start: genesis, torn: false, problem: null };
      return {
        path,
        segment,
        text: '',
        records: [],
        start: genesis,
        torn: false,
        problem: {
          line: null,
          seq: 0,
          problem: 'unreadable',
          message: `cannot read the file (${code ?? (err as Error).message})`,
        },
      };
    }
    const known = verified.get(path);
    const reuse =
      known !== undefined && text.length >= known.length && digestOf(text.slice(0, known.length)) === known.digest;
    const fresh = parseAuditLog(reuse ? text.slice(known.length) : text);
    const records = reuse ? known.records.concat(fresh.records) : fresh.records;
    const unreadable = fresh.unreadable && {
      ...fresh.unreadable,
      line: fresh.unreadable.line + (reuse ? known.records.length : 0),
    };
    const state: SegmentState = {
      path,
      segment,
      text,
      records,
      start: genesis,
      torn: !!unreadable?.torn,
      problem: null,
    };
    if (segment > 1) {
      const first = records[0];
      if (first?.event !== 'audit.override' || !first.lastGood) {
        state.problem = {
          line: 1,
          seq: first?.seq ?? 0,
          problem: 'no-override',
          message: 'a later segment must start with an audit.override record',
        };
        return state;
      }
      state.start = first.lastGood;
    }
    const checkedUpTo = reuse ? known.records.at(-1) : undefined;
    const verdict = checkedUpTo
      ? verifyAuditChain(fresh.records, undefined, {
          start: { seq: checkedUpTo.seq, hash: checkedUpTo.hash },
          key: deps.macKey,
        })
      : verifyAuditChain(records, undefined, { start: state.start, key: deps.macKey });
    if (!verdict.ok) {
      state.problem = {
        line: Math.max(1, verdict.seq - state.start.seq),
        seq: verdict.seq,
        problem: verdict.problem,
        message: verdict.message,
      };
    } else if (unreadable && !unreadable.torn) {
      state.problem = {
        line: unreadable.line,
        seq: state.start.seq + records.length + 1,
        problem: 'edited',
        message: `line ${unreadable.line} is not a JSON audit record`,
      };
    }
    if (!state.problem && !unreadable && text.endsWith('\n'))
      verified.set(path, { length: text.length, digest: digestOf(text), records });
    else verified.delete(path);
    return state;
  }

  function corrupt(state: SegmentState, rolloutId: string): ApplicationFailure {
    const p = state.problem!;
    return ApplicationFailure.create({
      type: 'AuditCorrupt',
      message: `${state.path}${p.line === null ? '' : ` line ${p.line}`}: ${p.message}; no record is written to a trail that is not whole: repair the file (check with \`wavegate audit ${rolloutId} --verify\`) or record an operator override`,
      nonRetryable: true,
      details: [{ file: state.path, line: p.line, seq: p.seq, problem: p.problem, segment: state.segment }],
    });
  }

  /** A torn, unacknowledged append is cut off: its retry is about to write it again. */
  function cutTornTail(state: SegmentState): SegmentState {
    const keep = state.text.lastIndexOf('\n') + 1;
    const fd = openSync(state.path, 'r+');
    try {
      ftruncateSync(fd, keep);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    log(
      `audit: ${state.path}: removed a torn partial record after line ${state.records.length} (an unacknowledged append)`,
    );
    return { ...state, text: state.text.slice(0, keep), torn: false };
  }

  /** A seq-1 record of another run: move the finished chain (every segment, as it is) aside. */
  function archiveChain(rolloutId: string, firstRun: string): void {
    const segments = auditSegmentNumbers(dir, rolloutId);
    const moves = segments.map(
      (n) => [auditFilePath(dir, rolloutId, undefined, n), auditFilePath(dir, rolloutId, firstRun, n)] as const,
    );
    const taken = moves.find(([, to]) => existsSync(to));
    if (taken)
      throw ApplicationFailure.create({
        type: 'AuditConflict',
        message: `cannot start a new chain for ${rolloutId}: ${taken[1]} already exists`,
        nonRetryable: true,
      });
    for (const [from, to] of moves) renameSync(from, to);
    fsyncDir(dir);
    log(`audit: ${rolloutId}: a new run starts a new chain; run ${firstRun}'s chain moved to ${moves[0]![1]}`);
  }

  /** The runId of the chain's first record, when it can be read. */
  function firstRunOf(rolloutId: string): string | undefined {
    try {
      const first = parseAuditLog(`${readFileSync(auditFilePath(dir, rolloutId), 'utf8').split('\n', 1)[0]!}\n`)
        .records[0];
      return typeof first?.runId === 'string' ? first.runId : undefined;
    } catch {
      return undefined;
    }
  }

  /** The append, under the file lock. Synchronous on purpose: nothing else in this process can interleave. */
  function appendLocked(event: AuditEvent, content: string): AuditHead {
    let state = inspect(event.rolloutId, currentSegment(event.rolloutId));
    if (state.torn && !state.problem) state = cutTornTail(state);

    const existing = state.records.find((r) => r.seq === event.seq);
    if (existing && auditContentKey(existing) === content) return { seq: existing.seq, hash: existing.hash };

    if (event.seq === 1 && event.event !== 'audit.override') {
      const firstRun = firstRunOf(event.rolloutId);
      if (firstRun !== undefined && firstRun !== event.runId) {
        archiveChain(event.rolloutId, firstRun);
        return writeRecord(auditFilePath(dir, event.rolloutId), sealRecord(event, GENESIS_HASH), '', true);
      }
    }

    const step = nextAppend(
      { segment: state.segment, start: state.start, head: headOf(state), problem: !!state.problem },
      event,
      existing,
      state.path,
    );
    if (step === 'corrupt') {
      const meter = activityMeter();
      if (meter) recordAuditWriteFailure(meter, 'corrupt');
      throw corrupt(state, event.rolloutId);
    }
    if (step.kind === 'new-segment') {
      const path = auditFilePath(dir, event.rolloutId, undefined, step.segment);
      log(
        `audit: ${event.rolloutId}: override by ${event.by} starts ${path} after record ${event.lastGood!.seq}; ${state.path} is kept as it is`,
      );
      return writeRecord(path, sealRecord(event, step.prevHash), '', true);
    }
    // A complete last record whose newline did not land gets one before the next.
    const separator = state.text.length > 0 && !state.text.endsWith('\n') ? '\n' : '';
    return writeRecord(state.path, sealRecord(event, step.prevHash), separator, state.text.length === 0);
  }

  function writeRecord(path: string, sealed: AuditRecord, separator: string, newFile: boolean): AuditHead {
    const record = deps.macKey ? macRecord(sealed, deps.macKey) : sealed;
    try {
      const fd = openSync(path, 'a', 0o600);
      try {
        writeSync(fd, `${separator}${serializeAuditRecord(record)}\n`);
        fsyncSync(fd);
      } finally {
        closeSync(fd);
      }
      if (newFile) fsyncDir(dir);
    } catch (err) {
      // Disk full, read-only, gone: retrying may help, and until it does nothing moves on unaudited.
      const meter = activityMeter();
      if (meter) recordAuditWriteFailure(meter, 'unwritable');
      throw ApplicationFailure.create({
        type: 'AuditUnwritable',
        message: `cannot write ${path}: ${(err as Error).message}`,
        nonRetryable: false,
        details: [{ file: path, code: (err as NodeJS.ErrnoException).code ?? null }],
      });
    }
    return { seq: record.seq, hash: record.hash };
  }

  function prepareDir(rolloutId: string): void {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    restrictMode(dir, 0o700, log);
    for (const n of auditSegmentNumbers(dir, rolloutId))
      restrictMode(auditFilePath(dir, rolloutId, undefined, n), 0o600, log);
  }

  return {
    /**
     * Append one sealed record (with its MAC when the worker holds a key), idempotent by seq: the same
     * content again returns the stored record; other content under a written seq is `AuditConflict`
     * (non-retryable); a seq beyond the next is `AuditOutOfOrder` (retryable: an earlier append has not
     * landed yet); an event out of bounds is `AuditInvalid` (non-retryable); a trail that is not whole is
     * `AuditCorrupt` (non-retryable, details `{ file, line, seq, problem, segment }`: ask `auditHealth`
     * until it is whole again); a write that fails is `AuditUnwritable` (retryable).
     *
     * An `audit.override` record (with `lastGood`, the head the workflow holds, and the operator's
     * `reason`) is the one record written to a trail that is not whole: it starts a new segment chained
     * to `lastGood`, the broken file kept as it is; later appends go to the new segment. Returns once the
     * line is fsynced.
     */
    async appendAudit(event: AuditEvent): Promise<AuditHead> {
      let content: string;
      let path: string;
      try {
        content = auditContentOfEvent(event);
        path = auditFilePath(dir, event.rolloutId);
      } catch (err) {
        if (err instanceof WavegateError)
          throw ApplicationFailure.create({ type: 'AuditInvalid', message: err.message, nonRetryable: true });
        throw err;
      }
      prepareDir(event.rolloutId);
      return withFileLock(path, () => appendLocked(event, content));
    },

    /**
     * Is the rollout's trail whole (its current segment readable, chained and MACed, and holding `head`
     * when given)? `{ ok: true, head }` or `{ ok: false, reason, problem, file, line }`. Never throws for
     * a broken trail; an invalid rollout id is `AuditInvalid`.
     */
    async auditHealth(input: AuditHealthInput): Promise<AuditHealth> {
      let path: string;
      try {
        path = auditFilePath(dir, input.rolloutId);
      } catch (err) {
        if (err instanceof WavegateError)
          throw ApplicationFailure.create({ type: 'AuditInvalid', message: err.message, nonRetryable: true });
        throw err;
      }
      if (!existsSync(dir)) return { ok: true, head: null, file: path, segment: 1 };
      return withFileLock(path, (): AuditHealth => {
        const state = inspect(input.rolloutId, currentSegment(input.rolloutId));
        const notWhole = (p: SegmentProblem): AuditHealth => ({
          ok: false,
          reason: `${state.path}${p.line === null ? '' : ` line ${p.line}`}: ${p.message}`,
          problem: p.problem,
          file: state.path,
          line: p.line,
          segment: state.segment,
        });
        if (state.problem) return notWhole(state.problem);
        if (input.head) {
          const held = verifyAuditChain(state.records, input.head, { start: state.start });
          if (!held.ok) return notWhole({ line: null, seq: held.seq, problem: held.problem, message: held.message });
        }
        return { ok: true, head: headOf(state), file: state.path, segment: state.segment };
      });
    },
  };
}

/** Today's store behind the interface: one JSONL file per rollout under `auditDir` (this file). */
export function createFileAuditStore(deps: {
  auditDir: string;
  macKey?: Uint8Array;
  log?: (line: string) => void;
}): AuditStore {
  const activities = createAuditActivities(deps);
  return {
    location: deps.auditDir,
    append: (event) => activities.appendAudit(event),
    health: (input) => activities.auditHealth(input),
    segments: async (rolloutId, runId) => readAuditSegments(deps.auditDir, rolloutId, runId),
    earlierRuns: async (rolloutId) => archivedAuditRuns(deps.auditDir, rolloutId),
    close: async () => {},
  };
}
