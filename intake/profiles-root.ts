import { statSync } from 'node:fs';
import { resolve } from 'node:path';
import { WavegateError } from '../core/errors';

/** The environment variable every command (CLI and worker) reads its profiles root from. */
export const PROFILES_ENV = 'WAVEGATE_PROFILES';

/** The default root when neither the flag nor the environment names one: `profiles/` of the current directory. */
export const DEFAULT_PROFILES_ROOT = 'profiles';

export interface ProfilesRoot {
  /** Absolute path of the directory holding `<profile>/profile.yaml`, `trust.yaml`, `revisions/`, `payload/`. */
  dir: string;
  /** Where it came from, for the messages that name it. */
  from: 'flag' | 'env' | 'default';
}

/**
 * The one place the profiles root is decided: `--profiles <dir>`, else `$WAVEGATE_PROFILES`, else
 * `fallback` (default `./profiles`). An empty environment variable counts as unset; an empty flag is
 * refused. Resolved against the current directory once, so every later read uses the same absolute path.
 */
export function resolveProfilesRoot(
  opts: { flag?: string; env?: NodeJS.ProcessEnv; fallback?: string } = {},
): ProfilesRoot {
  if (opts.flag !== undefined) {
    if (!opts.flag.trim())
      throw new WavegateError('INVALID_INPUT', `--profiles ${JSON.stringify(opts.flag)}: must name a directory`, {
        field: '--profiles',
      });
    return { dir: resolve(opts.flag), from: 'flag' };
  }
  const fromEnv = (opts.env ?? process.env)[PROFILES_ENV];
  if (fromEnv?.trim()) return { dir: resolve(fromEnv), from: 'env' };
  return { dir: resolve(opts.fallback ?? DEFAULT_PROFILES_ROOT), from: 'default' };
}

/**
 * A root someone named (flag or environment) must be a directory: refused (INVALID_INPUT) otherwise,
 * before anything starts. Returns whether the root exists, so a missing default can be warned about.
 */
export function checkProfilesRoot(root: ProfilesRoot): boolean {
  let isDir = false;
  try {
    isDir = statSync(root.dir).isDirectory();
  } catch {
    isDir = false;
  }
  if (!isDir && root.from !== 'default') {
    throw new WavegateError(
      'INVALID_INPUT',
      `${root.from === 'flag' ? '--profiles' : `$${PROFILES_ENV}`} ${JSON.stringify(root.dir)}: not a directory`,
      { field: root.from === 'flag' ? '--profiles' : PROFILES_ENV },
    );
  }
  return isDir;
}

/** How a root is named in messages: `/srv/p (--profiles)`, `/srv/p ($WAVEGATE_PROFILES)`, `/w/profiles (default)`. */
export function describeProfilesRoot(root: ProfilesRoot): string {
  return `${root.dir} (${root.from === 'flag' ? '--profiles' : root.from === 'env' ? `$${PROFILES_ENV}` : 'default'})`;
}

/** The help text of every `--profiles` option, so the commands say the same thing. */
export function profilesOptionHelp(fallback = `./${DEFAULT_PROFILES_ROOT}`): string {
  return `profiles root: <dir>/<profile>/ holds profile.yaml, trust.yaml, revisions/, payload/ (default $${PROFILES_ENV}, else ${fallback})`;
}
