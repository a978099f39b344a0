/**
 * The SFTP subsystem of a simulated device, rooted at its sandbox: "/" is the sandbox; relative paths
 * resolve from "/"; `..` stops at the sandbox root; an absolute path that already starts with the real
 * sandbox path is accepted as-is (clients that were told the real path keep working). RENAME refuses to
 * overwrite (OpenSSH v3 semantics); uid/gid in SETSTAT are ignored (the simulator does not run as root).
 * Counts bytes written and files opened for writing on the device (Fleet.sftpWrites / sftpUploads).
 */
import { constants as fsc, promises as fsp } from 'node:fs';
import * as path from 'node:path';
import { utils as sshUtils, type Attributes, type FileEntry, type SFTPWrapper } from 'ssh2';
import type { DeviceState } from './device';

const { STATUS_CODE } = sshUtils.sftp;

function errCode(err: unknown): string | undefined {
  return typeof err === 'object' && err !== null && 'code' in err ? String((err as { code: unknown }).code) : undefined;
}

type SftpHandle =
  | { kind: 'file'; fd: fsp.FileHandle; vpath: string }
  | { kind: 'dir'; real: string; vpath: string; entries?: FileEntry[]; pos: number };

const MAX_READ = 64 * 1024;

function toAttrs(st: import('node:fs').Stats): Attributes {
  return {
    mode: st.mode,
    uid: st.uid,
    gid: st.gid,
    size: st.size,
    atime: Math.floor(st.atimeMs / 1000),
    mtime: Math.floor(st.mtimeMs / 1000),
  };
}

function modeString(mode: number): string {
  const t = fsc.S_IFMT & mode;
  const type =
    t === fsc.S_IFDIR
      ? 'd'
      : t === fsc.S_IFLNK
        ? 'l'
        : t === fsc.S_IFCHR
          ? 'c'
          : t === fsc.S_IFBLK
            ? 'b'
            : t === fsc.S_IFIFO
              ? 'p'
              : t === fsc.S_IFSOCK
                ? 's'
                : '-';
  const bits = 'rwxrwxrwx';
  let perms = '';
  for (let i = 0; i < 9; i++) perms += mode & (1 << (8 - i)) ? bits[i] : '-';
  return type + perms;
}

function longname(name: string, st: import('node:fs').Stats): string {
  const d = st.mtime;
  const mon = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'][d.getMonth()];
  const date = `${mon} ${String(d.getDate()).padStart(2, ' ')} ${String(d.getHours()).padStart(2, '0')}:${String(d.getMinutes()).padStart(2, '0')}`;
  return `${modeString(st.mode)} ${String(st.nlink).padStart(3)} ${String(st.uid).padEnd(8)} ${String(st.gid).padEnd(8)} ${String(st.size).padStart(8)} ${date} ${name}`;
}

function statusFor(err: unknown): number {
  switch (errCode(err)) {
    case 'ENOENT':
    case 'ENOTDIR':
      return STATUS_CODE.NO_SUCH_FILE;
    case 'EACCES':
    case 'EPERM':
      return STATUS_CODE.PERMISSION_DENIED;
    default:
      return STATUS_CODE.FAILURE;
  }
}

/** One SFTP session's state and helpers, which every request's handler is given. */
interface SftpSession {
  st: DeviceState;
  sftp: SFTPWrapper;
  handles: Map<string, SftpHandle>;
  /** Virtual path ("/" = sandbox); `..` cannot climb above it; real sandbox paths are accepted as-is. */
  toVirtual(p: string): string;
  toReal(p: string): string;
  newHandle(h: SftpHandle): Buffer;
  lookup(buf: Buffer): SftpHandle | undefined;
  ok(reqId: number): void;
}

function sftpSession(st: DeviceState, sftp: SFTPWrapper): SftpSession {
  const sandbox = st.dev.sandbox;
  const handles = new Map<string, SftpHandle>();
  let nextHandle = 0;
  const toVirtual = (p: string): string => {
    const v = path.posix.resolve('/', p || '.');
    if (v === sandbox) return '/';
    if (v.startsWith(`${sandbox}/`)) return v.slice(sandbox.length);
    return v;
  };
  return {
    st,
    sftp,
    handles,
    toVirtual,
    toReal: (p) => path.join(sandbox, toVirtual(p)),
    newHandle: (h) => {
      const buf = Buffer.alloc(4);
      buf.writeUInt32BE(nextHandle++ >>> 0, 0);
      handles.set(buf.toString('hex'), h);
      return buf;
    },
    lookup: (buf) => handles.get(buf.toString('hex')),
    ok: (reqId) => sftp.status(reqId, STATUS_CODE.OK),
  };
}

