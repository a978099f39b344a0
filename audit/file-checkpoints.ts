import { closeSync, existsSync, fstatSync, fsyncSync, ftruncateSync, openSync, readSync, writeSync } from 'node:fs';
import { WavegateError } from '../core/errors';
import { checkpointSizeOf, largestSize } from '../core/trail-checkpoints';
import { fileUnwritable } from './failures';
import { fsyncDir } from './file-append';
import { auditCheckpointsPath } from './file-names';

/**
 * The file store's checkpoints (docs/formats.md, "Where checkpoints are kept"): beside a chain's first segment
 * `<stem>.jsonl`, the file `<stem>.jsonl.checkpoints`, one JSON line `{"note":"<signed note>"}` per checkpoint
 * in the order made (sizes ascending), appended under the trail's lock and fsynced, mode 0600. A chain moved
 * aside (a re-used id's next run) takes its checkpoints with it (`<stem>@<run>.jsonl.checkpoints`).
 */

/** The most a checkpoints file is read to: ~20,000 checkpoints of a log's and a witness's signature. */
export const MAX_CHECKPOINTS_FILE_BYTES = 8 * 1024 * 1024;

/** The file's text, bounded; '' when it does not exist. INVALID_STATE naming the file when it is too large. */
function readBounded(path: string): string {
  let fd: number;
  try {
    fd = openSync(path, 'r');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return '';
    throw err;
  }
  try {
    const stat = fstatSync(fd);
    if (!stat.isFile()) throw new WavegateError('INVALID_STATE', `${path}: not a regular file`, { path });
    if (stat.size > MAX_CHECKPOINTS_FILE_BYTES)
      throw new WavegateError(
        'INVALID_STATE',
        `${path}: ${stat.size} bytes, above the ${MAX_CHECKPOINTS_FILE_BYTES} a checkpoints file is read to`,
        { path },
      );
    const buffer = Buffer.alloc(stat.size);
    let read = 0;
    while (read < stat.size) {
      const n = readSync(fd, buffer, read, stat.size - read, read);
      if (n === 0) break;
      read += n;
    }
    return buffer.subarray(0, read).toString('utf8');
  } finally {
    closeSync(fd);
  }
}

/**
 * The notes of a checkpoints file's text, in order. A last line without its newline is an append cut off by a
 * crash (never acknowledged): left out. Any other line that is not `{"note": "<text>"}` is INVALID_STATE
 * naming the file and the line: a damaged file is said, never read past.
 */
export function parseCheckpointsFile(text: string, path: string): string[] {
  const complete = text.slice(0, text.lastIndexOf('\n') + 1);
  const notes: string[] = [];
  for (const [i, line] of complete.split('\n').slice(0, -1).entries()) {
    let note: unknown;
    try {
      note = (JSON.parse(line) as { note?: unknown } | null)?.note;
    } catch {
      note = undefined;
    }
    if (typeof note !== 'string')
      throw new WavegateError(
        'INVALID_STATE',
        `${path} line ${i + 1}: not a checkpoint line {"note": "<signed note>"}`,
        {
          path,
          line: i + 1,
        },
      );
    notes.push(note);
  }
  return notes;
}

/** A chain's checkpoint notes, in the order kept; empty when it has none. */
export function readCheckpointNotes(auditDir: string, rolloutId: string, runId?: string): string[] {
  const path = auditCheckpointsPath(auditDir, rolloutId, runId);
  return parseCheckpointsFile(readBounded(path), path);
}

/**
 * Append `note` (a checkpoint of `rolloutId`, INVALID_INPUT otherwise) to the chain's checkpoints file, unless
 * one of its size or larger is kept already; call under the trail's lock (file-lock.ts). A torn last line is
 * cut off first. A write that fails is `AuditUnwritable` (retryable), as a record's.
 */
export function appendCheckpointLocked(auditDir: string, rolloutId: string, note: string): boolean {
  const size = checkpointSizeOf(rolloutId, note);
  const path = auditCheckpointsPath(auditDir, rolloutId);
  const text = readBounded(path);
  if (size <= largestSize(parseCheckpointsFile(text, path))) return false;
  try {
    const created = !existsSync(path);
    const fd = openSync(path, 'a+', 0o600);
    try {
      const keep = text.lastIndexOf('\n') + 1;
      if (keep < text.length) ftruncateSync(fd, Buffer.byteLength(text.slice(0, keep)));
      writeSync(fd, `${JSON.stringify({ note })}\n`);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    if (created) fsyncDir(auditDir);
  } catch (err) {
    throw fileUnwritable(path, err);
  }
  return true;
}
