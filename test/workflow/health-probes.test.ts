import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { CancelledFailure } from '@temporalio/common';
import { MockActivityEnvironment } from '@temporalio/testing';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { createHealthActivities, type HealthCheckInput } from '../../activities/health';
import { parseRevision, type Profile, type RevisionHealth } from '../../core/revision';
import { metricsPolicyFromEnv } from '../../core/secret-policy';
import type { DeviceTarget } from '../../core/rollout-state';
import { keyPairFromSeed, pinOf, signRevision, type Envelope, type KeyPair } from '../../core/signing';
import { demoDevices, startFleet, type Fleet } from '../../sim';
import { scratchDir } from '../support/harness';
import { exposition, startMetricsServer, type MetricsServer } from '../support/metrics-server';
import { startPrometheus, type Prometheus } from '../support/prometheus';

/**
 * Health probes against real components: SSH to the simulated fleet, a node HTTP server on
 * 127.0.0.1, and a real Prometheus scraping it. Device-side commands come from a revision signed by a
 * key the worker pins (`<profilesRoot>/probe/trust.yaml`), as in a rollout.
 */
const HEALTH: RevisionHealth = {
  runtimes: [
    { name: 'motd', command: 'sim-runtime-health motd' },
    { name: 'agent', command: 'sim-runtime-health agent' },
  ],
  checks: [
    { name: 'device-info', command: 'test -x .sim/bin/sim-device-info' },
    { name: 'widget', command: 'sim-runtime-health widget' },
  ],
  errorRate: { command: 'sim-error-rate' },
};

const trustScratch = scratchDir('health-trust');
const profilesRoot = join(trustScratch.dir, 'profiles');
const pinned = keyPairFromSeed(new Uint8Array(32).fill(7));
const stranger = keyPairFromSeed(new Uint8Array(32).fill(9));
mkdirSync(join(profilesRoot, 'probe'), { recursive: true });
writeFileSync(
  join(profilesRoot, 'probe', 'trust.yaml'),
  stringify({ threshold: 1, pins: [pinOf(pinned, 'probe-release')] }),
);

/** A revision of `profile` with this health section, signed by `key`. */
function signedHealth(
  health: RevisionHealth,
  opts: { key?: KeyPair; profile?: string; revision?: number } = {},
): Envelope {
  const revision = parseRevision(
    { profile: opts.profile ?? 'probe', revision: opts.revision ?? 2, apply: 'true', verify: 'true', health },
    'test revision',
  );
  return signRevision(revision, opts.key ?? pinned, { now: Date.now() });
}
const ENVELOPE = signedHealth(HEALTH);

/** The worker's metrics tokens directory; its policy allows the loopback metrics server (core/secret-policy.ts). */
const tokensDir = join(trustScratch.dir, 'metrics-tokens');
mkdirSync(tokensDir);
const { runHealthCheck } = createHealthActivities({
  profilesRoot,
  metricsPolicy: metricsPolicyFromEnv({ WAVEGATE_METRICS_TOKENS_DIR: tokensDir, WAVEGATE_METRICS_ALLOW_PRIVATE: '1' }),
});
afterAll(() => trustScratch.cleanup());

function targetsOf(fleet: Fleet, ids?: string[]): DeviceTarget[] {
  return fleet.devices
    .filter((d) => !ids || ids.includes(d.id))
    .map((d) => ({
      id: d.id,
      host: d.host,
      port: d.port,
      user: fleet.user,
      pool: d.spec.pool ?? 'default',
      class: d.spec.class ?? 'server',
      ssh: { hostKey: d.hostKeyFingerprint, key: fleet.clientKeyPath },
    }));
}

