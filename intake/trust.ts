import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { WavegateError } from '../core/errors';
import { verifyRevocations, withRevocations, type RevocationList } from '../core/revocation';
import { parseTrust, type Trust } from '../core/signing';
import { walkRoots, type RootAnchor } from '../core/trust-root';
import { checkedDocument, parseDocumentText, readBytes, readDocument, writeFileAtomic } from './files';
import { profileDir, type ProfileDir } from './profile-dir';

/**
 * A profile's pins, or undefined for a profile without pins (unsigned). The CLI verifies envelopes against
 * these before it starts anything; a worker loads its own copy the same way (its `profilesRoot` is a profiles
 * directory) before every apply. A bad profile name or an unusable trust file is INVALID_INPUT naming it.
 *
 * The pins are the newest trust root reached from `trust.yaml` (version 0) through `root/<n>.json`, one version
 * at a time (core/trust-root.ts), with the signed revocation list `revocations.json` applied (core/revocation.ts).
 * Nothing here fails open: a root or a list that does not verify refuses the profile (every envelope of it is then
 * refused, naming why), never falls back to older pins.
 */
export function loadTrust(profilesRoot: string, profile: string): Trust | undefined {
  return loadProfileTrust(profileDir(profilesRoot, profile));
}

/** The same for a profile directory already located. */
export function loadProfileTrust(layout: ProfileDir): Trust | undefined {
  return profileTrustState(layout)?.trust;
}

/**
 * The profile's trust state, parsed and verified once per content of its trust files (trust.yaml, root/, the list,
 * the marks): a worker asks for every device's apply. Any edit, however quick, is read afresh: the bytes are read
 * every time and compared (they are a few small files). What throws is not kept.
 */
export function profileTrustState(layout: ProfileDir): ProfileTrustState | undefined {
  const stamp = trustFilesStamp(layout);
  const known = stamp === undefined ? undefined : verified.get(layout.dir);
  if (known && stamp && known.stamp.equals(stamp)) return known.state;
  const state = walkedTrustState(layout);
  if (stamp) {
    verified.delete(layout.dir);
    if (verified.size >= 256) verified.delete(verified.keys().next().value!);
    verified.set(layout.dir, { stamp, state });
  }
  return state;
}

const verified = new Map<string, { stamp: Buffer; state: ProfileTrustState | undefined }>();

/** Every trust file's name and bytes, as one buffer; undefined when one cannot be read (then nothing is kept). */
function trustFilesStamp(layout: ProfileDir): Buffer | undefined {
  try {
    const parts: Buffer[] = [];
    const add = (path: string) => {
      parts.push(Buffer.from(`\0${path}\0`));
      if (existsSync(path)) parts.push(readBytes(path));
    };
    add(layout.trustFile);
    add(layout.revocationsFile);
    add(layout.heldTrustFile);
    if (existsSync(layout.rootDir))
      for (const name of readdirSync(layout.rootDir).sort()) add(join(layout.rootDir, name));
    return Buffer.concat(parts);
  } catch {
    return undefined;
  }
}

/** A profile's trust as walked: its root (version 0: trust.yaml) and revocation list, and the trust they give. */
export interface ProfileTrustState {
  root: RootAnchor;
  revocations?: RevocationList;
  trust: Trust;
}

/** The profile's trust state, or undefined when it is unsigned (no trust.yaml, no root, no list). */
function walkedTrustState(layout: ProfileDir): ProfileTrustState | undefined {
  const hasAnchor = existsSync(layout.trustFile);
  const roots = rootFiles(layout);
  const hasList = existsSync(layout.revocationsFile);
  if (!hasAnchor) {
    if (roots.length > 0 || hasList)
      throw refusal(
        layout.trustFile,
        `missing: ${roots.length > 0 ? layout.rootDir : layout.revocationsFile} is there, but its anchor (version 0 of the trust root) is not; restore trust.yaml`,
      );
    return undefined;
  }
  const anchor: RootAnchor = { version: 0, trust: parseTrust(readDocument(layout.trustFile), layout.trustFile) };
  const held = heldMarks(layout);
  const root = walkedRoot(layout, anchor, roots, held.root);
  const revocations = hasList ? verifiedList(layout, root, held.revocations) : undefined;
  if (!hasList && held.revocations)
    throw refusal(
      layout.revocationsFile,
      `missing: revocation list v${held.revocations.version} was verified here before; a revocation is never undone by deleting the list`,
    );
  remember(layout, held, {
    ...('content' in root ? { root: { version: root.content.version, digest: root.digest } } : {}),
    ...(revocations ? { revocations: { version: revocations.content.version, digest: revocations.digest } } : {}),
  });
  return {
    root,
    ...(revocations ? { revocations } : {}),
    trust: withRevocations(root.trust, revocations),
  };
}

/** A root is a few pins (64 at most): far below this. Read no further before it is trusted. */
const MAX_ROOT_BYTES = 64 * 1024;
/** A revocation list of MAX_REVOCATIONS entries with their reasons fits. */
const MAX_LIST_BYTES = 1024 * 1024;

/** A JSON trust document read only up to `maxBytes` (INVALID_INPUT naming the file and its size beyond). */
function boundedDocument(path: string, maxBytes: number): unknown {
  return checkedDocument(parseDocumentText(readBytes(path, maxBytes).toString('utf8'), path, 'json'), path);
}

/** The most root files a profile directory may hold (a rotation a day for 27 years). */
const MAX_LOCAL_ROOTS = 10_000;

