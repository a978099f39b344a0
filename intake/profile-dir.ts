import { existsSync, readdirSync, realpathSync } from 'node:fs';
import { join, resolve, sep } from 'node:path';
import { checkProfileName } from '../core/profile-name';
import { PAYLOAD_DIR, payloadSourceProblem, type PayloadFile } from '../core/revision';
import type { FieldProblem } from '../core/validation';

/**
 * Where a profile's files live. The only place that knows the layout:
 *
 *   <profiles>/<name>/profile.yaml        scope, runtimes, metrics
 *   <profiles>/<name>/trust.yaml          pins (a profile without it is unsigned): version 0 of its trust root
 *   <profiles>/<name>/root/<n>.json       signed trust root versions 1, 2, … (core/trust-root.ts)
 *   <profiles>/<name>/trust-held.json     the newest root and list versions a verifier here reached (high-water marks)
 *   <profiles>/<name>/revocations.json    the signed revocation list (core/revocation.ts)
 *   <profiles>/<name>/revisions/<n>.yaml  revision sources
 *   <profiles>/<name>/envelopes/<n>.json  signed envelopes of the revisions
 *   <profiles>/<name>/payload/            payload files, named by each revision's `source`
 */
export interface ProfileDir {
  name: string;
  /** Absolute. */
  dir: string;
  profileFile: string;
  trustFile: string;
  rootDir: string;
  rootFile(version: number): string;
  heldTrustFile: string;
  revocationsFile: string;
  revisionsDir: string;
  envelopesDir: string;
  payloadDir: string;
  revisionFile(n: number): string;
  envelopeFile(n: number): string;
  /** A revision's payload `source` (relative to the profile directory) as a path the worker can read. */
  payloadSource(source: string): string;
}

/** The layout of profile `name` under `profilesRoot`; the name is checked first (it becomes a path). */
export function profileDir(profilesRoot: string, name: string, field = 'profile'): ProfileDir {
  checkProfileName(name, field);
  const dir = resolve(profilesRoot, name);
  return {
    name,
    dir,
    profileFile: join(dir, 'profile.yaml'),
    trustFile: join(dir, 'trust.yaml'),
    rootDir: join(dir, 'root'),
    rootFile: (version) => join(dir, 'root', `${version}.json`),
    heldTrustFile: join(dir, 'trust-held.json'),
    revocationsFile: join(dir, 'revocations.json'),
    revisionsDir: join(dir, 'revisions'),
    envelopesDir: join(dir, 'envelopes'),
    payloadDir: join(dir, 'payload'),
    revisionFile: (n) => join(dir, 'revisions', `${n}.yaml`),
    envelopeFile: (n) => join(dir, 'envelopes', `${n}.json`),
    payloadSource: (source) => resolve(dir, source),
  };
}

/**
 * The payload sources of `revision` that `sign` must refuse, each naming `payload[i].source`: outside
 * `payload/` by their text (core/revision.ts payloadSourceProblem), or, where the file is already there,
 * resolving (symbolic links followed) outside the profile's real `payload/` directory. `dir` is the
 * profile directory the revision belongs to when it is known; without it only the text is judged.
 */
export function payloadSourceProblems(
  payload: readonly Pick<PayloadFile, 'source'>[],
  dir: string | undefined,
): FieldProblem[] {
  const problems: FieldProblem[] = [];
  payload.forEach((file, i) => {
    const path = `payload[${i}].source`;
    const lexical = payloadSourceProblem(file.source);
    if (lexical) {
      problems.push({ path, value: file.source, message: lexical });
      return;
    }
    if (dir === undefined) return;
    let real: string;
    try {
      real = realpathSync(resolve(dir, file.source));
    } catch {
      return; // not there (yet): sign judges the text; the worker checks the file at apply
    }
    let root: string;
    try {
      root = realpathSync(join(dir, PAYLOAD_DIR));
    } catch {
      return;
    }
    if (!real.startsWith(`${root}${sep}`)) {
      problems.push({
        path,
        value: file.source,
        message: `resolves through a symbolic link to ${real}, outside the profile's ${root}${sep}; a payload file must be a plain file inside payload/`,
      });
    }
  });
  return problems;
}

/** Revision numbers a profile ships, ascending: its envelopes (`signed`) or its revision sources. */
export function revisionNumbers(layout: ProfileDir, kind: 'envelopes' | 'revisions'): number[] {
  const dir = kind === 'envelopes' ? layout.envelopesDir : layout.revisionsDir;
  const ext = kind === 'envelopes' ? '.json' : '.yaml';
  if (!existsSync(dir)) return [];
  return readdirSync(dir)
    .filter((f) => f.endsWith(ext) && /^\d+$/.test(f.slice(0, -ext.length)))
    .map((f) => Number(f.slice(0, -ext.length)))
    .sort((a, b) => a - b);
}
