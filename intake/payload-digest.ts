import { createHash } from 'node:crypto';
import { closeSync, constants, fstatSync, openSync, readSync } from 'node:fs';
import { resolve } from 'node:path';
import { MAX_PAYLOAD_FILE_BYTES, type PayloadFileFacts } from '../core/revision';

/**
 * What a payload file in a profile directory holds, for `wavegate sign` to fill or check a revision's
 * `sha256` and `size` (core/revision.ts fillPayloadDigests). The file is read as the worker will read it
 * (device/payload-file.ts): a regular file, opened without following a final symbolic link and
 * without blocking (a FIFO cannot hang sign), hashed in chunks; a file above the 64 MiB cap is measured,
 * never read. Where the file is (inside payload/) was already judged by payloadSourceProblems.
 */
export function readPayloadFacts(
  profileDir: string,
  source: string,
): { facts: PayloadFileFacts } | { missing: string } {
  const path = resolve(profileDir, source);
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK | constants.O_NOFOLLOW);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return { missing: `${path} does not exist` };
    if (code === 'ELOOP')
      return { missing: `${path} is a symbolic link; a payload file must be a plain file inside payload/` };
    return { missing: `${path} cannot be read (${code ?? String(err)})` };
  }
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) return { missing: `${path} is not a regular file` };
    if (st.size > MAX_PAYLOAD_FILE_BYTES) return { facts: { size: st.size } };
    const hash = createHash('sha256');
    const chunk = Buffer.alloc(1024 * 1024);
    let size = 0;
    for (;;) {
      const n = readSync(fd, chunk, 0, chunk.length, size);
      if (n === 0) break;
      hash.update(chunk.subarray(0, n));
      size += n;
      if (size > MAX_PAYLOAD_FILE_BYTES) return { facts: { size } }; // grew while read
    }
    return { facts: { sha256: hash.digest('hex'), size } };
  } finally {
    closeSync(fd);
  }
}
