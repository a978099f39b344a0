import { createHash } from 'node:crypto';
import { constants } from 'node:fs';
import { open, type FileHandle } from 'node:fs/promises';
import type { ServerResponse } from 'node:http';
import { peekBody } from '../core/signing';
import { PayloadFile } from '../core/revision';
import type { TwinView } from '../core/twin';
import { PayloadRefused, resolvePayload } from '../device/payload-file';
import { HttpRefusal } from '../http/answer';

/**
 * The payload file `<profile>/<revision>/<name>` for a device: only a payload entry named in the signed
 * body of that device's desired envelope for that profile and revision, found by that entry under the
 * gateway's own profiles root (device/payload-file.ts, the worker's rules: inside the profile's
 * payload/, a regular file of the signed size and digest). The agent checks the SHA-256 again.
 *
 * Streamed from disk in chunks of PAYLOAD_CHUNK_BYTES (a request holds a chunk or two, not the file):
 * the file's size is checked against the signed size when it is opened, its digest once per version of
 * the file (by device, inode, size, mtime and ctime: a 409 before anything is sent), and again on every
 * send, the last chunk held back until the digest matched, so a file changed during a send never
 * reaches the agent whole: its connection is cut instead.
 */
export const PAYLOAD_CHUNK_BYTES = 64 * 1024;

/** The signed entry for `name` in the device's desired `profile` at `revision`, or 403. */
export function payloadEntry(view: TwinView | null, profile: string, revision: number, name: string): PayloadFile {
  const entry = view && Object.hasOwn(view.desired, profile) ? view.desired[profile] : undefined;
  if (!entry || entry.revision !== revision) {
    throw new HttpRefusal(
      403,
      'FORBIDDEN',
      `${profile} r${revision} is not this device's desired revision${entry ? ` (that is r${entry.revision})` : ''}: its payload is not yours to fetch`,
    );
  }
  const body = entry.steps.envelope ? peekBody(entry.steps.envelope) : undefined;
  const files =
    body && typeof body === 'object' && Array.isArray((body as { payload?: unknown }).payload)
      ? (body as { payload: unknown[] }).payload
      : [];
  const match = files.map((f) => PayloadFile.safeParse(f)).find((p) => p.success && p.data.name === name);
  if (!match?.success)
    throw new HttpRefusal(
      403,
      'FORBIDDEN',
      `"${name}" is not a payload file of the signed ${profile} r${revision} this device is to run`,
    );
  return match.data;
}

export interface OpenedPayload {
  readonly size: number;
  /** The file's bytes in chunks; throws PAYLOAD_DIGEST_MISMATCH / PAYLOAD_SIZE_MISMATCH before the last chunk when the file changed. */
  chunks(): AsyncGenerator<Buffer>;
  close(): Promise<void>;
}

/** Versions of payload files whose digest was checked, newest last (a bounded memo: 256 entries). */
const verified = new Map<string, true>();
const VERIFIED_MAX = 256;

const refusalOf = (err: unknown): unknown =>
  err instanceof PayloadRefused
    ? new HttpRefusal(
        err.reason === 'PAYLOAD_MISSING' ? 404 : 409,
        err.reason,
        err.message.slice(err.reason.length + 2),
      )
    : err;

