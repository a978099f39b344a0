import { chmodSync, mkdirSync, realpathSync, statSync, type Stats } from 'node:fs';
import { dirname, resolve } from 'node:path';
import {
  identityKeyProblem,
  isLoopbackHostname,
  modeText,
  stateDirProblem,
  trustDirProblem,
  trustFileProblem,
  type PathFacts,
} from '../core/agent-inputs';
import { WavegateError } from '../core/errors';
import { readBytes } from '../intake/files';

/**
 * The file-system side of `wavegate agent`'s input checks (the decisions are core/agent-inputs.ts):
 * every refusal is INVALID_INPUT naming the flag and the path or value, so the CLI exits 2 before
 * anything syncs, and nothing a flag names is opened in a way that could block (FIFOs) or never end
 * (devices).
 */

const ownUid = (): number | undefined => (typeof process.getuid === 'function' ? process.getuid() : undefined);

function facts(stat: Stats): PathFacts {
  return {
    kind: stat.isFile() ? 'file' : stat.isDirectory() ? 'directory' : 'other',
    mode: stat.mode & 0o7777,
    uid: stat.uid,
  };
}

const errno = (err: unknown) => (err as NodeJS.ErrnoException).code ?? String(err);

/** `--gateway`: an http(s) URL without credentials, query or fragment; plain HTTP only to loopback unless `insecureHttp`. */
export function gatewayUrl(value: string, insecureHttp: boolean): string {
  let url: URL | undefined;
  try {
    url = new URL(value);
  } catch {
    url = undefined;
  }
  // Never echo a password someone put in the URL.
  const shown = value.replace(/\/\/[^/@]*@/, '//***@');
  if (!url || !['http:', 'https:'].includes(url.protocol) || url.username || url.password || url.search || url.hash) {
    throw new WavegateError(
      'INVALID_INPUT',
      `--gateway: must be an http(s)://host:port URL without credentials, query or fragment (got ${JSON.stringify(shown)})`,
      { field: '--gateway', value: shown },
    );
  }
  if (url.protocol === 'http:' && !insecureHttp && !isLoopbackHostname(url.hostname)) {
    // The requests are signed, but a plain-HTTP path lets anyone on it read the desired revisions and
    // payloads, and hold or replay what the gateway answers; the gateway refuses such a listen too.
    throw new WavegateError(
      'INVALID_INPUT',
      `--gateway ${JSON.stringify(shown)}: plain HTTP only to a gateway on loopback (127.0.0.1, ::1, localhost); use https://, or give --insecure-http when a TLS-terminating proxy or a private link carries it`,
      { field: '--gateway', value: shown },
    );
  }
  return value.replace(/\/+$/, '');
}

/** The bytes of a file a flag names, through the bounded regular-file reader; INVALID_INPUT naming the flag and path. */
export function readFlagFile(flag: string, path: string): Buffer {
  try {
    return readBytes(path);
  } catch (err) {
    if (err instanceof WavegateError)
      throw new WavegateError('INVALID_INPUT', `${flag} ${err.message}`, { field: flag, value: path });
    throw err;
  }
}

/** An identity key file is a small JSON document; anything bigger is not one. */
export const MAX_IDENTITY_KEY_BYTES = 64 * 1024;

/** The identity key's text: a regular file, 0600 or tighter (like ssh's private keys), small; refused naming `--key` and the path. */
export function readIdentityKeyText(path: string): string {
  let stat: Stats;
  try {
    stat = statSync(path);
  } catch (err) {
    throw new WavegateError(
      'INVALID_INPUT',
      `--key ${path}: cannot read the identity key (${errno(err)}); create one with \`wavegate agent enroll --state-dir DIR\``,
      { field: '--key', value: path },
    );
  }
  const problem = identityKeyProblem(facts(stat), MAX_IDENTITY_KEY_BYTES, stat.size);
  if (problem) throw new WavegateError('INVALID_INPUT', `--key ${path}: ${problem}`, { field: '--key', value: path });
  // Read through the bounded reader all the same: the path may have been swapped for a FIFO since.
  return readFlagFile('--key', path).toString('utf8');
}

