import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadProfile } from '../../../intake/profile';
import { checkProfileName } from '../../../core/profile-name';
import { profileDir, revisionNumbers } from '../../../intake/profile-dir';
import { loadTrust } from '../../../intake/trust';
import { PROJECT_ROOT } from '../../../intake/package-layout';
import { refusal } from '../../support/refusal';

const PROFILES = join(PROJECT_ROOT, 'profiles');

describe('intake/profile-dir', () => {
  it('knows where every file of a profile is', () => {
    const demo = profileDir(PROFILES, 'demo');
    expect(demo.dir).toBe(join(PROFILES, 'demo'));
    expect(demo.profileFile).toBe(join(PROFILES, 'demo', 'profile.yaml'));
    expect(demo.trustFile).toBe(join(PROFILES, 'demo', 'trust.yaml'));
    expect(demo.revisionFile(2)).toBe(join(PROFILES, 'demo', 'revisions', '2.yaml'));
    expect(demo.envelopeFile(2)).toBe(join(PROFILES, 'demo', 'envelopes', '2.json'));
    expect(demo.payloadSource('payload/motd-r2')).toBe(join(PROFILES, 'demo', 'payload', 'motd-r2'));
    expect(revisionNumbers(demo, 'envelopes')).toEqual([1, 2]);
    expect(revisionNumbers(demo, 'revisions')).toEqual([1, 2]);
  });

  it('refuses a name that is not a profile name before it becomes a path, naming the field and the value', () => {
    for (const bad of ['../demo', 'Demo', '', 'a/b', '-x']) {
      const err = refusal(() => profileDir(PROFILES, bad, '--profile'));
      expect(err.code).toBe('INVALID_INPUT');
      expect(err.message).toBe(`--profile: must be lowercase letters, digits and "-" (got ${JSON.stringify(bad)})`);
    }
    expect(checkProfileName('demo-2')).toBe('demo-2');
  });

  it('loads a profile and its pins; a missing profile names the field and the expected file', () => {
    const { profile, layout } = loadProfile(PROFILES, 'demo');
    expect(profile.name).toBe('demo');
    expect(loadTrust(PROFILES, 'demo')?.threshold).toBe(2);
    expect(loadTrust(join(PROJECT_ROOT, 'test'), 'demo')).toBeUndefined();
    expect(layout.name).toBe('demo');
    const missing = refusal(() => loadProfile(PROFILES, 'nope', 'spec.yaml: rollout.profile'));
    expect(missing.code).toBe('INVALID_INPUT');
    expect(missing.message).toBe(
      `spec.yaml: rollout.profile: no profile "nope" (expected ${join(PROFILES, 'nope', 'profile.yaml')})`,
    );
  });
});
