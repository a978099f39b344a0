import { closeSync, existsSync, fsyncSync, ftruncateSync, mkdirSync, openSync, readdirSync, readFileSync, renameSync, statSync, unlinkSync, writeSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { ApplicationFailure } from '@temporalio/common';
import { auditContentKey, auditContentOfEvent, GENESIS_HASH, parseAuditLog, sealRecord, serializeAuditRecord, type AuditEvent, type AuditRecord } from '../core/audit';
import { WavegateError } from '../core/errors';
import { PROJECT_ROOT } from '../workers/toolchain';

/**
 * The audit sink (docs/architecture.md, "Audit"): one append-only JSONL file per rollout, one sealed record per line.
 *
 * File names. A rollout id (`rollout:demo`) is mapped to a file name by percent-encoding every character
 * outside `[a-z0-9._-]` as its UTF-8 bytes (`%3A` for `:`, `%2F` for `/`, `%25` for `%`), upper-case
 * letters included so that two ids differing only in case stay two files on case-insensitive disks, and
 * a leading `.` so no id names a hidden file or `..`. `decodeURIComponent` reverses it. `rollout:demo`
 * → `rollout%3Ademo.jsonl`.
 *
 * Re-used ids. `rollout:<profile>` is the workflow id of every rollout of that profile, one after another.
 * The current file holds the latest execution; when a seq-1 record of another run arrives, the finished
 * chain is moved aside to `<name>@<runId of its first record>.jsonl` (`@` never occurs in an encoded id)
 * and a new chain starts. Continue-as-new keeps the seq going, so its later run ids do not start a file.
 */
export const DEFAULT_AUDIT_DIR = join(PROJECT_ROOT, '.wavegate', 'audit');

/** A lock older than this whose holder cannot be checked is taken to be left by a crashed writer. */
const STALE_LOCK_MS = 30_000;
const LOCK_WAIT_MS = 2_000;

export function auditFileStem(rolloutId: string): string {
  if (typeof rolloutId !== 'string' || rolloutId.length === 0) {
    throw new WavegateError('INVALID_INPUT', `rollout id ${JSON.stringify(rolloutId)}: expected a non-empty string`);
  }
  let out = '';
  for (const ch of rolloutId) {
    if (/[a-z0-9_-]/.test(ch) || (ch === '.' && out.length > 0)) out += ch;
    else for (const byte of new TextEncoder().encode(ch)) out += `%${byte.toString(16).toUpperCase().padStart(2, '0')}`;
  }
  // Leave room for `@<runId>.jsonl` and `.lock` within the usual 255-byte name limit.
  if (out.length > 180) throw new WavegateError('INVALID_INPUT', `rollout id "${rolloutId.slice(0, 40)}…": too long for an audit file name (encoded ${out.length} > 180 characters)`);
  return out;
}

/** The rollout id a file stem (without `.jsonl`, `@run` suffix removed) stands for. */
export function rolloutIdOfStem(stem: string): string {
  return decodeURIComponent(stem);
}

/** The current chain of a rollout, or with `runId` an earlier execution's chain moved aside. */
export function auditFilePath(auditDir: string, rolloutId: string, runId?: string): string {
  return join(auditDir, runId === undefined ? `${auditFileStem(rolloutId)}.jsonl` : `${auditFileStem(rolloutId)}@${auditFileStem(runId)}.jsonl`);
}

/** Run ids of earlier executions of this rollout id whose chains were moved aside, oldest file first. */
export function archivedAuditRuns(auditDir: string, rolloutId: string): string[] {
  const prefix = `${auditFileStem(rolloutId)}@`;
  if (!existsSync(auditDir)) return [];
  return readdirSync(auditDir)
    .filter((name) => name.startsWith(prefix) && name.endsWith('.jsonl'))
    .map((name) => ({ name, mtime: statSync(join(auditDir, name)).mtimeMs }))
    .sort((a, b) => a.mtime - b.mtime)
    .map(({ name }) => decodeURIComponent(name.slice(prefix.length, -'.jsonl'.length)));
}

/** The raw text of a rollout's audit file; NOT_FOUND naming the path when there is none. */
export function readAuditText(auditDir: string, rolloutId: string, runId?: string): string {
  const path = auditFilePath(auditDir, rolloutId, runId);
  try {
    return readFileSync(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') {
      throw new WavegateError('NOT_FOUND', `no audit trail for rollout "${rolloutId}"${runId ? ` run ${runId}` : ''} (looked for ${path})`, { path });
    }
    throw err;
  }
}

/** Every record of a rollout's audit file, in file order. A line that is not a record is an error naming it. */
export function readAuditFile(auditDir: string, rolloutId: string, runId?: string): AuditRecord[] {
  const { records, unreadable } = parseAuditLog(readAuditText(auditDir, rolloutId, runId));
  if (unreadable) {
    throw new WavegateError('FAILED', `${auditFilePath(auditDir, rolloutId, runId)} line ${unreadable.line}: ${unreadable.torn ? 'cut off mid-record' : 'not a JSON audit record'}`);
  }
  return records;
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
      fd = openSync(lockPath, 'wx');
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
        throw ApplicationFailure.create({ type: 'AuditBusy', message: `${lockPath} is held by another writer; retrying`, nonRetryable: false });
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
  log?: (line: string) => void;
}

/** Activities are built by a factory that takes their dependencies; the audit sink holds no state. */
export function createAuditActivities(deps: AuditActivityDeps) {
  const log = deps.log ?? (() => {});

  /** The append, under the file lock. Synchronous on purpose: nothing else in this process can interleave. */
  function appendLocked(path: string, event: AuditEvent, content: string): { seq: number; hash: string } {
    let text = existsSync(path) ? readFileSync(path, 'utf8') : '';
    let { records, unreadable } = parseAuditLog(text);
    let separator = '';
    if (unreadable?.torn) {
      // A crash mid-append leaves an unterminated partial line. That append was never acknowledged (we
      // return only after fsync), so its retry is about to write it again: cut the fragment off.
      const keep = text.lastIndexOf('\n') + 1;
      const fd = openSync(path, 'r+');
      try {
        ftruncateSync(fd, keep);
        fsyncSync(fd);
      } finally {
        closeSync(fd);
      }
      log(`audit: ${path}: removed a torn partial record after line ${records.length} (an unacknowledged append)`);
      text = text.slice(0, keep);
      unreadable = null;
    } else if (unreadable) {
      throw ApplicationFailure.create({
        type: 'AuditCorrupt',
        message: `${path} line ${unreadable.line} is not a JSON audit record; run \`wavegate audit ${event.rolloutId} --verify\` and repair the file by hand`,
        nonRetryable: true,
      });
    } else if (text.length > 0 && !text.endsWith('\n')) {
      separator = '\n'; // a complete last record whose newline did not land
    }

    const last = records.at(-1);
    const lastSeq = last?.seq ?? 0;
    if (event.seq <= lastSeq) {
      const existing = records.find((r) => r.seq === event.seq);
      if (existing && auditContentKey(existing) === content) return { seq: existing.seq, hash: existing.hash };
      const firstRun = records[0]?.runId;
      if (event.seq === 1 && firstRun !== undefined && firstRun !== event.runId) {
        // A new execution of a re-used rollout id: move the finished chain aside and start a new one.
        const archive = auditFilePath(deps.auditDir, event.rolloutId, firstRun);
        if (existsSync(archive)) {
          throw ApplicationFailure.create({ type: 'AuditConflict', message: `cannot start a new chain for ${event.rolloutId}: ${archive} already exists`, nonRetryable: true });
        }
        renameSync(path, archive);
        fsyncDir(deps.auditDir);
        log(`audit: ${event.rolloutId}: run ${event.runId} starts a new chain; run ${firstRun}'s chain moved to ${archive}`);
        return writeRecord(path, sealRecord(event, GENESIS_HASH), '', true);
      }
      throw ApplicationFailure.create({
        type: 'AuditConflict',
        message: `${path}: record ${event.seq} already exists with other content (${existing ? `${existing.event} at ${existing.at} by ${existing.by}` : 'seq not found in file'}); refusing to write ${event.event} at ${event.at} as ${event.seq}`,
        nonRetryable: true,
        details: [{ seq: event.seq }],
      });
    }
    if (event.seq > lastSeq + 1) {
      throw ApplicationFailure.create({
        type: 'AuditOutOfOrder',
        message: `${path} ends at record ${lastSeq}; record ${event.seq} must wait for ${lastSeq + 1} to land`,
        nonRetryable: false,
        details: [{ seq: event.seq, last: lastSeq }],
      });
    }
    return writeRecord(path, sealRecord(event, last?.hash ?? GENESIS_HASH), separator, text.length === 0);
  }

  function writeRecord(path: string, record: AuditRecord, separator: string, newFile: boolean): { seq: number; hash: string } {
    const fd = openSync(path, 'a');
    try {
      writeSync(fd, `${separator}${serializeAuditRecord(record)}\n`);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    if (newFile) fsyncDir(deps.auditDir);
    return { seq: record.seq, hash: record.hash };
  }

  return {
    /**
     * Append one sealed record, idempotent by seq: the same content again returns the stored record;
     * other content under a written seq is `AuditConflict` (non-retryable); a seq beyond the next is
     * `AuditOutOfOrder` (retryable: an earlier append has not landed yet); an event out of bounds is
     * `AuditInvalid` (non-retryable). Returns once the line is fsynced.
     */
    async appendAudit(event: AuditEvent): Promise<{ seq: number; hash: string }> {
      let content: string;
      let path: string;
      try {
        content = auditContentOfEvent(event);
        path = auditFilePath(deps.auditDir, event.rolloutId);
      } catch (err) {
        if (err instanceof WavegateError) throw ApplicationFailure.create({ type: 'AuditInvalid', message: err.message, nonRetryable: true });
        throw err;
      }
      mkdirSync(deps.auditDir, { recursive: true });
      return withFileLock(path, () => appendLocked(path, event, content));
    },
  };
}