/**
 * The agent's state directory, checked and made ready: created 0700 when missing; refused when it is not
 * a directory, not the agent user's own, or writable by others; a mode that only lets others read it is
 * set to 0700 and said through `log`. Returns the absolute path.
 */
export function prepareStateDir(flag: string, path: string, log: (line: string) => void): string {
  const dir = resolve(path);
  const refuse = (why: string) =>
    new WavegateError('INVALID_INPUT', `${flag} ${dir}: ${why}`, { field: flag, value: path });
  let stat: Stats | undefined;
  try {
    stat = statSync(dir);
  } catch (err) {
    if (errno(err) === 'ENOTDIR') throw refuse('a parent of it is not a directory');
    if (errno(err) !== 'ENOENT') throw refuse(`cannot use it (${errno(err)})`);
  }
  if (!stat) {
    try {
      mkdirSync(dir, { recursive: true, mode: 0o700 });
      stat = statSync(dir);
    } catch (err) {
      // ENOTDIR: a parent is a file; EACCES: not ours to create.
      throw refuse(`cannot create it (${errno(err)})`);
    }
  }
  const problem = stateDirProblem(facts(stat), ownUid());
  if (problem) throw refuse(problem);
  if (stat.mode & 0o077) {
    chmodSync(dir, 0o700);
    log(`${flag} ${dir}: mode ${modeText(stat.mode & 0o777)} was looser than 0700; set to 0700`);
  }
  return dir;
}

/** `--home`: the device home must be a directory. */
export function checkHomeDir(path: string): string {
  const dir = resolve(path);
  let isDir = false;
  try {
    isDir = statSync(dir).isDirectory();
  } catch {
    /* refused below */
  }
  if (!isDir)
    throw new WavegateError(
      'INVALID_INPUT',
      `--home ${dir}: not a directory (the device home whose .wavegate/ holds markers, floors and apply locks)`,
      { field: '--home', value: path },
    );
  return dir;
}

/**
 * A trust file (the pins revisions are verified against) held to StrictModes (core/agent-inputs.ts):
 * the file where it really is (a symbolic link is followed, and the real file's directory is checked),
 * INVALID_INPUT naming `what`, the path and the mode otherwise.
 */
export function checkTrustFile(path: string, what: string): void {
  let real: string;
  let file: Stats;
  let dir: Stats;
  try {
    real = realpathSync(path);
    file = statSync(real);
    dir = statSync(dirname(real));
  } catch (err) {
    throw new WavegateError('INVALID_INPUT', `${what}: ${path}: cannot read the trust file (${errno(err)})`, {
      field: '--trust',
      value: path,
    });
  }
  const problem = trustFileProblem(facts(file), facts(dir), ownUid(), dirname(real));
  if (problem) throw unsafeTrust(what, real, problem);
}

/** A `--trust DIR` profiles directory: others may not write it (they could put a profile's trust.yaml in). */
export function checkTrustDir(path: string, what: string): void {
  let dir: Stats;
  try {
    dir = statSync(realpathSync(path));
  } catch (err) {
    throw new WavegateError('INVALID_INPUT', `${what}: ${path}: cannot read the directory (${errno(err)})`, {
      field: '--trust',
      value: path,
    });
  }
  const problem = trustDirProblem(facts(dir), ownUid(), path);
  if (problem) throw unsafeTrust(what, path, problem.replace(/^its directory /, 'the profiles directory '));
}

function unsafeTrust(what: string, path: string, problem: string): WavegateError {
  return new WavegateError(
    'INVALID_INPUT',
    `${what}: ${path}: refused: ${problem}; whoever may change this device's pins may make it run anything (chown it to this user or root, chmod go-w; see SECURITY.md)`,
    { field: '--trust', value: path },
  );
}
