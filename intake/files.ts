import { randomBytes } from 'node:crypto';
import {
  closeSync,
  constants,
  fstatSync,
  fsyncSync,
  openSync,
  readSync,
  renameSync,
  rmSync,
  statSync,
  writeSync,
  type Stats,
} from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { MAX_DOCUMENT_DEPTH, documentProblems } from '../core/document-bounds';
import { WavegateError } from '../core/errors';
import { parseYamlInSlices } from '../core/yaml-slices';
import { invalidFields, shapeProblem } from '../core/validation';

/**
 * The largest document wavegate reads (a 100,000-device inventory fits): anything bigger is refused
 * before it is read, so a stray multi-gigabyte file or a 60 MB phase name never reaches a parser.
 */
export const MAX_DOCUMENT_BYTES = 16 * 1024 * 1024;

// The refusals of reading a file say nothing of its content (`contentFree`): they may leave the host as they are (core/worker-files.ts).
function unreadable(path: string, why: string): WavegateError {
  return new WavegateError('INVALID_INPUT', `${path}: cannot read file (${why})`, {
    source: path,
    reason: why,
    contentFree: true,
  });
}

/**
 * The text of a user file: a regular file (a FIFO or a device such as /dev/zero would hang or never
 * end) of at most MAX_DOCUMENT_BYTES. INVALID_INPUT naming the file otherwise.
 */
export function readText(path: string): string {
  return readBytes(path).toString('utf8');
}

/**
 * The bytes of a user file, under readText's rules; `maxBytes` for a file that is not a document (a receipts
 * bundle's trail is hundreds of megabytes at 100,000 devices).
 */
export function readBytes(path: string, maxBytes = MAX_DOCUMENT_BYTES): Buffer {
  let fd: number;
  try {
    // Non-blocking open: opening a FIFO for reading would otherwise wait for a writer.
    fd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK);
  } catch (err) {
    throw unreadable(path, (err as NodeJS.ErrnoException).code ?? String(err));
  }
  try {
    const stat = fstatSync(fd);
    if (!stat.isFile()) throw unreadable(path, 'not a regular file');
    if (stat.size > maxBytes) {
      throw new WavegateError(
        'INVALID_INPUT',
        `${path}: is ${stat.size} bytes, above the limit of ${maxBytes} bytes for ${maxBytes === MAX_DOCUMENT_BYTES ? 'a document' : 'this file'}`,
        { source: path, contentFree: true },
      );
    }
    // Read at most one byte past the limit, whatever the size said (a file can grow while read).
    const buffer = Buffer.alloc(Math.min(stat.size, maxBytes) + 1);
    let length = 0;
    for (let n = 1; n > 0 && length < buffer.length; length += n)
      n = readSync(fd, buffer, length, buffer.length - length, null);
    if (length > maxBytes)
      throw new WavegateError(
        'INVALID_INPUT',
        `${path}: above the limit of ${maxBytes} bytes for ${maxBytes === MAX_DOCUMENT_BYTES ? 'a document' : 'this file'}`,
        { source: path, contentFree: true },
      );
    return buffer.subarray(0, length);
  } catch (err) {
    if (err instanceof WavegateError) throw err;
    throw unreadable(path, (err as NodeJS.ErrnoException).code ?? String(err));
  } finally {
    closeSync(fd);
  }
}

/**
 * The bytes of a file a flag (or variable) names, under readBytes' rules, refused naming the flag:
 * `--tls-cert /dev/zero: cannot read file (not a regular file)`.
 */
export function readFlagFile(flag: string, path: string): Buffer {
  try {
    return readBytes(path);
  } catch (err) {
    if (err instanceof WavegateError)
      throw new WavegateError(err.code, `${flag} ${err.message}`, { ...err.details, field: flag, value: path });
    throw err;
  }
}

/**
 * A file that holds a secret by reference (the audit key, the audit store's password): it must exist, be a
 * regular file, be the owner's alone (like an ssh private key) and hold at most `maxBytes`. Refused
 * naming `field` and the path, never a byte of the file; `expected` says what the file should hold.
 */
export function checkOwnerOnlyFile(
  field: string,
  path: string,
  opts: { maxBytes: number; expected: string; details?: Record<string, unknown> },
): void {
  const refuse = (why: string) =>
    new WavegateError('INVALID_INPUT', `${field} ${JSON.stringify(path)}: ${why}`, opts.details);
  let stat: Stats;
  try {
    stat = statSync(path);
  } catch (err) {
    throw refuse(`cannot read it (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`);
  }
  if (!stat.isFile()) throw refuse('not a regular file');
  if ((stat.mode & 0o077) !== 0)
    throw refuse(`readable by others (mode ${(stat.mode & 0o777).toString(8)}); chmod 600 it`);
  if (stat.size > opts.maxBytes) throw refuse(`${stat.size} bytes; expected ${opts.expected}`);
}

/**
 * Read a YAML or JSON document from disk (JSON by the `.json` extension unless `format` says so); a
 * missing, oversized, unparsable or too deeply nested file is INVALID_INPUT naming it (and the field
 * where the nesting goes too deep).
 */
export function readDocument(
  path: string,
  format: 'json' | 'yaml' = path.endsWith('.json') ? 'json' : 'yaml',
): unknown {
  return checkedDocument(parseDocumentText(readText(path), path, format), path);
}

/**
 * The document in a file's text, parsed once (a large YAML one in slices: core/yaml-slices.ts);
 * unparsable or too deeply nested for the parser is INVALID_INPUT naming the file.
 */
export function parseDocumentText(text: string, path: string, format: 'json' | 'yaml'): unknown {
  try {
    return format === 'json' ? JSON.parse(text) : parseYamlInSlices(text);
  } catch (err) {
    // The YAML parser recurses per level of nesting: a deep enough document overflows its stack.
    const message = (err as Error).message.replace(
      /^Maximum call stack size exceeded/,
      `nested too deeply (more than ${MAX_DOCUMENT_DEPTH} levels)`,
    );
    const syntax = format === 'json' ? 'JSON' : 'YAML';
    // Where, apart from the parser's words (which quote the offending line): a refusal leaving the host says only this.
    const at = /at line (\d+), column (\d+)/.exec(message) ?? /at position (\d+)/.exec(message);
    const position = at ? (at.length === 3 ? `line ${at[1]}, column ${at[2]}` : `character ${at[1]}`) : undefined;
    throw new WavegateError('INVALID_INPUT', `${path}: not valid ${syntax}: ${message}`, {
      source: path,
      syntax,
      ...(position ? { position } : {}),
    });
  }
}

/** A parsed document whose shape (depth, reserved keys) every reader can take; INVALID_INPUT naming the file otherwise. */
export function checkedDocument(data: unknown, path: string): unknown {
  const shape = documentProblems(data);
  if (shape.length) invalidFields(path, shape.map(shapeProblem));
  return data;
}

/**
 * Replace a file at once, mode 0600 unless given (a public document: 0644, the umask applies): a temp file beside it (created exclusively), synced, then renamed
 * over it, so a reader sees the old file or the new one, never half of one.
 */
export function writeFileAtomic(path: string, text: string, mode = 0o600): void {
  const temp = join(dirname(path), `.${basename(path)}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`);
  const fd = openSync(temp, 'wx', mode);
  try {
    writeSync(fd, text);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  try {
    renameSync(temp, path);
  } catch (err) {
    rmSync(temp, { force: true });
    throw err;
  }
}