/** `root/<n>.json`, by version. A name that is not a version is refused: nothing is guessed. */
function rootFiles(layout: ProfileDir): { version: number; path: string }[] {
  if (!existsSync(layout.rootDir)) return [];
  const out: { version: number; path: string }[] = [];
  for (const name of readdirSync(layout.rootDir)) {
    if (name.startsWith('.')) continue;
    const match = /^([1-9][0-9]{0,6})\.json$/.exec(name);
    if (!match)
      throw refusal(`${layout.rootDir}/${name}`, 'not a trust root file name (expected <version>.json, e.g. 2.json)');
    out.push({ version: Number(match[1]), path: layout.rootFile(Number(match[1])) });
    if (out.length > MAX_LOCAL_ROOTS)
      throw refusal(layout.rootDir, `more than ${MAX_LOCAL_ROOTS} trust root files; refusing to walk them`);
  }
  return out.sort((a, b) => a.version - b.version);
}

/**
 * The newest root reachable from trust.yaml, held to the high-water mark: a directory that lost versions a
 * verifier here already walked to (rolled back) or holds another root at that version (forked) is refused.
 */
function walkedRoot(
  layout: ProfileDir,
  anchor: RootAnchor,
  files: readonly { version: number; path: string }[],
  held: Mark | undefined,
): RootAnchor {
  const walk = walkRoots(
    anchor,
    files.map((f) => boundedDocument(f.path, MAX_ROOT_BYTES)),
    // The operator's own directory, every file already bounded in size (boundedDocument): walked whole.
    { profile: layout.name, maxSteps: MAX_LOCAL_ROOTS },
  );
  if (!walk.ok) throw refusal(layout.rootDir, `${walk.reason}: ${walk.message}`);
  const root = walk.root;
  const reached = 'content' in root ? { version: root.content.version, digest: root.digest } : undefined;
  const problem = markProblem('trust root', held, reached);
  if (problem) throw refusal(layout.rootDir, problem);
  return root;
}

function verifiedList(layout: ProfileDir, root: RootAnchor, held: Mark | undefined): RevocationList {
  const list = verifyRevocations(boundedDocument(layout.revocationsFile, MAX_LIST_BYTES), root.trust, {
    profile: layout.name,
  });
  if (!('content' in list)) throw refusal(layout.revocationsFile, `${list.reason}: ${list.message}`);
  const problem = markProblem('revocation list', held, { version: list.content.version, digest: list.digest });
  if (problem) throw refusal(layout.revocationsFile, problem);
  return list;
}

/** A version and the digest of what carried it: what a verifier reached. */
interface Mark {
  version: number;
  digest: string;
}

/** The newest root and list a verifier of this directory reached: in trust-held.json and this process's memory. */
interface HeldMarks {
  root?: Mark;
  revocations?: Mark;
}

/** Refused: below the mark (rolled back: versions lost), or at it with other content (forked). */
function markProblem(what: string, held: Mark | undefined, reached: Mark | undefined): string | undefined {
  if (!held) return undefined;
  const version = reached?.version ?? 0;
  if (held.version > version)
    return `METADATA_ROLLBACK: ${what} v${held.version} was verified here before, but the newest now is v${version}: it never goes back; restore the missing versions`;
  if (held.version === version && reached && held.digest !== reached.digest)
    return `ROOT_FORK: ${what} v${version} differs from the one verified here before`;
  return undefined;
}

const marks = new Map<string, HeldMarks>();

function heldMarks(layout: ProfileDir): HeldMarks {
  const inMemory = marks.get(layout.dir) ?? {};
  if (!existsSync(layout.heldTrustFile)) return inMemory;
  const data = readDocument(layout.heldTrustFile, 'json') as Record<string, unknown>;
  const onDisk: HeldMarks = {};
  for (const key of ['root', 'revocations'] as const) {
    const mark = data?.[key] as Partial<Mark> | undefined;
    if (mark === undefined) continue;
    if (typeof mark?.version !== 'number' || typeof mark.digest !== 'string')
      throw refusal(layout.heldTrustFile, `${key}: not a mark ({"version": n, "digest": "<hex>"})`);
    onDisk[key] = { version: mark.version, digest: mark.digest };
  }
  const newer = (a?: Mark, b?: Mark) => (!a ? b : !b ? a : a.version >= b.version ? a : b);
  const root = newer(onDisk.root, inMemory.root);
  const revocations = newer(onDisk.revocations, inMemory.revocations);
  return { ...(root ? { root } : {}), ...(revocations ? { revocations } : {}) };
}

/** Raise the marks reached above those held; written to trust-held.json when the directory is writable, else kept in memory. */
function remember(layout: ProfileDir, held: HeldMarks, reached: HeldMarks): void {
  const next: HeldMarks = { ...held };
  let raised = false;
  for (const key of ['root', 'revocations'] as const) {
    const mark = reached[key];
    if (mark && (!held[key] || held[key].version < mark.version)) {
      next[key] = mark;
      raised = true;
    }
  }
  if (!raised) return;
  marks.set(layout.dir, next);
  try {
    writeFileAtomic(layout.heldTrustFile, `${JSON.stringify(next)}\n`);
  } catch {
    // A read-only profiles directory (a worker's copy): the marks are kept for this process's life only.
  }
}

function refusal(source: string, problem: string): WavegateError {
  return new WavegateError('INVALID_INPUT', `${source}: ${problem}`, { source });
}