async function applyAttrs(real: string, attrs: Partial<Attributes> | undefined, fd?: fsp.FileHandle): Promise<void> {
  if (!attrs) return;
  if (typeof attrs.size === 'number') {
    if (fd) await fd.truncate(attrs.size);
    else await fsp.truncate(real, attrs.size);
  }
  if (typeof attrs.mode === 'number') {
    if (fd) await fd.chmod(attrs.mode & 0o7777);
    else await fsp.chmod(real, attrs.mode & 0o7777);
  }
  if (typeof attrs.atime === 'number' && typeof attrs.mtime === 'number') {
    if (fd) await fd.utimes(attrs.atime, attrs.mtime);
    else await fsp.utimes(real, attrs.atime, attrs.mtime);
  }
  // uid/gid: ignored (the simulator does not run as root)
}

/** A request's handler: its answer is sent on `s.sftp`; what it throws is answered as a status (serveSftp). */
type RequestHandler = (s: SftpSession, reqId: number, ...args: never[]) => Promise<void>;

/** The handler of each request kind, by the name ssh2 emits it under. */
const REQUESTS = {
  REALPATH: async (s, reqId, p: string) => {
    const v = s.toVirtual(p);
    s.sftp.name(reqId, [{ filename: v, longname: v, attrs: {} as Attributes }]);
  },
  OPEN: async (s, reqId, filename: string, flags: number, attrs: Attributes) => {
    const { OPEN_MODE } = sshUtils.sftp;
    const read = (flags & OPEN_MODE.READ) !== 0;
    const write = (flags & OPEN_MODE.WRITE) !== 0;
    let f = read && write ? fsc.O_RDWR : write ? fsc.O_WRONLY : fsc.O_RDONLY;
    if (flags & OPEN_MODE.APPEND) f |= fsc.O_APPEND;
    if (flags & OPEN_MODE.CREAT) f |= fsc.O_CREAT;
    if (flags & OPEN_MODE.TRUNC) f |= fsc.O_TRUNC;
    if (flags & OPEN_MODE.EXCL) f |= fsc.O_EXCL;
    const a = attrs as Partial<Attributes> | undefined;
    const mode = typeof a?.mode === 'number' ? a.mode & 0o7777 : 0o644;
    const real = s.toReal(filename);
    const fd = await fsp.open(real, f, mode);
    if (write) s.st.sftpOpens++;
    s.sftp.handle(reqId, s.newHandle({ kind: 'file', fd, vpath: s.toVirtual(filename) }));
  },
  READ: async (s, reqId, hbuf: Buffer, offset: number, len: number) => {
    const h = s.lookup(hbuf);
    if (h?.kind !== 'file') return s.sftp.status(reqId, STATUS_CODE.FAILURE, 'invalid handle');
    const buf = Buffer.alloc(Math.min(len, MAX_READ));
    const { bytesRead } = await h.fd.read(buf, 0, buf.length, offset);
    if (bytesRead === 0) return s.sftp.status(reqId, STATUS_CODE.EOF);
    s.sftp.data(reqId, buf.subarray(0, bytesRead));
  },
  WRITE: async (s, reqId, hbuf: Buffer, offset: number, data: Buffer) => {
    const h = s.lookup(hbuf);
    if (h?.kind !== 'file') return s.sftp.status(reqId, STATUS_CODE.FAILURE, 'invalid handle');
    let written = 0;
    while (written < data.length) {
      const { bytesWritten } = await h.fd.write(data, written, data.length - written, offset + written);
      written += bytesWritten;
    }
    s.st.sftpBytes += written;
    s.ok(reqId);
  },
  CLOSE: async (s, reqId, hbuf: Buffer) => {
    const key = hbuf.toString('hex');
    const h = s.handles.get(key);
    if (!h) return s.sftp.status(reqId, STATUS_CODE.FAILURE, 'invalid handle');
    s.handles.delete(key);
    if (h.kind === 'file') await h.fd.close();
    s.ok(reqId);
  },
  FSTAT: async (s, reqId, hbuf: Buffer) => {
    const h = s.lookup(hbuf);
    if (!h) return s.sftp.status(reqId, STATUS_CODE.FAILURE, 'invalid handle');
    const stats = h.kind === 'file' ? await h.fd.stat() : await fsp.stat(h.real);
    s.sftp.attrs(reqId, toAttrs(stats));
  },
  FSETSTAT: async (s, reqId, hbuf: Buffer, attrs: Attributes) => {
    const h = s.lookup(hbuf);
    if (!h) return s.sftp.status(reqId, STATUS_CODE.FAILURE, 'invalid handle');
    if (h.kind === 'file') await applyAttrs('', attrs, h.fd);
    else await applyAttrs(h.real, attrs);
    s.ok(reqId);
  },
  STAT: async (s, reqId, p: string) => s.sftp.attrs(reqId, toAttrs(await fsp.stat(s.toReal(p)))),
  LSTAT: async (s, reqId, p: string) => s.sftp.attrs(reqId, toAttrs(await fsp.lstat(s.toReal(p)))),
  SETSTAT: async (s, reqId, p: string, attrs: Attributes) => {
    await applyAttrs(s.toReal(p), attrs);
    s.ok(reqId);
  },
  OPENDIR: async (s, reqId, p: string) => {
    const real = s.toReal(p);
    const stats = await fsp.stat(real);
    if (!stats.isDirectory()) return s.sftp.status(reqId, STATUS_CODE.FAILURE, 'not a directory');
    s.sftp.handle(reqId, s.newHandle({ kind: 'dir', real, vpath: s.toVirtual(p), pos: 0 }));
  },
  READDIR: async (s, reqId, hbuf: Buffer) => {
    const h = s.lookup(hbuf);
    if (h?.kind !== 'dir') return s.sftp.status(reqId, STATUS_CODE.FAILURE, 'invalid handle');
    h.entries ??= await dirEntries(h.real, h.vpath);
    if (h.pos >= h.entries.length) return s.sftp.status(reqId, STATUS_CODE.EOF);
    const batch = h.entries.slice(h.pos, h.pos + 64);
    h.pos += batch.length;
    s.sftp.name(reqId, batch);
  },
  MKDIR: async (s, reqId, p: string, attrs: Attributes) => {
    const a = attrs as Partial<Attributes> | undefined;
    await fsp.mkdir(s.toReal(p), { mode: typeof a?.mode === 'number' ? a.mode & 0o7777 : 0o755 });
    s.ok(reqId);
  },
  RMDIR: async (s, reqId, p: string) => {
    if (s.toVirtual(p) === '/') return s.sftp.status(reqId, STATUS_CODE.PERMISSION_DENIED, 'cannot remove the root');
    await fsp.rmdir(s.toReal(p));
    s.ok(reqId);
  },
  REMOVE: async (s, reqId, p: string) => {
    await fsp.unlink(s.toReal(p));
    s.ok(reqId);
  },
  // Like OpenSSH's sftp-server (protocol v3): RENAME refuses to overwrite an existing target.
  // For an atomic replace, upload to a temp name and `mv -f` it over via exec.
  RENAME: async (s, reqId, oldPath: string, newPath: string) => {
    const from = s.toReal(oldPath);
    const to = s.toReal(newPath);
    const exists = await fsp.lstat(to).then(
      () => true,
      () => false,
    );
    if (exists) return s.sftp.status(reqId, STATUS_CODE.FAILURE, 'target exists');
    await fsp.rename(from, to);
    s.ok(reqId);
  },
} satisfies Record<string, RequestHandler>;

