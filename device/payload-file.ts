import { createHash } from 'node:crypto';
import { type Stats, closeSync, constants, fstatSync, lstatSync, openSync, readSync } from 'node:fs';
import { isAbsolute, relative, resolve, sep } from 'node:path';
import type { PayloadFile } from '../core/revision';
import { profileDir } from '../intake/profile-dir';

/**
 * The worker's copy of a payload file, found by the revision's own signed entry (name, source, sha256,
 * size) under the worker's own profile directory, never by a path someone else handed it: a rollout
 * input cannot make the worker read, hash or send any other file. docs/formats.md, "Payload files on
 * the worker".
 */

/** Why a payload file cannot be sent; the message never carries the local file's digest. */
export class PayloadRefused extends Error {
  constructor(
    readonly reason:
      | 'PAYLOAD_OUTSIDE_ROOT'
      | 'PAYLOAD_MISSING'
      | 'PAYLOAD_NOT_REGULAR'
      | 'PAYLOAD_SIZE_MISMATCH'
      | 'PAYLOAD_DIGEST_MISMATCH',
    detail: string,
  ) {
    super(`${reason}: ${detail}`);
    this.name = 'PayloadRefused';
  }
}

/**
 * Where `file` lives on this worker: `<profilesRoot>/<profile>/<source>`, which must lie inside the
 * profile's `payload/` directory with no symbolic link below it, and be a regular file of the signed
 * size. Checked with lstat, so a FIFO, a device node or a link to elsewhere is refused before it is read.
 */
export function resolvePayload(profilesRoot: string, profile: string, file: PayloadFile): string {
  const layout = profileDir(profilesRoot, profile);
  const root = layout.payloadDir;
  const path = isAbsolute(file.source) ? resolve(file.source) : layout.payloadSource(file.source);
  const rel = relative(root, path);
  const what = `payload "${file.name}" (source ${JSON.stringify(file.source)})`;
  if (rel === '' || rel.startsWith('..') || isAbsolute(rel)) {
    throw new PayloadRefused('PAYLOAD_OUTSIDE_ROOT', `${what} is not inside this worker's payload directory ${root}`);
  }
  let at = root;
  for (const part of rel.split(sep)) {
    at = resolve(at, part);
    let st: Stats;
    try {
      st = lstatSync(at);
    } catch (err) {
      throw new PayloadRefused(
        'PAYLOAD_MISSING',
        `${what}: ${at} cannot be read on this worker (${(err as NodeJS.ErrnoException).code ?? String(err)})`,
      );
    }
    if (st.isSymbolicLink())
      throw new PayloadRefused(
        'PAYLOAD_NOT_REGULAR',
        `${what}: ${at} is a symbolic link; payload files must be plain files under ${root}`,
      );
    if (at === path) {
      if (!st.isFile()) throw new PayloadRefused('PAYLOAD_NOT_REGULAR', `${what}: ${at} is not a regular file`);
      if (st.size !== file.size)
        throw new PayloadRefused(
          'PAYLOAD_SIZE_MISMATCH',
          `${what}: ${at} has ${st.size} bytes, the signed revision says ${file.size}`,
        );
    } else if (!st.isDirectory()) {
      throw new PayloadRefused('PAYLOAD_NOT_REGULAR', `${what}: ${at} is not a directory`);
    }
  }
  return path;
}

/**
 * The bytes of a resolved payload file, checked against its signed size and digest. Opened without
 * following links and without blocking (a file swapped for a FIFO after resolvePayload cannot hang
 * the worker), and read no further than one byte past the signed size.
 */
export function readPayload(path: string, file: PayloadFile): Buffer {
  const fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  try {
    const st = fstatSync(fd);
    if (!st.isFile())
      throw new PayloadRefused('PAYLOAD_NOT_REGULAR', `payload "${file.name}": ${path} is not a regular file`);
    const data = Buffer.alloc(file.size + 1);
    let got = 0;
    while (got < data.length) {
      const n = readSync(fd, data, got, data.length - got, got);
      if (n === 0) break;
      got += n;
    }
    if (got !== file.size)
      throw new PayloadRefused(
        'PAYLOAD_SIZE_MISMATCH',
        `payload "${file.name}": ${path} has ${got > file.size ? `more than ${file.size}` : got} bytes, the signed revision says ${file.size}`,
      );
    const body = data.subarray(0, got);
    if (createHash('sha256').update(body).digest('hex') !== file.sha256) {
      throw new PayloadRefused(
        'PAYLOAD_DIGEST_MISMATCH',
        `payload "${file.name}": ${path} does not have the signed sha256 ${file.sha256}; replace it with the file that was signed`,
      );
    }
    return body;
  } finally {
    closeSync(fd);
  }
}
