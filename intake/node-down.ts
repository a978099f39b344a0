import { closeSync, existsSync, lstatSync, openSync, rmSync, statSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { stringify } from 'yaml';
import { WavegateError } from '../core/errors';
import { EMPTY_NODE_DOWN_FILE, NODE_DOWN_EXPIRY, NodeDownFile } from '../core/node-down';
import { invalidFields, parseWith, type FieldProblem } from '../core/validation';
import { readDocument, writeFileAtomic } from './files';

/**
 * The node-down verdicts file (docs/formats.md, "Node-down verdicts"): beside the inventory, because the
 * worker reads the inventory at snapshot time and the CLI reads it for the board — whoever can read
 * one finds the other. Written atomically (a temp file in the same directory, then rename), read
 * through the bounded reader, validated field by field.
 *
 * Its recheck commands run on the control host, so it is held to sshd's StrictModes: owned by the user
 * reading it (or root) and writable by no one else, in a directory no one else may write either
 * (unless sticky): a file another user could write would be a way to run commands as the worker.
 */

/** `fleet.yaml` → `fleet.verdicts.yaml` (any extension is replaced; none: appended). */
export function verdictsPathFor(inventoryPath: string): string {
  const name = basename(inventoryPath).replace(/\.(ya?ml|json|ini|cfg|txt)$/i, '');
  return join(dirname(inventoryPath), `${name}.verdicts.yaml`);
}

function ownUid(): number | undefined {
  return typeof process.getuid === 'function' ? process.getuid() : undefined;
}

/** StrictModes: the file and its directory must be the reader's (or root's) and not writable by others. */
export function checkStrictModes(path: string): void {
  const uid = ownUid();
  const refuse = (what: string) => {
    throw new WavegateError(
      'INVALID_STATE',
      `${path}: refused: ${what}; its recheck commands would run as this user (fix with chown and chmod go-w, see SECURITY.md)`,
      { source: path, contentFree: true },
    );
  };
  const file = lstatSync(path);
  if (file.isSymbolicLink()) refuse('is a symbolic link');
  if (!file.isFile()) refuse('is not a regular file');
  if (uid !== undefined && file.uid !== uid && file.uid !== 0)
    refuse(`is owned by uid ${file.uid}, not by this user (uid ${uid}) or root`);
  if (file.mode & 0o022)
    refuse(
      `is ${file.mode & 0o002 ? 'world' : 'group'}-writable (mode ${(file.mode & 0o777).toString(8).padStart(4, '0')})`,
    );
  const dir = statSync(dirname(path));
  if (uid !== undefined && dir.uid !== uid && dir.uid !== 0)
    refuse(`its directory ${dirname(path)} is owned by uid ${dir.uid}, not by this user (uid ${uid}) or root`);
  if (dir.mode & 0o022 && !(dir.mode & 0o1000))
    refuse(
      `its directory ${dirname(path)} is writable by others (mode ${(dir.mode & 0o777).toString(8).padStart(4, '0')})`,
    );
}

/** A clock this far ahead of the one that wrote a verdict still reads it as written now. */
export const VERDICT_CLOCK_SKEW_MS = 5 * 60_000;

/** What a reader holds a verdicts file to beyond its shape: the rules `mark-down` writes by. */
export interface VerdictRules {
  /** The inventory the file is beside: every verdict must name one of its devices (absent: not checked, e.g. a page of it). */
  inventory?: readonly { id: string }[];
  /** Now, for "expires more than 365 days ahead" (default: the clock). */
  nowMs?: number;
}

/**
 * The verdicts a reader must refuse, each with its field: one that holds longer than `mark-down` would
 * ever write (more than 365 days after its `since`, or from now), one whose `since` is in the future,
 * and, given the inventory, one naming a device it does not hold. Pure.
 */
export function verdictProblems(file: NodeDownFile, rules: VerdictRules = {}): FieldProblem[] {
  const now = rules.nowMs ?? Date.now();
  const max = NODE_DOWN_EXPIRY.max;
  const days = (ms: number) => `${Math.floor(ms / 86_400_000)} days`;
  const ids = rules.inventory ? new Set(rules.inventory.map((d) => d.id)) : undefined;
  const problems: FieldProblem[] = [];
  file.verdicts.forEach((v, i) => {
    const since = Date.parse(v.since);
    const expires = Date.parse(v.expiresAt);
    if (ids && !ids.has(v.device)) {
      problems.push({
        path: `verdicts[${i}].device`,
        value: v.device,
        message: `names a device the inventory does not hold; lift the verdict with wavegate fleet mark-up ${v.device} --inventory <the inventory>`,
      });
    }
    if (since > now + VERDICT_CLOCK_SKEW_MS) {
      problems.push({
        path: `verdicts[${i}].since`,
        value: v.since,
        message: `is in the future (now is ${new Date(now).toISOString()}); a verdict starts when it is marked`,
      });
    }
    if (expires - since > max) {
      problems.push({
        path: `verdicts[${i}].expiresAt`,
        value: v.expiresAt,
        message: `is ${days(expires - since)} after since (${v.since}); a verdict holds at most 365 days (wavegate fleet mark-down --expires 1h to 365d)`,
      });
    } else if (expires > now + max + VERDICT_CLOCK_SKEW_MS) {
      problems.push({
        path: `verdicts[${i}].expiresAt`,
        value: v.expiresAt,
        message: `is ${days(expires - now)} from now; a verdict holds at most 365 days (wavegate fleet mark-down --expires 1h to 365d)`,
      });
    }
  });
  return problems;
}

/** The file's shape only: what a writer reads to change (mark-up can lift a verdict a reader refuses). */
function readVerdictFile(path: string): NodeDownFile {
  if (!existsSync(path)) return structuredClone(EMPTY_NODE_DOWN_FILE);
  checkStrictModes(path);
  const data = readDocument(path, 'yaml');
  return parseWith(NodeDownFile, data ?? {}, path);
}

/**
 * The verdicts in `path` (none when the file does not exist), held to the rules `mark-down` writes by
 * (verdictProblems; the inventory's devices when given); INVALID_INPUT naming the field otherwise.
 */
export function readVerdicts(path: string, rules: VerdictRules = {}): NodeDownFile {
  const file = readVerdictFile(path);
  const problems = verdictProblems(file, rules);
  if (problems.length) invalidFields(path, problems);
  return file;
}

/** Replace the file at once: readers see the old file or the new one, never half of one. */
export function writeVerdicts(path: string, file: NodeDownFile): void {
  const header =
    '# wavegate node-down verdicts (docs/formats.md, "Node-down verdicts"); written by `wavegate fleet mark-down/mark-up` and by rechecks\n';
  writeFileAtomic(path, header + stringify(file));
}

/** How long a writer waits for another's lock, and when a lock left by a dead process is taken over. */
const LOCK_WAIT_MS = 10_000;
const LOCK_STALE_MS = 60_000;

/**
 * Hold `<path>.lock` (created exclusively) while `fn` runs, so a CLI's mark-down and a worker's recheck
 * writing at the same moment never lose one of the two updates. A lock older than a minute is a dead
 * writer's and is taken over.
 */
function withFileLock<T>(path: string, fn: () => T): T {
  const lock = `${path}.lock`;
  const deadline = Date.now() + LOCK_WAIT_MS;
  for (;;) {
    try {
      closeSync(openSync(lock, 'wx', 0o600));
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      let age = 0;
      try {
        age = Date.now() - statSync(lock).mtimeMs;
      } catch {
        continue; // released meanwhile
      }
      if (age > LOCK_STALE_MS) {
        rmSync(lock, { force: true });
        continue;
      }
      if (Date.now() > deadline)
        throw new WavegateError(
          'CONFLICT',
          `${path}: another writer has held ${lock} for ${Math.round(age / 1000)} s; try again, or remove the lock if no wavegate process is running`,
          { source: path },
        );
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 50);
    }
  }
  try {
    return fn();
  } finally {
    rmSync(lock, { force: true });
  }
}

/** Read, change and write back in one step, under the file's lock (the change is applied to the newest file on disk). */
export function updateVerdicts(path: string, change: (file: NodeDownFile) => NodeDownFile): NodeDownFile {
  return withFileLock(path, () => {
    const next = change(readVerdictFile(path));
    writeVerdicts(path, next);
    return next;
  });
}