/** Open the signed file of `file` under the root, checked (404/409 as HttpRefusal); the caller closes it. */
export async function openPayload(profilesRoot: string, profile: string, file: PayloadFile): Promise<OpenedPayload> {
  let path: string;
  try {
    path = resolvePayload(profilesRoot, profile, file);
  } catch (err) {
    throw refusalOf(err);
  }
  // Without following links and without blocking: a file swapped for a FIFO after resolvePayload cannot hang us.
  const handle = await open(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  try {
    const st = await handle.stat();
    if (!st.isFile())
      throw new PayloadRefused('PAYLOAD_NOT_REGULAR', `payload "${file.name}": ${path} is not a regular file`);
    if (st.size !== file.size)
      throw new PayloadRefused(
        'PAYLOAD_SIZE_MISMATCH',
        `payload "${file.name}": ${path} has ${st.size} bytes, the signed revision says ${file.size}`,
      );
    const version = `${path}\n${st.dev}:${st.ino}:${st.size}:${st.mtimeMs}:${st.ctimeMs}:${file.sha256}`;
    if (!verified.has(version)) {
      for await (const _ of readChecked(handle, path, file)) {
        /* hashed only: a wrong file is a 409 before any byte is sent */
      }
      verified.set(version, true);
      if (verified.size > VERIFIED_MAX) verified.delete(verified.keys().next().value!);
    }
  } catch (err) {
    await handle.close();
    throw refusalOf(err);
  }
  return { size: file.size, chunks: () => readChecked(handle, path, file), close: () => handle.close() };
}

/** The chunks of the open file, hashed as they are read; the last one only after the digest and size matched. */
async function* readChecked(handle: FileHandle, path: string, file: PayloadFile): AsyncGenerator<Buffer> {
  const hash = createHash('sha256');
  let at = 0;
  for (;;) {
    const want = Math.min(PAYLOAD_CHUNK_BYTES, file.size - at);
    const chunk = Buffer.allocUnsafe(Math.max(want, 1));
    const { bytesRead } = await handle.read(chunk, 0, chunk.length, at);
    if (want === 0) {
      // One byte past the signed size: the file grew since it was opened.
      if (bytesRead > 0)
        throw new PayloadRefused(
          'PAYLOAD_SIZE_MISMATCH',
          `payload "${file.name}": ${path} has more than ${file.size} bytes, the signed revision says ${file.size}`,
        );
      // Only an empty file gets here (a non-empty one returns after its last chunk).
      if (hash.digest('hex') !== file.sha256)
        throw new PayloadRefused(
          'PAYLOAD_DIGEST_MISMATCH',
          `payload "${file.name}": ${path} does not have the signed sha256 ${file.sha256}; replace it with the file that was signed`,
        );
      return;
    }
    if (bytesRead === 0)
      throw new PayloadRefused(
        'PAYLOAD_SIZE_MISMATCH',
        `payload "${file.name}": ${path} has ${at} bytes, the signed revision says ${file.size}`,
      );
    const data = bytesRead === chunk.length ? chunk : chunk.subarray(0, bytesRead);
    hash.update(data);
    at += bytesRead;
    if (at === file.size) {
      const more = await handle.read(Buffer.alloc(1), 0, 1, at);
      if (more.bytesRead > 0)
        throw new PayloadRefused(
          'PAYLOAD_SIZE_MISMATCH',
          `payload "${file.name}": ${path} has more than ${file.size} bytes, the signed revision says ${file.size}`,
        );
      if (hash.digest('hex') !== file.sha256) {
        throw new PayloadRefused(
          'PAYLOAD_DIGEST_MISMATCH',
          `payload "${file.name}": ${path} does not have the signed sha256 ${file.sha256}; replace it with the file that was signed`,
        );
      }
      yield data;
      return;
    }
    yield data;
  }
}

/**
 * Send an opened payload as the 200 answer, minding backpressure (one chunk in memory beyond the
 * socket's buffer). A file that changed during the send cuts the connection before its last chunk: the
 * agent sees a short answer, never wrong bytes of the right length. Closes the file either way.
 */
export async function sendPayload(res: ServerResponse, payload: OpenedPayload): Promise<void> {
  try {
    res.writeHead(200, {
      'content-type': 'application/octet-stream',
      'content-length': payload.size,
      'cache-control': 'no-store',
    });
    for await (const chunk of payload.chunks()) {
      if (res.destroyed) return;
      if (!res.write(chunk))
        await new Promise<void>((resolve) => {
          const go = () => {
            res.off('drain', go);
            res.off('close', go);
            resolve();
          };
          res.on('drain', go);
          res.on('close', go);
        });
    }
    res.end();
  } catch (err) {
    res.destroy();
    throw refusalOf(err);
  } finally {
    await payload.close();
  }
}
