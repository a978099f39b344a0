import {
  chmodSync,
  closeSync,
  existsSync,
  fsyncSync,
  ftruncateSync,
  mkdirSync,
  openSync,
  readFileSync,
  renameSync,
  statSync,
  writeSync,
} from 'node:fs';
import { ApplicationFailure } from '@temporalio/common';
import {
  GENESIS_HASH,
  macRecord,
  parseAuditLog,
  sealRecord,
  serializeAuditRecord,
  type AuditEvent,
  type AuditHead,
  type AuditRecord,
} from '../core/audit';
import { fileUnwritable } from './failures';
import { auditCheckpointsPath, auditFilePath, auditSegmentNumbers } from './file-names';
import { filePlace, inspectCurrentSegment, type FileSegmentState, type FileStoreContext } from './file-segment';
import { appendStep, storedAt } from './segment-check';

/**
 * The file store's append (the rules at the top of file.ts), under the file lock. Synchronous on purpose:
 * nothing else in this process can interleave. `content` is the event's content key (auditContentOfEvent).
 */
export function appendLocked(ctx: FileStoreContext, event: AuditEvent, content: string): AuditHead {
  let state = inspectCurrentSegment(ctx, event.rolloutId);
  if (state.torn && !state.problem) state = cutTornTail(ctx, state);

  const { existing, done } = storedAt(state, event, content);
  if (done) return done;

  if (event.seq === 1 && event.event !== 'audit.override') {
    const firstRun = firstRunOf(ctx.dir, event.rolloutId);
    if (firstRun !== undefined && firstRun !== event.runId) {
      archiveChain(ctx, event.rolloutId, firstRun);
      return writeRecord(ctx, auditFilePath(ctx.dir, event.rolloutId), sealRecord(event, GENESIS_HASH), '', true);
    }
  }

  const step = appendStep(state, event, existing, filePlace(state.path, event.rolloutId));
  if (step.kind === 'new-segment') {
    const path = auditFilePath(ctx.dir, event.rolloutId, undefined, step.segment);
    ctx.log(
      `audit: ${event.rolloutId}: override by ${event.by} starts ${path} after record ${event.lastGood!.seq}; ${state.path} is kept as it is`,
    );
    return writeRecord(ctx, path, sealRecord(event, step.prevHash), '', true);
  }
  // A complete last record whose newline did not land gets one before the next.
  const separator = state.text.length > 0 && !state.text.endsWith('\n') ? '\n' : '';
  return writeRecord(ctx, state.path, sealRecord(event, step.prevHash), separator, state.text.length === 0);
}

/** The directory (0700) and the rollout's segment files (0600) before an append; looser modes are fixed, and said. */
export function prepareDir(ctx: FileStoreContext, rolloutId: string): void {
  mkdirSync(ctx.dir, { recursive: true, mode: 0o700 });
  restrictMode(ctx.dir, 0o700, ctx.log);
  for (const n of auditSegmentNumbers(ctx.dir, rolloutId))
    restrictMode(auditFilePath(ctx.dir, rolloutId, undefined, n), 0o600, ctx.log);
}

/** A torn, unacknowledged append is cut off: its retry is about to write it again. */
function cutTornTail(ctx: FileStoreContext, state: FileSegmentState): FileSegmentState {
  const keep = state.text.lastIndexOf('\n') + 1;
  const fd = openSync(state.path, 'r+');
  try {
    ftruncateSync(fd, keep);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  ctx.log(
    `audit: ${state.path}: removed a torn partial record after line ${state.records.length} (an unacknowledged append)`,
  );
  return { ...state, text: state.text.slice(0, keep), torn: false };
}

/** A seq-1 record of another run: move the finished chain (every segment, as it is) aside. */
function archiveChain(ctx: FileStoreContext, rolloutId: string, firstRun: string): void {
  const segments = auditSegmentNumbers(ctx.dir, rolloutId);
  const moves = segments.map(
    (n) => [auditFilePath(ctx.dir, rolloutId, undefined, n), auditFilePath(ctx.dir, rolloutId, firstRun, n)] as const,
  );
  const taken = moves.find(([, to]) => existsSync(to));
  if (taken)
    throw ApplicationFailure.create({
      type: 'AuditConflict',
      message: `cannot start a new chain for ${rolloutId}: ${taken[1]} already exists`,
      nonRetryable: true,
    });
  for (const [from, to] of moves) renameSync(from, to);
  // Its checkpoints (file-checkpoints.ts) go with it: the new chain's tree starts again at size 0.
  const checkpoints = auditCheckpointsPath(ctx.dir, rolloutId);
  if (existsSync(checkpoints)) renameSync(checkpoints, auditCheckpointsPath(ctx.dir, rolloutId, firstRun));
  fsyncDir(ctx.dir);
  ctx.log(`audit: ${rolloutId}: a new run starts a new chain; run ${firstRun}'s chain moved to ${moves[0]![1]}`);
}

/** The runId of the chain's first record, when it can be read. */
function firstRunOf(dir: string, rolloutId: string): string | undefined {
  try {
    const first = parseAuditLog(`${readFileSync(auditFilePath(dir, rolloutId), 'utf8').split('\n', 1)[0]!}\n`)
      .records[0];
    return typeof first?.runId === 'string' ? first.runId : undefined;
  } catch {
    return undefined;
  }
}

function writeRecord(
  ctx: FileStoreContext,
  path: string,
  sealed: AuditRecord,
  separator: string,
  newFile: boolean,
): AuditHead {
  const record = ctx.macKey ? macRecord(sealed, ctx.macKey) : sealed;
  try {
    const fd = openSync(path, 'a', 0o600);
    try {
      writeSync(fd, `${separator}${serializeAuditRecord(record)}\n`);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    if (newFile) fsyncDir(ctx.dir);
  } catch (err) {
    throw fileUnwritable(path, err);
  }
  return { seq: record.seq, hash: record.hash };
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

/** The directory's entries made durable (a file created or renamed in it). */
export function fsyncDir(dir: string): void {
  const fd = openSync(dir, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}
