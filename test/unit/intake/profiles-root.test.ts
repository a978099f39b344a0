import { writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { checkProfilesRoot, describeProfilesRoot, resolveProfilesRoot } from '../../../intake/profiles-root';
import { runCli } from '../../support/cli';
import { scratchDir } from '../../support/harness';
import { refusal } from '../../support/refusal';
import { PROJECT_ROOT } from '../../../intake/package-layout';

describe('the profiles root (intake/profiles-root.ts): flag > $WAVEGATE_PROFILES > default', () => {
  it('the flag wins over the environment, the environment over the default, each made absolute', () => {
    const env = { WAVEGATE_PROFILES: '/srv/from-env' };
    expect(resolveProfilesRoot({ flag: 'rel/flag', env })).toEqual({ dir: resolve('rel/flag'), from: 'flag' });
    expect(resolveProfilesRoot({ env })).toEqual({ dir: '/srv/from-env', from: 'env' });
    expect(resolveProfilesRoot({ env: {} })).toEqual({ dir: resolve('profiles'), from: 'default' });
    expect(resolveProfilesRoot({ env: {}, fallback: '/opt/demo' })).toEqual({ dir: '/opt/demo', from: 'default' });
  });

  it('an empty $WAVEGATE_PROFILES counts as unset; an empty --profiles is refused naming the flag', () => {
    expect(resolveProfilesRoot({ env: { WAVEGATE_PROFILES: '  ' } }).from).toBe('default');
    const err = refusal(() => resolveProfilesRoot({ flag: '', env: {} }));
    expect(err.code).toBe('INVALID_INPUT');
    expect(err.message).toContain('--profiles ""');
  });

  it('a named root that is not a directory is refused; a missing default is only reported', () => {
    const scratch = scratchDir('profiles-root');
    try {
      const missing = join(scratch.dir, 'nope');
      expect(() => checkProfilesRoot({ dir: missing, from: 'env' })).toThrow(
        /\$WAVEGATE_PROFILES .*nope.*: not a directory/,
      );
      expect(() => checkProfilesRoot({ dir: missing, from: 'flag' })).toThrow(/--profiles .*: not a directory/);
      expect(checkProfilesRoot({ dir: missing, from: 'default' })).toBe(false);
      expect(checkProfilesRoot({ dir: scratch.dir, from: 'flag' })).toBe(true);
      expect(describeProfilesRoot({ dir: '/p', from: 'env' })).toBe('/p ($WAVEGATE_PROFILES)');
    } finally {
      scratch.cleanup();
    }
  });

  it('plan reads $WAVEGATE_PROFILES, --profiles over it, and the deprecated --profiles-dir still works (hidden)', async () => {
    const scratch = scratchDir('profiles-root-plan');
    const spec = join(scratch.dir, 'spec.yaml');
    writeFileSync(
      spec,
      'rollout:\n  profile: demo\n  fromRevision: 1\n  toRevision: 2\n  phases:\n    - bulk: remainder\n',
    );
    const inventory = join(PROJECT_ROOT, 'test', 'corpus', 'valid', 'inventory.yaml');
    const nowhere = join(PROJECT_ROOT, 'no-such-profiles-root');
    const profiles = join(PROJECT_ROOT, 'profiles');
    const viaEnv = await runCli(['plan', '--offline', '-f', spec, '--inventory', inventory], {
      env: { WAVEGATE_PROFILES: profiles },
    });
    expect(viaEnv.code, viaEnv.stderr).toBe(0);
    expect(viaEnv.stdout).toContain(join(profiles, 'demo', 'profile.yaml'));
    // A root without the profile: refused as start refuses it (exit 2), never planned over checks it did not read.
    const envMissing = await runCli(['plan', '-f', spec, '--inventory', inventory], {
      env: { WAVEGATE_PROFILES: nowhere },
    });
    expect(envMissing.code).toBe(2);
    expect(envMissing.stderr).toContain(`no profile "demo" (expected ${join(nowhere, 'demo', 'profile.yaml')})`);
    expect(envMissing.stderr).toContain('--what-if');
    const flagWins = await runCli(['plan', '--offline', '-f', spec, '--inventory', inventory, '--profiles', profiles], {
      env: { WAVEGATE_PROFILES: nowhere },
    });
    expect(flagWins.stdout).toContain(join(profiles, 'demo', 'profile.yaml'));
    const old = await runCli(['plan', '--offline', '-f', spec, '--inventory', inventory, '--profiles-dir', profiles], {
      env: { WAVEGATE_PROFILES: nowhere },
    });
    expect(old.code, old.stderr).toBe(0);
    expect(old.stdout).toContain(join(profiles, 'demo', 'profile.yaml'));
    const help = await runCli(['plan', '--help']);
    expect(help.stdout).toContain('--profiles <dir>');
    expect(help.stdout).not.toContain('--profiles-dir');
    scratch.cleanup();
  });
});
