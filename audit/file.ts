import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import {
  auditContentOfEvent,
  parseAuditLog,
  type AuditEvent,
  type AuditHead,
  type AuditRecord,
  type AuditSegment,
} from '../core/audit';
import { WavegateError } from '../core/errors';
import { checkOwnerOnlyFile, readFlagFile } from '../intake/files';
import { STATE_DIR } from '../intake/package-layout';
import { auditInvalid } from './failures';
import { appendLocked, prepareDir } from './file-append';
import { appendCheckpointLocked, readCheckpointNotes } from './file-checkpoints';
import { withFileLock } from './file-lock';
import { archivedAuditRuns, auditFilePath, auditSegmentNumbers } from './file-names';
import { filePlace, inspectCurrentSegment, type FileStoreContext, type TextProof } from './file-segment';
import { createSegmentChecker, segmentHealth } from './segment-check';
import type { AuditHealth, AuditHealthInput, AuditStore } from './types';

/**
 * The audit sink (docs/architecture.md, "Audit"): one append-only JSONL file per rollout, one sealed record per line.
 *
 * File names. A rollout id (`rollout:demo`) is mapped to a file name by percent-encoding every character
 * outside `[a-z0-9._-]` as its UTF-8 bytes (`%3A` for `:`, `%2F` for `/`, `%25` for `%`), upper-case
 * letters included so that two ids differing only in case stay two files on case-insensitive disks, and
 * a leading `.` so no id names a hidden file or `..`. `decodeURIComponent` reverses it. `rollout:demo`
 * → `rollout%3Ademo.jsonl`. A slice's trail is named by the slice's workflow id the same way
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

/** The store's file names (file-names.ts), for every reader that names a trail's files. */
export {
  archivedAuditRuns,
  auditFilePath,
  auditFileStem,
  auditSegmentNumbers,
  MAX_AUDIT_ID,
  MAX_AUDIT_STEM,
  rolloutIdOfStem,
} from './file-names';

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
  checkOwnerOnlyFile(source, path, { maxBytes: 4096, expected: 'one line of hex (64–4096 characters)' });
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

export interface AuditActivityDeps {
  auditDir: string;
  /** The worker's audit key (readAuditKey): every record is written with its MAC, and checked on append. */
  macKey?: Uint8Array;
  log?: (line: string) => void;
}

/**
 * The workflow's two audit activities over the file store (the names are in workflow histories). Built by
 * a factory that takes their dependencies; what it remembers is only what it found whole (segment-check.ts).
 */
export function createAuditActivities(deps: AuditActivityDeps) {
  const ctx: FileStoreContext = {
    dir: deps.auditDir,
    macKey: deps.macKey,
    log: deps.log ?? (() => {}),
    checker: createSegmentChecker<TextProof>(deps.macKey),
  };
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
        path = auditFilePath(ctx.dir, event.rolloutId);
      } catch (err) {
        auditInvalid(err);
      }
      prepareDir(ctx, event.rolloutId);
      return withFileLock(path, () => appendLocked(ctx, event, content));
    },

    /**
     * Is the rollout's trail whole (its current segment readable, chained and MACed, and holding `head`
     * when given)? `{ ok: true, head }` or `{ ok: false, reason, problem, file, line }`. Never throws for
     * a broken trail; an invalid rollout id is `AuditInvalid`.
     */
    async auditHealth(input: AuditHealthInput): Promise<AuditHealth> {
      let path: string;
      try {
        path = auditFilePath(ctx.dir, input.rolloutId);
      } catch (err) {
        auditInvalid(err);
      }
      if (!existsSync(ctx.dir)) return { ok: true, head: null, file: path, segment: 1 };
      return withFileLock(path, (): AuditHealth => {
        const state = inspectCurrentSegment(ctx, input.rolloutId);
        return segmentHealth(state, filePlace(state.path, input.rolloutId), input.head);
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
    appendCheckpoint: async (rolloutId, note) => {
      const trail = auditFilePath(deps.auditDir, rolloutId);
      // Beside a trail only: a checkpoint of records no store holds is a caller's mistake.
      if (!existsSync(trail)) readAuditSegments(deps.auditDir, rolloutId);
      await withFileLock(trail, () => appendCheckpointLocked(deps.auditDir, rolloutId, note));
    },
    checkpoints: async (rolloutId) => readCheckpointNotes(deps.auditDir, rolloutId),
    close: async () => {},
  };
}
