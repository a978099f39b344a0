import { existsSync, readdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { WavegateError } from '../core/errors';
import { PROFILE_NAME, PROFILE_NAME_RULE } from '../core/profile-name';

/**
 * Where a profile's files live. The only place that knows the layout:
 *
 *   <profiles>/<name>/profile.yaml        scope, runtimes, metrics
 *   <profiles>/<name>/trust.yaml          pins (a profile without it is unsigned)
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
  revisionsDir: string;
  envelopesDir: string;
  payloadDir: string;
  revisionFile(n: number): string;
  envelopeFile(n: number): string;
  /** A revision's payload `source` (relative to the profile directory) as a path the worker can read. */
  payloadSource(source: string): string;
}

/** `name` if it is a profile name, else INVALID_INPUT naming `field` and the value. */
export function checkProfileName(name: string, field = 'profile'): string {
  if (typeof name !== 'string' || !PROFILE_NAME.test(name)) {
    throw new WavegateError('INVALID_INPUT', `${field}: ${PROFILE_NAME_RULE} (got ${JSON.stringify(name)})`, { field, value: name });
  }
  return name;
}

/** The layout of profile `name` under `profilesDir`; the name is checked first (it becomes a path). */
export function profileDir(profilesDir: string, name: string, field = 'profile'): ProfileDir {
  checkProfileName(name, field);
  const dir = resolve(profilesDir, name);
  return {
    name,
    dir,
    profileFile: join(dir, 'profile.yaml'),
    trustFile: join(dir, 'trust.yaml'),
    revisionsDir: join(dir, 'revisions'),
    envelopesDir: join(dir, 'envelopes'),
    payloadDir: join(dir, 'payload'),
    revisionFile: (n) => join(dir, 'revisions', `${n}.yaml`),
    envelopeFile: (n) => join(dir, 'envelopes', `${n}.json`),
    payloadSource: (source) => resolve(dir, source),
  };
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
