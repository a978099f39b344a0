import { existsSync } from 'node:fs';
import { parseTrust, type Trust } from '../core/signing';
import { readDocument } from './files';
import { profileDir, type ProfileDir } from './profile-dir';

/**
 * A profile's pins (`<profilesRoot>/<profile>/trust.yaml`), or undefined for a profile without pins
 * (unsigned). The CLI verifies envelopes against these before it starts anything; a worker loads its
 * own copy the same way (its `profilesRoot` is a profiles directory) before every apply. A bad profile name
 * or an unusable trust file is INVALID_INPUT naming it.
 */
export function loadTrust(profilesRoot: string, profile: string): Trust | undefined {
  return loadProfileTrust(profileDir(profilesRoot, profile));
}

/** The same for a profile directory already located. */
export function loadProfileTrust(layout: ProfileDir): Trust | undefined {
  return existsSync(layout.trustFile) ? parseTrust(readDocument(layout.trustFile), layout.trustFile) : undefined;
}
