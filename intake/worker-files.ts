import { lstatSync, realpathSync, statSync } from 'node:fs';
import { isAbsolute, resolve } from 'node:path';
import { WavegateError } from '../core/errors';
import { pathInside } from '../core/secret-policy';
import { outsideRootsRefusal, withoutContent } from '../core/worker-files';

/**
 * Files read on a worker (or a board) because an input named them, only under the roots the process
 * was configured with (core/worker-files.ts says why). A workflow input is written by whoever can start
 * a workflow in the namespace, so its paths are checked here as a webhook's secret file is: as text
 * (`..` resolved), then with links resolved, and the real path is what is read.
 */

/** The worker's inventory roots, as a variable (`:`-separated, as PATH) when `--inventory-root` is not given. */
export const INVENTORY_ROOTS_ENV = 'WAVEGATE_INVENTORY_ROOTS';

/** How a worker's refusal says what allows a path: the flag and the variable, or what to do instead. */
export const WORKER_INVENTORY_ROOTS = {
  reads: 'worker reads inventories and canary specs',
  allow: `start the worker with --inventory-root <dir> (or $${INVENTORY_ROOTS_ENV}) naming a directory that holds it; a rollout started without --inventory-on-worker needs none (its inventory is stored in Temporal)`,
};

/**
 * Where `path` really is, if it is under `dir`: as text (`..` resolved) and, when it exists, with links
 * resolved (a link inside `dir` to /etc/shadow is outside). `mustExist` (the process that reads it): a
 * path that does not resolve here is `unreadable`. Without it (a machine that checks a path another one
 * reads), an absent file passes on the textual check.
 */
export function resolveUnder(
  path: string,
  dir: string,
  mustExist: boolean,
): { realPath: string } | { refused: 'outside' | 'unreadable' } {
  if (!path.startsWith('/') || !pathInside(path, dir)) return { refused: 'outside' };
  let exists = true;
  try {
    lstatSync(path);
  } catch {
    exists = false;
  }
  if (!exists) return mustExist ? { refused: 'unreadable' } : { realPath: path };
  let realPath: string;
  let realDir: string;
  try {
    realPath = realpathSync(path);
    realDir = realpathSync(dir);
  } catch {
    // A dangling link, a loop, a directory we cannot search: here it cannot be judged, so not read.
    return mustExist ? { refused: 'unreadable' } : { realPath: path };
  }
  return pathInside(realPath, realDir) ? { realPath } : { refused: 'outside' };
}

/**
 * The real path of a file an input named, if it is under one of `roots`; INVALID_INPUT naming the
 * field, the path and how to allow it otherwise (nothing about the file: not even whether it exists
 * outside the roots).
 */
export function fileUnderRoots(
  field: string,
  path: string,
  roots: readonly string[],
  how: { reads: string; allow: string },
): string {
  let unreadable = false;
  for (const root of roots) {
    const where = resolveUnder(path, root, true);
    if ('realPath' in where) return where.realPath;
    if (where.refused === 'unreadable') unreadable = true;
  }
  if (unreadable)
    throw new WavegateError(
      'INVALID_INPUT',
      `${field} ${JSON.stringify(path)}: cannot be read on this host (missing, or a link that does not resolve)`,
      { field, value: path, contentFree: true },
    );
  throw outsideRootsRefusal(field, path, roots, how);
}

/** Whether `dir` is `root` itself once links are resolved (a canary's profiles root must be the worker's own). */
export function sameDirectory(dir: string, root: string): boolean {
  try {
    return isAbsolute(dir) && realpathSync(dir) === realpathSync(root);
  } catch {
    return false;
  }
}

/**
 * Read a file an input named, under `roots`, with `read` given its real path; any refusal (the path,
 * the read, the parse, the schema) is rebuilt without a byte of the file (core/worker-files.ts).
 */
export function readUnderRoots<T>(
  field: string,
  path: string,
  roots: readonly string[],
  how: { reads: string; allow: string },
  what: string,
  read: (realPath: string) => T,
): T {
  const realPath = fileUnderRoots(field, path, roots, how);
  try {
    return read(realPath);
  } catch (err) {
    if (err instanceof WavegateError) throw withoutContent(field, path, what, err);
    throw err;
  }
}

/**
 * The worker's inventory roots: each `--inventory-root` given, else `$WAVEGATE_INVENTORY_ROOTS`
 * (`:`-separated), else none (the worker reads no inventory or canary file: rollouts bring their
 * inventory in Temporal). Each must be an existing directory: INVALID_INPUT naming it otherwise.
 */
export function resolveInventoryRoots(flags: readonly string[] | undefined, env: NodeJS.ProcessEnv = process.env) {
  const fromFlag = flags !== undefined && flags.length > 0;
  const given = fromFlag ? [...flags] : (env[INVENTORY_ROOTS_ENV] ?? '').split(':').filter((d) => d.trim());
  const source = fromFlag ? '--inventory-root' : `$${INVENTORY_ROOTS_ENV}`;
  return given.map((dir) => {
    const abs = resolve(dir);
    let isDir = false;
    try {
      isDir = statSync(abs).isDirectory();
    } catch {
      isDir = false;
    }
    if (!dir.trim() || !isDir)
      throw new WavegateError('INVALID_INPUT', `${source} ${JSON.stringify(dir)}: not a directory`, {
        field: source,
        value: dir,
      });
    return abs;
  });
}
