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

/** Serves one SFTP session; `ready` resolves to the sandbox once it exists, and every request waits for it. */
export function serveSftp(st: DeviceState, sftp: SFTPWrapper, ready: Promise<string>): void {
  const sandbox = st.dev.sandbox;
  const handles = new Map<string, SftpHandle>();
  let nextHandle = 0;

  /** Virtual path ("/" = sandbox); `..` cannot climb above it; real sandbox paths are accepted as-is. */
  const toVirtual = (p: string): string => {
    const v = path.posix.resolve('/', p || '.');
    if (v === sandbox) return '/';
    if (v.startsWith(`${sandbox}/`)) return v.slice(sandbox.length);
    return v;
  };
  const toReal = (p: string): string => path.join(sandbox, toVirtual(p));

  const newHandle = (h: SftpHandle): Buffer => {
    const buf = Buffer.alloc(4);
    buf.writeUInt32BE(nextHandle++ >>> 0, 0);
    handles.set(buf.toString('hex'), h);
    return buf;
  };
  const lookup = (buf: Buffer): SftpHandle | undefined => handles.get(buf.toString('hex'));

  const safe = (reqId: number, fn: () => Promise<void>): void => {
    ready.then(fn).catch((err: unknown) => {
      try {
        sftp.status(reqId, statusFor(err), (err as Error).message);
      } catch {
        /* session gone */
      }
    });
  };
  const ok = (reqId: number): void => sftp.status(reqId, STATUS_CODE.OK);

  const applyAttrs = async (
    real: string,
    attrs: Partial<Attributes> | undefined,
    fd?: fsp.FileHandle,
  ): Promise<void> => {
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
  };

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
    for (const h of handles.values()) if (h.kind === 'file') void h.fd.close().catch(() => {});
    handles.clear();
  });

  sftp.on('REALPATH', (reqId, p) => {
    safe(reqId, async () => {
      const v = toVirtual(p);
      sftp.name(reqId, [{ filename: v, longname: v, attrs: {} as Attributes }]);
    });
  });

  sftp.on('OPEN', (reqId, filename, flags, attrs) => {
    safe(reqId, async () => {
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
      const real = toReal(filename);
      const fd = await fsp.open(real, f, mode);
      if (write) st.sftpOpens++;
      sftp.handle(reqId, newHandle({ kind: 'file', fd, vpath: toVirtual(filename) }));
    });
  });

  sftp.on('READ', (reqId, hbuf, offset, len) => {
    safe(reqId, async () => {
      const h = lookup(hbuf);
      if (h?.kind !== 'file') return sftp.status(reqId, STATUS_CODE.FAILURE, 'invalid handle');
      const buf = Buffer.alloc(Math.min(len, MAX_READ));
      const { bytesRead } = await h.fd.read(buf, 0, buf.length, offset);
      if (bytesRead === 0) return sftp.status(reqId, STATUS_CODE.EOF);
      sftp.data(reqId, buf.subarray(0, bytesRead));
    });
  });

  sftp.on('WRITE', (reqId, hbuf, offset, data) => {
    safe(reqId, async () => {
      const h = lookup(hbuf);
      if (h?.kind !== 'file') return sftp.status(reqId, STATUS_CODE.FAILURE, 'invalid handle');
      let written = 0;
      while (written < data.length) {
        const { bytesWritten } = await h.fd.write(data, written, data.length - written, offset + written);
        written += bytesWritten;
      }
      st.sftpBytes += written;
      ok(reqId);
    });
  });

  sftp.on('CLOSE', (reqId, hbuf) => {
    safe(reqId, async () => {
      const key = hbuf.toString('hex');
      const h = handles.get(key);
      if (!h) return sftp.status(reqId, STATUS_CODE.FAILURE, 'invalid handle');
      handles.delete(key);
      if (h.kind === 'file') await h.fd.close();
      ok(reqId);
    });
  });

  sftp.on('FSTAT', (reqId, hbuf) => {
    safe(reqId, async () => {
      const h = lookup(hbuf);
      if (!h) return sftp.status(reqId, STATUS_CODE.FAILURE, 'invalid handle');
      const s = h.kind === 'file' ? await h.fd.stat() : await fsp.stat(h.real);
      sftp.attrs(reqId, toAttrs(s));
    });
  });

  sftp.on('FSETSTAT', (reqId, hbuf, attrs) => {
    safe(reqId, async () => {
      const h = lookup(hbuf);
      if (!h) return sftp.status(reqId, STATUS_CODE.FAILURE, 'invalid handle');
      if (h.kind === 'file') await applyAttrs('', attrs, h.fd);
      else await applyAttrs(h.real, attrs);
      ok(reqId);
    });
  });

  sftp.on('STAT', (reqId, p) => safe(reqId, async () => sftp.attrs(reqId, toAttrs(await fsp.stat(toReal(p))))));
  sftp.on('LSTAT', (reqId, p) => safe(reqId, async () => sftp.attrs(reqId, toAttrs(await fsp.lstat(toReal(p))))));

  sftp.on('SETSTAT', (reqId, p, attrs) => {
    safe(reqId, async () => {
      await applyAttrs(toReal(p), attrs);
      ok(reqId);
    });
  });

  sftp.on('OPENDIR', (reqId, p) => {
    safe(reqId, async () => {
      const real = toReal(p);
      const s = await fsp.stat(real);
      if (!s.isDirectory()) return sftp.status(reqId, STATUS_CODE.FAILURE, 'not a directory');
      sftp.handle(reqId, newHandle({ kind: 'dir', real, vpath: toVirtual(p), pos: 0 }));
    });
  });

  sftp.on('READDIR', (reqId, hbuf) => {
    safe(reqId, async () => {
      const h = lookup(hbuf);
      if (h?.kind !== 'dir') return sftp.status(reqId, STATUS_CODE.FAILURE, 'invalid handle');
      if (!h.entries) {
        const names = ['.', '..', ...(await fsp.readdir(h.real)).sort()];
        const entries: FileEntry[] = [];
        for (const name of names) {
          const realChild = name === '..' && h.vpath === '/' ? h.real : path.join(h.real, name);
          try {
            const s = await fsp.lstat(realChild);
            entries.push({ filename: name, longname: longname(name, s), attrs: toAttrs(s) });
          } catch {
            /* vanished meanwhile */
          }
        }
        h.entries = entries;
      }
      if (h.pos >= h.entries.length) return sftp.status(reqId, STATUS_CODE.EOF);
      const batch = h.entries.slice(h.pos, h.pos + 64);
      h.pos += batch.length;
      sftp.name(reqId, batch);
    });
  });

  sftp.on('MKDIR', (reqId, p, attrs) => {
    safe(reqId, async () => {
      const a = attrs as Partial<Attributes> | undefined;
      await fsp.mkdir(toReal(p), { mode: typeof a?.mode === 'number' ? a.mode & 0o7777 : 0o755 });
      ok(reqId);
    });
  });

  sftp.on('RMDIR', (reqId, p) => {
    safe(reqId, async () => {
      if (toVirtual(p) === '/') return sftp.status(reqId, STATUS_CODE.PERMISSION_DENIED, 'cannot remove the root');
      await fsp.rmdir(toReal(p));
      ok(reqId);
    });
  });

  sftp.on('REMOVE', (reqId, p) => {
    safe(reqId, async () => {
      await fsp.unlink(toReal(p));
      ok(reqId);
    });
  });

  // Like OpenSSH's sftp-server (protocol v3): RENAME refuses to overwrite an existing target.
  // For an atomic replace, upload to a temp name and `mv -f` it over via exec.
  sftp.on('RENAME', (reqId, oldPath, newPath) => {
    safe(reqId, async () => {
      const from = toReal(oldPath);
      const to = toReal(newPath);
      const exists = await fsp.lstat(to).then(
        () => true,
        () => false,
      );
      if (exists) return sftp.status(reqId, STATUS_CODE.FAILURE, 'target exists');
      await fsp.rename(from, to);
      ok(reqId);
    });
  });
}
