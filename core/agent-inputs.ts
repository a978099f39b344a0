/**
 * What `wavegate agent` accepts of its own inputs before it syncs anything: decisions only,
 * on facts the caller read from the file system (agent/inputs.ts reads them). Each answer is the
 * problem in words, or undefined when there is none.
 */

/** What stat said of one path. */
export interface PathFacts {
  kind: 'file' | 'directory' | 'other';
  /** st_mode's permission bits, sticky included (mode & 0o7777). */
  mode: number;
  uid: number;
}

/** `0644` */
export function modeText(mode: number): string {
  return (mode & 0o7777).toString(8).padStart(4, '0');
}

/**
 * A gateway the agent may reach over plain HTTP without --insecure-http: the loopback interface only,
 * as the gateway itself listens on plain HTTP only there. `hostname` as URL#hostname gives it (IPv6 in
 * brackets).
 */
export function isLoopbackHostname(hostname: string): boolean {
  const host = hostname.toLowerCase().replace(/^\[|\]$/g, '');
  if (host === 'localhost' || host === '::1' || host === '0:0:0:0:0:0:0:1') return true;
  const v4 = /^127\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/.exec(host);
  return !!v4 && v4.slice(1).every((o) => Number(o) <= 255);
}

const writableBy = (mode: number) => (mode & 0o002 ? 'world' : 'group');

/**
 * The device's trust anchor (a `--trust` file: the pins every revision is verified against) is held to
 * sshd's StrictModes: whoever may change it may make the agent run anything. The file: regular, owned by
 * the agent's user or root, writable by no one else. Its directory: owned by the agent's user or root,
 * not writable by others unless sticky (then others cannot rename or replace a file they do not own).
 * `uid` undefined: a platform without uids (the ownership checks are skipped).
 */
export function trustFileProblem(
  file: PathFacts,
  dir: PathFacts,
  uid: number | undefined,
  dirPath: string,
): string | undefined {
  if (file.kind !== 'file') return 'is not a regular file';
  if (uid !== undefined && file.uid !== uid && file.uid !== 0)
    return `is owned by uid ${file.uid}, not by this user (uid ${uid}) or root`;
  if (file.mode & 0o022) return `is ${writableBy(file.mode)}-writable (mode ${modeText(file.mode)})`;
  return trustDirProblem(dir, uid, dirPath);
}

/** A directory that holds trust files (a `--trust DIR`, or a trust file's own directory). */
export function trustDirProblem(dir: PathFacts, uid: number | undefined, dirPath: string): string | undefined {
  if (dir.kind !== 'directory') return `${dirPath} is not a directory`;
  if (uid !== undefined && dir.uid !== uid && dir.uid !== 0)
    return `its directory ${dirPath} is owned by uid ${dir.uid}, not by this user (uid ${uid}) or root`;
  if (dir.mode & 0o022 && !(dir.mode & 0o1000))
    return `its directory ${dirPath} is ${writableBy(dir.mode)}-writable (mode ${modeText(dir.mode)}) and not sticky`;
  return undefined;
}

/**
 * The agent's state directory (identity key, report.json, staged pins, payload downloads): a directory
 * of the agent's own user that no one else may write. A mode that only lets others read or list it is
 * fixable (the agent sets 0700 and says so); one that lets others write is refused: they may already
 * have planted a report or a payload in it.
 */
export function stateDirProblem(dir: PathFacts, uid: number | undefined): string | undefined {
  if (dir.kind !== 'directory') return 'is not a directory';
  if (uid !== undefined && dir.uid !== uid) return `is owned by uid ${dir.uid}, not by this user (uid ${uid})`;
  if (dir.mode & 0o022)
    return `is ${writableBy(dir.mode)}-writable (mode ${modeText(dir.mode)}); make it the agent user's own, chmod 700, and check what is in it`;
  return undefined;
}

/** The identity key: a regular file only the agent's user may read (ssh's rule for a private key). */
export function identityKeyProblem(file: PathFacts, maxBytes: number, size: number): string | undefined {
  if (file.kind !== 'file') return 'is not a regular file (a FIFO, device or directory)';
  if (file.mode & 0o077) return `mode ${modeText(file.mode)} lets others read the identity key; chmod 600 it`;
  if (size > maxBytes) return `is ${size} bytes; an identity key file is at most ${maxBytes}`;
  return undefined;
}