describe('health probes over SSH (simulated fleet)', () => {
  let scratch: ReturnType<typeof scratchDir>;
  let fleet: Fleet;
  const input = (check: string, extra: Partial<HealthCheckInput> = {}): HealthCheckInput => ({
    check,
    devices: targetsOf(fleet),
    profile: 'probe',
    revision: 2,
    envelope: ENVELOPE,
    timeoutMs: 10_000,
    ...extra,
  });

  beforeAll(async () => {
    scratch = scratchDir('health');
    fleet = await startFleet({ devices: demoDevices(4), dir: join(scratch.dir, 'fleet') });
  });
  afterAll(async () => {
    await fleet?.stop();
    scratch?.cleanup();
  });
  beforeEach(async () => {
    for (const d of fleet.devices) await fleet.setFaults(d.id, {});
    fleet.resetCounters();
  });

  it('a healthy fleet passes every per-device check, and each device ran each health command once', async () => {
    const results = await Promise.all(
      ['devices-online', 'all-runtimes-healthy', 'error-rate < 0.01', 'check: device-info'].map((c) =>
        runHealthCheck(input(c)),
      ),
    );
    expect(results.map((r) => [r.check, r.outcome])).toEqual([
      ['devices-online', 'pass'],
      ['all-runtimes-healthy', 'pass'],
      ['error-rate < 0.01', 'pass'],
      ['check: device-info', 'pass'],
    ]);
    expect(results[0]!.evidence).toBe('4/4 devices online');
    expect(results[1]!.evidence).toBe('8 checks on 4 devices exited 0');
    expect(results[2]!.evidence).toMatch(/^max error rate 0 \(edge-0\d\) over 4 devices is < 0.01$/);
    for (const d of fleet.devices) {
      expect(fleet.count(d.id, 'sim-runtime-health motd')).toBe(1);
      expect(fleet.count(d.id, 'sim-runtime-health agent')).toBe(1);
      expect(fleet.count(d.id, 'sim-error-rate')).toBe(1);
      expect(fleet.count(d.id, 'echo online')).toBe(1);
    }
  });

  it('only the devices given are probed', async () => {
    const result = await runHealthCheck(input('all-runtimes-healthy', { devices: targetsOf(fleet, ['edge-02']) }));
    expect(result).toMatchObject({ outcome: 'pass', evidence: '2 checks on 1 device exited 0' });
    expect(fleet.count('edge-02', 'sim-runtime-health')).toBe(2);
    expect(fleet.count('edge-01', 'sim-runtime-health')).toBe(0);
  });

  it('an unhealthy runtime fails all-runtimes-healthy, naming device and runtime', async () => {
    await fleet.setFaults('edge-03', { unhealthyRuntimes: ['agent'] });
    const result = await runHealthCheck(input('all-runtimes-healthy'));
    expect(result.outcome).toBe('fail');
    expect(result.failedDevices).toEqual(['edge-03']);
    expect(result.evidence).toBe('unhealthy: edge-03/agent exit 1: "agent unhealthy"');
  });

  it('a named signed check fails on the devices where it exits non-zero, and only there', async () => {
    await fleet.setFaults('edge-01', { unhealthyRuntimes: ['widget'] });
    await fleet.setFaults('edge-03', { failCommand: 'sim-runtime-health widget' });
    const result = await runHealthCheck(input('check: widget'));
    expect(result).toMatchObject({ outcome: 'fail', failedDevices: ['edge-01', 'edge-03'] });
    expect(result.evidence).toBe(
      'unhealthy: edge-01/widget exit 1: "widget unhealthy", edge-03/widget exit 1: "simulated failure"',
    );
    for (const d of fleet.devices) expect(fleet.count(d.id, 'sim-runtime-health widget')).toBe(1);
  });

  it('an error rate over the threshold fails, naming the device and its value', async () => {
    await fleet.setFaults('edge-02', { errorRate: 0.2 });
    await fleet.setFaults('edge-04', { errorRate: 0.005 });
    const result = await runHealthCheck(input('error-rate < 0.01'));
    expect(result.outcome).toBe('fail');
    expect(result.failedDevices).toEqual(['edge-02']);
    expect(result.evidence).toBe('error rate not < 0.01 on edge-02 (0.2)');
    // the same fleet under a looser threshold passes, judged on the max
    const loose = await runHealthCheck(input('error-rate <= 0.2'));
    expect(loose).toMatchObject({ outcome: 'pass', evidence: 'max error rate 0.2 (edge-02) over 4 devices is <= 0.2' });
  });

  it('a hanging metrics command is inconclusive within the timeout, naming the device', async () => {
    await fleet.setFaults('edge-04', { errorRateHangs: true });
    const started = Date.now();
    const result = await runHealthCheck(input('error-rate < 0.01', { timeoutMs: 1_500 }));
    const elapsed = Date.now() - started;
    expect(result.outcome).toBe('inconclusive');
    expect(result.failedDevices).toEqual(['edge-04']);
    expect(result.evidence).toMatch(
      /^could not read the error rate of 1 of 4 devices: edge-04 \(command timed out after \d+ ms: sim-error-rate\)$/,
    );
    expect(elapsed).toBeGreaterThanOrEqual(1_400);
    expect(elapsed).toBeLessThan(4_000);
    expect(result.durationMs).toBeLessThan(4_000);
  });

  it('a device over the threshold fails the check even while another device hangs', async () => {
    await fleet.setFaults('edge-01', { errorRate: 0.5 });
    await fleet.setFaults('edge-04', { errorRateHangs: true });
    const result = await runHealthCheck(input('error-rate < 0.01', { timeoutMs: 1_500 }));
    expect(result).toMatchObject({ outcome: 'fail', failedDevices: ['edge-01'] });
    expect(result.evidence).toBe('error rate not < 0.01 on edge-01 (0.5); 1 more could not be read');
  });

  it('a hanging runtime health command is inconclusive, not healthy and not failed', async () => {
    await fleet.setFaults('edge-02', { hangCommand: 'sim-runtime-health motd' });
    const result = await runHealthCheck(input('all-runtimes-healthy', { timeoutMs: 1_500 }));
    expect(result.outcome).toBe('inconclusive');
    expect(result.failedDevices).toEqual(['edge-02']);
    expect(result.evidence).toMatch(/^could not read 1 of 4 devices within 1500 ms: edge-02 \(command timed out/);
  });

  it('an offline device fails devices-online and makes runtime health inconclusive', async () => {
    await fleet.setFaults('edge-03', { offline: true });
    const online = await runHealthCheck(input('devices-online'));
    expect(online.outcome).toBe('fail');
    expect(online.failedDevices).toEqual(['edge-03']);
    expect(online.evidence).toMatch(
      /^1 of 4 devices not online: edge-03 \(cannot connect to 127\.0\.0\.1:\d+ \(ECONNREFUSED\)\)$/,
    );
    const runtimes = await runHealthCheck(input('all-runtimes-healthy'));
    expect(runtimes).toMatchObject({ outcome: 'inconclusive', failedDevices: ['edge-03'] });
  });

  it('a device whose host key changed is not online (the pin is never bypassed)', async () => {
    const devices = targetsOf(fleet);
    fleet.rotateHostKey('edge-01');
    const online = await runHealthCheck(input('devices-online', { devices }));
    expect(online.outcome).toBe('fail');
    expect(online.failedDevices).toEqual(['edge-01']);
    expect(online.evidence).toMatch(/edge-01 \(host key SHA256:\S+ .*does not match the pinned/);
    expect(fleet.count('edge-01', 'echo online')).toBe(0);
  });

  it('probes devices at most `concurrency` at a time', async () => {
    for (const d of fleet.devices) await fleet.setFaults(d.id, { latencyMs: 400 });
    const serial = await createHealthActivities({ concurrency: 1 }).runHealthCheck(input('devices-online'));
    const parallel = await createHealthActivities({ concurrency: 4 }).runHealthCheck(input('devices-online'));
    expect([serial.outcome, parallel.outcome]).toEqual(['pass', 'pass']);
    expect(serial.durationMs).toBeGreaterThanOrEqual(4 * 400);
    expect(parallel.durationMs).toBeLessThan(2 * 400);
  });

  it('says what is missing when the signed revision and the profile give nothing to check', async () => {
    const bare = signedHealth({});
    const noMetrics = await runHealthCheck(input('error-rate < 0.01', { envelope: bare }));
    expect(noMetrics).toMatchObject({
      outcome: 'inconclusive',
      evidence: expect.stringContaining(
        "neither the target revision's signed health.errorRate.command nor the profile's metrics.errorRate",
      ),
    });
    const noRuntimes = await runHealthCheck(input('all-runtimes-healthy', { envelope: bare }));
    expect(noRuntimes).toMatchObject({
      outcome: 'inconclusive',
      evidence: "r2's signed health section declares no runtimes, so none can be checked",
    });
    const noSuchCheck = await runHealthCheck(input('check: nope'));
    expect(noSuchCheck).toMatchObject({
      outcome: 'inconclusive',
      evidence: `r2's signed health section has no check "nope" (it has: motd, agent, device-info, widget); nothing was run`,
    });
    const noDevices = await runHealthCheck(input('devices-online', { devices: [] }));
    expect(noDevices).toMatchObject({ outcome: 'pass', evidence: 'no changed devices to check' });
    const bad = await runHealthCheck(input('error-rate > 0.01'));
    expect(bad).toMatchObject({
      outcome: 'inconclusive',
      evidence: expect.stringMatching(/^health check "error-rate > 0.01" needs a comparison/),
    });
    expect(fleet.totalCommands()).toBe(0);
  });

  it("a worker given raw device commands (an old client's input) refuses the check and runs nothing on any device", async () => {
    const devices = targetsOf(fleet);
    const oldClient = [
      // the pre-signing input shape: the profile's runtimes and metrics command, no envelope
      {
        check: 'all-runtimes-healthy',
        devices,
        runtimes: [{ name: 'motd', health: 'touch pwned-runtime' }],
        timeoutMs: 5_000,
      },
      {
        check: 'error-rate < 0.01',
        devices,
        runtimes: [],
        metrics: { errorRate: { command: 'touch pwned-rate' } },
        timeoutMs: 5_000,
      },
      // raw commands riding along with a valid envelope are refused too
      {
        check: 'all-runtimes-healthy',
        devices,
        profile: 'probe',
        revision: 2,
        envelope: ENVELOPE,
        runtimes: [{ name: 'x', health: 'touch pwned-x' }],
        timeoutMs: 5_000,
      },
      { check: 'devices-online', devices, runtimes: [{ name: 'x', health: 'touch pwned-online' }], timeoutMs: 5_000 },
    ] as unknown as HealthCheckInput[];
    for (const given of oldClient) {
      const result = await runHealthCheck(given);
      expect(result.outcome, given.check).toBe('inconclusive');
      expect(result.evidence).toMatch(
        /^refused: the input carries an unsigned device command \((runtimes\[\]\.health|metrics\.errorRate\.command)\).*nothing was run$/,
      );
    }
    const written = await runHealthCheck(input('command: touch pwned-command'));
    expect(written.outcome).toBe('inconclusive');
    expect(written.evidence).toMatch(/runs an unsigned shell command on every device/);
    expect(fleet.totalCommands()).toBe(0);
  });

  it("device-side checks run only from an envelope that verifies against the worker's own pins; otherwise nothing runs", async () => {
    const evil: RevisionHealth = {
      runtimes: [{ name: 'motd', command: 'touch pwned' }],
      checks: [{ name: 'widget', command: 'touch pwned' }],
      errorRate: { command: 'touch pwned' },
    };
    const tampered: Envelope = { ...ENVELOPE, body: signedHealth(evil).body };
    const cases: Array<[string, Partial<HealthCheckInput>, RegExp]> = [
      ['no envelope (unsigned)', { envelope: undefined }, /which the input does not carry/],
      [
        'signed by a key the worker does not pin',
        { envelope: signedHealth(evil, { key: stranger }) },
        /does not verify against this worker's pins \(/,
      ],
      ['a body swapped under the signatures', { envelope: tampered }, /does not verify against this worker's pins \(/],
      [
        'a revision of another profile, signed by the pinned key',
        { envelope: signedHealth(evil, { profile: 'other' }) },
        /WRONG_PROFILE/,
      ],
      [
        'another revision than the devices were brought to',
        { envelope: signedHealth(evil, { revision: 3 }) },
        /WRONG_REVISION/,
      ],
      [
        'a profile the worker holds no pins for',
        { profile: 'nopins', envelope: signedHealth(evil, { profile: 'nopins' }) },
        /NO_TRUST/,
      ],
      ['a profile name that is a path', { profile: '../probe' }, /MALFORMED/],
    ];
    for (const [what, extra, why] of cases) {
      for (const check of ['all-runtimes-healthy', 'check: widget', 'error-rate < 0.01']) {
        // error-rate without an envelope reads the profile's worker-side source: none here, so it says so
        if (what.startsWith('no envelope') && check.startsWith('error-rate')) continue;
        const result = await runHealthCheck(input(check, extra));
        expect(result.outcome, `${what}: ${check}`).toBe('inconclusive');
        expect(result.evidence, `${what}: ${check}`).toMatch(why);
        expect(result.evidence).toMatch(/nothing was run$/);
      }
    }
    expect(fleet.totalCommands()).toBe(0);
    // the worker's own reachability probe needs no signed content
    expect(await runHealthCheck(input('devices-online', { envelope: undefined }))).toMatchObject({ outcome: 'pass' });
  });

  it('heartbeats in an activity context and stops promptly when the activity is cancelled', async () => {
    await fleet.setFaults('edge-02', { errorRateHangs: true });
    const env = new MockActivityEnvironment();
    const beats: unknown[] = [];
    env.on('heartbeat', (d: unknown) => beats.push(d));
    const started = Date.now();
    const running = env.run(runHealthCheck, input('error-rate < 0.01', { timeoutMs: 60_000 }));
    await new Promise((r) => setTimeout(r, 1_500));
    env.cancel('CANCELLED');
    await expect(running).rejects.toBeInstanceOf(CancelledFailure);
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(beats.length).toBeGreaterThanOrEqual(2);
    expect(beats).toContainEqual({ check: 'error-rate < 0.01', done: 3, total: 4 });
  });
});

describe('http probes (node http server on 127.0.0.1)', () => {
  let server: MetricsServer;
  beforeAll(async () => {
    server = await startMetricsServer({
      '/ok': { status: 200, body: 'ok' },
      '/broken': { status: 500, body: 'boom' },
      '/hang': 'hang',
      '/rate-high': { body: '0.2\n' },
      '/rate-json': { body: JSON.stringify({ value: 0.001 }), contentType: 'application/json' },
      '/rate-garbage': { body: '<html>login</html>' },
      '/rate-unavailable': { status: 503, body: 'down' },
    });
  });
  afterAll(() => server?.close());

  const httpInput = (check: string, extra: Partial<HealthCheckInput> = {}): HealthCheckInput => ({
    check,
    devices: [],
    timeoutMs: 5_000,
    ...extra,
  });

  it('200 passes, 500 fails, each with the status as evidence', async () => {
    const ok = await runHealthCheck(httpInput(`http: ${server.url}/ok`));
    expect(ok).toMatchObject({ outcome: 'pass', evidence: `GET ${server.url}/ok answered 200` });
    const broken = await runHealthCheck(httpInput(`http: ${server.url}/broken`));
    expect(broken).toMatchObject({ outcome: 'fail', evidence: `GET ${server.url}/broken answered 500` });
    expect(server.hits('/ok')).toBe(1);
    expect(server.hits('/broken')).toBe(1);
  });

  it('a server that never answers is inconclusive within the timeout', async () => {
    const started = Date.now();
    const hang = await runHealthCheck(httpInput(`http: ${server.url}/hang`, { timeoutMs: 1_000 }));
    expect(hang).toMatchObject({
      outcome: 'inconclusive',
      evidence: `GET ${server.url}/hang: no answer within 1000 ms`,
    });
    expect(Date.now() - started).toBeLessThan(3_000);
    expect(hang.durationMs).toBeGreaterThanOrEqual(990);
  });

  it('a refused connection is inconclusive, with the port named', async () => {
    const closed = await startMetricsServer();
    await closed.close();
    const refused = await runHealthCheck(httpInput(`http: ${closed.url}/ok`));
    expect(refused).toMatchObject({ outcome: 'inconclusive', evidence: `GET ${closed.url}/ok: ECONNREFUSED` });
  });

  it('credentials inline in a profile url are refused by the worker: nothing is sent, and no secret reaches the evidence', async () => {
    const before = server.hits('/rate-json');
    const withCreds = `${server.url.replace('http://', 'http://admin:s3cret@')}/rate-json`;
    const userinfo = await runHealthCheck(
      httpInput('error-rate < 0.01', { metrics: { errorRate: { http: withCreds } } }),
    );
    const query = await runHealthCheck(
      httpInput('error-rate < 0.01', {
        metrics: { errorRate: { http: `${server.url}/rate-json?access_token=abc123` } },
      }),
    );
    for (const r of [userinfo, query]) {
      expect(r.outcome).toBe('inconclusive');
      expect(r.evidence).toMatch(/refused: the url has .*tokenEnv or tokenFile/);
      expect(JSON.stringify(r)).not.toMatch(/s3cret|abc123/);
    }
    expect(server.hits('/rate-json')).toBe(before);
  });

  it('a metrics token by reference (tokenEnv, tokenFile) is read on the worker, sent as a bearer token, and never shown', async () => {
    try {
      process.env.WAVEGATE_METRICS_TOKEN_TEST = 'env-tok-481516';
      const viaEnv = await runHealthCheck(
        httpInput('error-rate < 0.01', {
          metrics: { errorRate: { http: `${server.url}/rate-json`, tokenEnv: 'WAVEGATE_METRICS_TOKEN_TEST' } },
        }),
      );
      expect(viaEnv).toMatchObject({ outcome: 'pass', evidence: `0.001 from ${server.url}/rate-json is < 0.01` });
      expect(server.lastHeaders('/rate-json')?.authorization).toBe('Bearer env-tok-481516');
      const file = join(tokensDir, 'metrics.token');
      writeFileSync(file, 'file-tok-2342\n', { mode: 0o600 });
      const viaFile = await runHealthCheck(
        httpInput('error-rate < 0.01', {
          metrics: { errorRate: { http: `${server.url}/rate-json`, tokenFile: file } },
        }),
      );
      expect(viaFile.outcome).toBe('pass');
      expect(server.lastHeaders('/rate-json')?.authorization).toBe('Bearer file-tok-2342');
      const hits = server.hits('/rate-json');
      const unset = await runHealthCheck(
        httpInput('error-rate < 0.01', {
          metrics: { errorRate: { http: `${server.url}/rate-json`, tokenEnv: 'WAVEGATE_METRICS_TOKEN_NO_SUCH' } },
        }),
      );
      expect(unset).toMatchObject({
        outcome: 'inconclusive',
        evidence: `GET ${server.url}/rate-json: the metrics token variable WAVEGATE_METRICS_TOKEN_NO_SUCH is not set on this worker`,
      });
      expect(server.hits('/rate-json')).toBe(hits);
      for (const r of [viaEnv, viaFile, unset]) expect(JSON.stringify(r)).not.toMatch(/tok-/);
    } finally {
      delete process.env.WAVEGATE_METRICS_TOKEN_TEST;
    }
  });

  it('query strings are redacted from evidence even when they hold nothing secret-named', async () => {
    const ok = await runHealthCheck(httpInput(`http: ${server.url}/ok?region=eu-west`));
    expect(ok).toMatchObject({
      outcome: 'pass',
      check: `http: ${server.url}/ok?region=***`,
      evidence: `GET ${server.url}/ok?region=*** answered 200`,
    });
    expect(JSON.stringify(ok)).not.toContain('eu-west');
  });

  it('a check written with credentials in its url is refused before anything is contacted', async () => {
    const before = server.hits('/ok');
    const result = await runHealthCheck(httpInput(`http: ${server.url.replace('http://', 'http://admin:s3cret@')}/ok`));
    expect(result.outcome).toBe('inconclusive');
    expect(result.evidence).toMatch(/has a user:password@ in a url/);
    expect(JSON.stringify(result)).not.toContain('s3cret');
    expect(server.hits('/ok')).toBe(before);
  });

  it('error-rate from an http source: plain text, JSON {value}, unreadable and unavailable', async () => {
    const rate = (path: string) =>
      runHealthCheck(httpInput('error-rate < 0.01', { metrics: { errorRate: { http: `${server.url}${path}` } } }));
    expect(await rate('/rate-high')).toMatchObject({
      outcome: 'fail',
      evidence: `0.2 from ${server.url}/rate-high is not < 0.01`,
    });
    expect(await rate('/rate-json')).toMatchObject({
      outcome: 'pass',
      evidence: `0.001 from ${server.url}/rate-json is < 0.01`,
    });
    expect(await rate('/rate-garbage')).toMatchObject({
      outcome: 'inconclusive',
      evidence: `GET ${server.url}/rate-garbage: not a number: "<html>login</html>"`,
    });
    expect(await rate('/rate-unavailable')).toMatchObject({
      outcome: 'inconclusive',
      evidence: `GET ${server.url}/rate-unavailable answered 503; no error rate read`,
    });
  });
});

describe('prometheus probes (a real Prometheus scraping a node exporter of wavegate_error_ratio)', () => {
  let scratch: ReturnType<typeof scratchDir>;
  let exporter: MetricsServer;
  let prometheus: Prometheus;
  let metrics: Profile['metrics'];

  beforeAll(async () => {
    scratch = scratchDir('prometheus');
    exporter = await startMetricsServer({
      '/metrics': {
        body: exposition({ wavegate_error_ratio: 0.2, wavegate_ok_ratio: 0.001 }),
        contentType: 'text/plain; version=0.0.4',
      },
    });
    prometheus = await startPrometheus({ dir: scratch.dir, targets: [exporter.hostPort] });
    await prometheus.waitForSeries('wavegate_error_ratio', 25_000);
    metrics = { errorRate: { prometheus: { url: prometheus.url, query: 'max(wavegate_error_ratio)' } } };
  }, 60_000);
  afterAll(async () => {
    await prometheus?.stop();
    await exporter?.close();
    scratch?.cleanup();
  });

  const promInput = (check: string, extra: Partial<HealthCheckInput> = {}): HealthCheckInput => ({
    check,
    devices: [],
    metrics,
    timeoutMs: 5_000,
    ...extra,
  });

  it('a query over the threshold fails, under it passes (profile url and explicit url)', async () => {
    expect(exporter.hits('/metrics')).toBeGreaterThan(0);
    const over = await runHealthCheck(promInput('prometheus: wavegate_error_ratio < 0.01'));
    expect(over.outcome).toBe('fail');
    expect(over.evidence).toMatch(
      /^0\.2 at wavegate_error_ratio\{instance="127\.0\.0\.1:\d+",job="wavegate-test"\} is not < 0\.01$/,
    );
    const under = await runHealthCheck(
      promInput(`prometheus(${prometheus.url}): wavegate_ok_ratio <= 0.001`, { metrics: undefined }),
    );
    expect(under).toMatchObject({
      outcome: 'pass',
      check: `prometheus(${prometheus.url}): wavegate_ok_ratio <= 0.001`,
    });
    // PromQL's own comparison inside the query stays part of the query
    const count = await runHealthCheck(promInput('prometheus: count(wavegate_error_ratio > 0.1) < 1'));
    expect(count).toMatchObject({ outcome: 'fail', evidence: '1 is not < 1' });
  });

  it('error-rate reads the profile prometheus source', async () => {
    expect(await runHealthCheck(promInput('error-rate < 0.01'))).toMatchObject({
      outcome: 'fail',
      evidence: '0.2 is not < 0.01',
    });
    expect(await runHealthCheck(promInput('error-rate < 0.25'))).toMatchObject({
      outcome: 'pass',
      evidence: '0.2 is < 0.25',
    });
  });

  it('no series, a bad query and an unreachable Prometheus are inconclusive', async () => {
    const absent = await runHealthCheck(promInput('prometheus: wavegate_no_such_metric < 1'));
    expect(absent).toMatchObject({
      outcome: 'inconclusive',
      evidence: `Prometheus ${prometheus.url}: the query returned no series`,
    });
    const bad = await runHealthCheck(promInput('prometheus: sum(( < 1'));
    expect(bad.outcome).toBe('inconclusive');
    expect(bad.evidence).toMatch(/^Prometheus http:\/\/127\.0\.0\.1:\d+: Prometheus says bad_data: /);
    const gone = await startMetricsServer();
    await gone.close();
    const unreachable = await runHealthCheck(promInput(`prometheus(${gone.url}): up < 1`));
    expect(unreachable).toMatchObject({ outcome: 'inconclusive', evidence: `Prometheus ${gone.url}: ECONNREFUSED` });
  });

  it('without a Prometheus url anywhere the check says where to put one', async () => {
    const result = await runHealthCheck(
      promInput('prometheus: up < 1', { metrics: { errorRate: { http: 'http://127.0.0.1:1/rate' } } }),
    );
    expect(result).toMatchObject({
      outcome: 'inconclusive',
      evidence: expect.stringContaining('set metrics.errorRate.prometheus.url in the profile'),
    });
  });
});
