import { existsSync } from 'node:fs';
import { WavegateError } from '../core/errors';
import { parseProfile, type Profile } from '../core/revision';
import { readDocument } from './files';
import { profileDir, type ProfileDir } from './profile-dir';

/** A profile's content with the directory it was read from. */
export interface LoadedProfile {
  layout: ProfileDir;
  profile: Profile;
}

/**
 * Profile `name` from `<profilesRoot>/<name>/profile.yaml`. A missing profile, or one whose file names
 * another profile, is INVALID_INPUT naming `field` (e.g. `spec.yaml: rollout.profile` or `--profile`).
 */
export function loadProfile(profilesRoot: string, name: string, field = 'profile'): LoadedProfile {
  const layout = profileDir(profilesRoot, name, field);
  if (!existsSync(layout.profileFile)) {
    throw new WavegateError('INVALID_INPUT', `${field}: no profile "${name}" (expected ${layout.profileFile})`, {
      field,
      value: name,
    });
  }
  const profile = parseProfile(readDocument(layout.profileFile), layout.profileFile);
  if (profile.name !== name) {
    throw new WavegateError(
      'INVALID_INPUT',
      `${layout.profileFile}: invalid\n  name: the profile directory is "${name}" (got ${JSON.stringify(profile.name)})`,
      { source: layout.profileFile },
    );
  }
  return { layout, profile };
}

/** Whether `<profilesRoot>/<name>/profile.yaml` exists (a bad name has no profile). */
export function hasProfile(profilesRoot: string, name: string): boolean {
  try {
    return existsSync(profileDir(profilesRoot, name).profileFile);
  } catch {
    return false;
  }
}