/** A directory's entries for READDIR, read once per handle: ".", ".." (the root's is itself), then by name. */
async function dirEntries(real: string, vpath: string): Promise<FileEntry[]> {
  const names = ['.', '..', ...(await fsp.readdir(real)).sort()];
  const entries: FileEntry[] = [];
  for (const name of names) {
    const realChild = name === '..' && vpath === '/' ? real : path.join(real, name);
    try {
      const stats = await fsp.lstat(realChild);
      entries.push({ filename: name, longname: longname(name, stats), attrs: toAttrs(stats) });
    } catch {
      /* vanished meanwhile */
    }
  }
  return entries;
}

/** Serves one SFTP session; `ready` resolves to the sandbox once it exists, and every request waits for it. */
export function serveSftp(st: DeviceState, sftp: SFTPWrapper, ready: Promise<string>): void {
  const session = sftpSession(st, sftp);

  sftp.on('error', () => {});
  // Client sent EOF (OpenSSH's sftp does this on exit and then waits for us): close the channel,
  // like sftp-server exiting would.
  sftp.on('end', () => {
    try {
      (sftp as SFTPWrapper & { end(): void }).end();
    } catch {
      /* already closed */
    }
  });
  sftp.on('close', () => {
    for (const h of session.handles.values()) if (h.kind === 'file') void h.fd.close().catch(() => {});
    session.handles.clear();
  });

  // Each request waits for the sandbox; what its handler throws is answered as a status (session gone: nothing).
  const on = sftp.on.bind(sftp) as (event: string, listener: (reqId: number, ...args: never[]) => void) => void;
  for (const [event, handler] of Object.entries(REQUESTS) as Array<[string, RequestHandler]>) {
    on(event, (reqId, ...args) => {
      ready
        .then(() => handler(session, reqId, ...args))
        .catch((err: unknown) => {
          try {
            sftp.status(reqId, statusFor(err), (err as Error).message);
          } catch {
            /* session gone */
          }
        });
    });
  }
}
