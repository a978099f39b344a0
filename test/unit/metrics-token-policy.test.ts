import { cpSync, mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import type { ResolveHost } from '../../intake/checked-lookup';
import { createHealthActivities, type HealthCheckInput } from '../../activities/health';
import { metricsPolicyFromEnv } from '../../core/secret-policy';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { runCli } from '../support/cli';
import { scratchDir } from '../support/harness';
import { startMetricsServer, type MetricsServer } from '../support/metrics-server';

/**
 * A profile's metrics token within the worker's metrics policy (core/secret-policy.ts; SECURITY.md,
 * "Secrets a worker reads on a profile's or a spec's behalf"): only WAVEGATE_METRICS_TOKEN_* variables
 * and files under WAVEGATE_METRICS_TOKENS_DIR (real paths), sent only to addresses the policy allows.
 * `plan` and `start` refuse the rest (exit 2, naming the field and the value); the worker refuses it
 * again at every query, against a real HTTP server on loopback that counts what reaches it.
 */
const scratch = scratchDir('metrics-token-policy');
afterAll(() => scratch.cleanup());

const tokensDir = join(scratch.dir, 'metrics-tokens');
const outside = join(scratch.dir, 'db-password');
mkdirSync(tokensDir);
writeFileSync(join(tokensDir, 'ok.token'), 'file-tok-7781\n', { mode: 0o600 });
writeFileSync(outside, 'pg-secret-5150\n', { mode: 0o600 });
// A link inside the tokens directory to a file outside it: the text says inside, the real path does not.
symlinkSync(outside, join(tokensDir, 'escape.token'));

describe('wavegate plan and start refuse a metrics token the worker would not send (real processes)', () => {
  /** A copy of the demo profile with this metrics source in its profile.yaml. */
  function profilesWith(name: string, errorRate: Record<string, unknown>): string {
    const root = join(scratch.dir, `profiles-${name}`);
    cpSync(join(PROJECT_ROOT, 'profiles', 'demo'), join(root, 'demo'), { recursive: true });
    writeFileSync(join(root, 'demo', 'profile.yaml'), stringify({ name: 'demo', scope: {}, metrics: { errorRate } }));
    return root;
  }
  const spec = join(scratch.dir, 'spec.yaml');
  writeFileSync(spec, stringify({ rollout: { profile: 'demo', fromRevision: 1, toRevision: 2, waves: [100] } }));
  const run = (command: 'plan' | 'start', profiles: string, env: Record<string, string> = {}) =>
    runCli(
      [
        command,
        ...(command === 'plan' ? ['--offline'] : []),
        '-f',
        spec,
        '--inventory',
        join(PROJECT_ROOT, 'examples/plan/fleet-20.yaml'),
        '--profiles',
        profiles,
        ...(command === 'start' ? ['--address', '127.0.0.1:1'] : []),
      ],
      {
        env: {
          TEMPORAL_ADDRESS: '',
          TEMPORAL_PROFILE: '',
          WAVEGATE_METRICS_TOKENS_DIR: '',
          WAVEGATE_METRICS_ALLOW_PRIVATE: '',
          WAVEGATE_METRICS_ALLOW_HOSTS: '',
          PGPASSWORD: 'pg-secret-5150',
          ...env,
        },
      },
    );

  it('a token naming PGPASSWORD or /etc/shadow: exit 2 at plan and at start, naming the field and the value, never the secret', async () => {
    const pg = profilesWith('pg', { http: 'https://metrics.example.com/rate', tokenEnv: 'PGPASSWORD' });
    const shadow = profilesWith('shadow', { http: 'https://metrics.example.com/rate', tokenFile: '/etc/shadow' });
    const dotdot = profilesWith('dotdot', {
      http: 'https://metrics.example.com/rate',
      tokenFile: '/etc/wavegate/metrics-tokens/../../shadow',
    });
    const runs = await Promise.all([
      run('plan', pg),
      run('start', pg),
      run('plan', shadow),
      run('start', shadow),
      run('plan', dotdot),
    ]);
    for (const r of runs) {
      expect(r.code, r.stderr).toBe(2);
      expect(r.stderr + r.stdout).not.toContain('pg-secret-5150');
      expect(r.stderr).not.toContain('cannot reach Temporal');
    }
    for (const r of runs.slice(0, 2)) {
      expect(r.stderr).toContain(
        'metrics.errorRate.tokenEnv: must be an environment variable named WAVEGATE_METRICS_TOKEN_<NAME>',
      );
      expect(r.stderr).toContain('(got "PGPASSWORD")');
    }
    for (const r of runs.slice(2, 4))
      expect(r.stderr).toContain(
        `metrics.errorRate.tokenFile: must be a file under the worker's metrics tokens directory /etc/wavegate/metrics-tokens (WAVEGATE_METRICS_TOKENS_DIR), links and ".." resolved (got "/etc/shadow")`,
      );
    expect(runs[4]!.stderr).toContain('(got "/etc/wavegate/metrics-tokens/../../shadow")');
  }, 120_000);

  it('a token file linked out of the tokens directory, or a token for a loopback source, is refused at plan; within the policy it plans', async () => {
    const escaped = profilesWith('escape', {
      http: 'https://metrics.example.com/rate',
      tokenFile: join(tokensDir, 'escape.token'),
    });
    const loopback = profilesWith('loopback', {
      prometheus: { url: 'http://127.0.0.1:9090', query: 'up' },
      tokenEnv: 'WAVEGATE_METRICS_TOKEN_PROM',
    });
    const inside = profilesWith('inside', {
      http: 'http://127.0.0.1:9100/rate',
      tokenFile: join(tokensDir, 'ok.token'),
    });
    const [escapedRun, loopbackRun, allowedRun, tokenlessRun] = await Promise.all([
      run('plan', escaped, { WAVEGATE_METRICS_TOKENS_DIR: tokensDir }),
      run('plan', loopback),
      run('plan', inside, { WAVEGATE_METRICS_TOKENS_DIR: tokensDir, WAVEGATE_METRICS_ALLOW_PRIVATE: '1' }),
      run('plan', profilesWith('tokenless', { http: 'http://127.0.0.1:9100/rate' })),
    ]);
    expect(escapedRun.code, escapedRun.stderr).toBe(2);
    expect(escapedRun.stderr).toContain(
      `metrics.errorRate.tokenFile: must be a file under the worker's metrics tokens directory ${tokensDir}`,
    );
    expect(escapedRun.stderr).not.toContain('pg-secret-5150');
    expect(loopbackRun.code, loopbackRun.stderr).toBe(2);
    expect(loopbackRun.stderr).toContain(
      'metrics.errorRate.prometheus.url: 127.0.0.1 is a loopback address; the worker sends a metrics token to public addresses only, unless its operator allows this one (WAVEGATE_METRICS_ALLOW_PRIVATE=1 or WAVEGATE_METRICS_ALLOW_HOSTS) (got "http://127.0.0.1:9090")',
    );
    expect(allowedRun.code, allowedRun.stderr).toBe(0);
    // A source without a token sends nothing of the worker's: not bound by the token policy.
    expect(tokenlessRun.code, tokenlessRun.stderr).toBe(0);
  }, 120_000);
});

describe('the worker sends a metrics token only within its policy, checked at every query (real HTTP server)', () => {
  let server: MetricsServer;
  beforeAll(async () => {
    server = await startMetricsServer({
      '/rate': { body: JSON.stringify({ value: 0.001 }), contentType: 'application/json' },
    });
  });
  afterAll(() => server?.close());
  const input = (errorRate: Record<string, unknown>): HealthCheckInput => ({
    check: 'error-rate < 0.01',
    devices: [],
    metrics: { errorRate: errorRate as never },
    timeoutMs: 5_000,
  });
  const worker = (env: Record<string, string>, resolveHost?: ResolveHost) =>
    createHealthActivities({
      metricsPolicy: metricsPolicyFromEnv({ WAVEGATE_METRICS_TOKENS_DIR: tokensDir, ...env }),
      ...(resolveHost ? { resolveHost } : {}),
    }).runHealthCheck;

  it('a token for a loopback source is refused without the allow setting (nothing reaches it) and sent with it', async () => {
    process.env.WAVEGATE_METRICS_TOKEN_LOOP = 'env-tok-3141';
    try {
      const source = { http: `${server.url}/rate`, tokenEnv: 'WAVEGATE_METRICS_TOKEN_LOOP' };
      const before = server.hits('/rate');
      const strict = await worker({})(input(source));
      expect(strict.outcome).toBe('inconclusive');
      expect(strict.evidence).toBe(
        `GET ${server.url}/rate: refused, the token not sent: 127.0.0.1 is a loopback address; the worker sends a metrics token to public addresses only, unless its operator allows this one (WAVEGATE_METRICS_ALLOW_PRIVATE=1 or WAVEGATE_METRICS_ALLOW_HOSTS)`,
      );
      const byName = await worker({})(input({ ...source, http: source.http.replace('127.0.0.1', 'localhost') }));
      expect(byName.evidence).toContain('localhost is a loopback host name');
      expect(server.hits('/rate')).toBe(before);

      const allowed = await worker({ WAVEGATE_METRICS_ALLOW_PRIVATE: '1' })(input(source));
      expect(allowed).toMatchObject({ outcome: 'pass', evidence: `0.001 from ${server.url}/rate is < 0.01` });
      expect(server.lastHeaders('/rate')?.authorization).toBe('Bearer env-tok-3141');
      const listed = await worker({ WAVEGATE_METRICS_ALLOW_HOSTS: '127.0.0.0/8' })(input(source));
      expect(listed.outcome).toBe('pass');
      expect(server.hits('/rate')).toBe(before + 2);
      for (const r of [strict, byName, allowed, listed]) expect(JSON.stringify(r)).not.toContain('tok-3141');
    } finally {
      delete process.env.WAVEGATE_METRICS_TOKEN_LOOP;
    }
  });

  it('a host name is resolved at the query and every address judged; the connection goes to the judged address', async () => {
    process.env.WAVEGATE_METRICS_TOKEN_DNS = 'env-tok-2718';
    try {
      const asked: string[] = [];
      // A public-looking name that resolves to loopback (DNS rebinding), and one that resolves to the metadata address.
      const resolve: ResolveHost = async (host) => {
        asked.push(host);
        return [{ address: host.startsWith('meta.') ? '169.254.169.254' : '127.0.0.1', family: 4 }];
      };
      const port = new URL(server.url).port;
      const source = (host: string) => ({
        http: `http://${host}:${port}/rate`,
        tokenEnv: 'WAVEGATE_METRICS_TOKEN_DNS',
      });
      const before = server.hits('/rate');
      const rebound = await worker({}, resolve)(input(source('metrics.example.test')));
      expect(rebound.outcome).toBe('inconclusive');
      expect(rebound.evidence).toContain(
        `refused, the token not sent: metrics.example.test resolved to an address this worker's metrics token policy does not allow`,
      );
      // ALLOW_PRIVATE does not open link-local/metadata: that needs an explicit entry.
      const metadata = await worker(
        { WAVEGATE_METRICS_ALLOW_PRIVATE: '1' },
        resolve,
      )(input(source('meta.example.test')));
      expect(metadata.evidence).toContain('meta.example.test resolved to an address');
      expect(server.hits('/rate')).toBe(before);
      const allowed = await worker(
        { WAVEGATE_METRICS_ALLOW_HOSTS: '127.0.0.1' },
        resolve,
      )(input(source('metrics.example.test')));
      expect(allowed.outcome, allowed.evidence).toBe('pass');
      expect(server.lastHeaders('/rate')?.host).toBe(`metrics.example.test:${port}`);
      expect(server.lastHeaders('/rate')?.authorization).toBe('Bearer env-tok-2718');
      expect(asked).toEqual(['metrics.example.test', 'meta.example.test', 'metrics.example.test']);
    } finally {
      delete process.env.WAVEGATE_METRICS_TOKEN_DNS;
    }
  });

  it('a token reference outside the policy (any variable, a file linked out of the tokens directory, /etc/shadow) is refused at the query, nothing sent or read', async () => {
    process.env.PGPASSWORD = 'pg-secret-5150';
    try {
      const run = worker({ WAVEGATE_METRICS_ALLOW_PRIVATE: '1' });
      const before = server.hits('/rate');
      // Hand-built inputs: a profile from an older CLI, or a workflow started around the CLI.
      const pg = await run(input({ http: `${server.url}/rate`, tokenEnv: 'PGPASSWORD' }));
      expect(pg).toMatchObject({
        outcome: 'inconclusive',
        evidence: `GET ${server.url}/rate: refused: the metrics token variable PGPASSWORD is not one this worker sends (only WAVEGATE_METRICS_TOKEN_<NAME>)`,
      });
      const escaped = await run(input({ http: `${server.url}/rate`, tokenFile: join(tokensDir, 'escape.token') }));
      expect(escaped.evidence).toContain(
        `refused: the metrics token file "${join(tokensDir, 'escape.token')}" is outside this worker's metrics tokens directory`,
      );
      const dotdot = await run(input({ http: `${server.url}/rate`, tokenFile: join(tokensDir, '..', 'db-password') }));
      expect(dotdot.evidence).toContain("is outside this worker's metrics tokens directory");
      const shadow = await run(input({ http: `${server.url}/rate`, tokenFile: '/etc/shadow' }));
      expect(shadow.evidence).toContain(`refused: the metrics token file "/etc/shadow" is outside`);
      expect(server.hits('/rate')).toBe(before);
      for (const r of [pg, escaped, dotdot, shadow]) {
        expect(r.outcome).toBe('inconclusive');
        expect(JSON.stringify(r)).not.toContain('pg-secret-5150');
      }
      // The file inside the directory is read and sent.
      const ok = await run(input({ http: `${server.url}/rate`, tokenFile: join(tokensDir, 'ok.token') }));
      expect(ok.outcome, ok.evidence).toBe('pass');
      expect(server.lastHeaders('/rate')?.authorization).toBe('Bearer file-tok-7781');
    } finally {
      delete process.env.PGPASSWORD;
    }
  });
});
