import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { stringify } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { METRIC } from '../../core/metrics';
import { demoDevices, type Fleet } from '../../sim';
import { startDevServerEnv } from '../../workers/dev-server';
import { freePort } from '../../sim/ports';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { runCli, stopChild, WAVEGATE_BIN } from '../support/cli';
import { fleetWithInventory, scratchDir } from '../support/harness';
import { until } from '../support/until';

/**
 * Issue 11 item 1, metrics: a real `wavegate worker --metrics-bind` (and `$WAVEGATE_METRICS_BIND`) on a
 * real dev server runs a rollout on the simulator; the real `curl` scrapes its endpoint between the
 * phases and at the end, and the wavegate series move: the applies counter goes up, the duration
 * histogram has counts, rollout states are counted, next to the SDK's own series.
 */
const scratch = scratchDir('worker-metrics');
const exec = promisify(execFile);
let env: TestWorkflowEnvironment;
let fleet: Fleet;
let inventory = '';
const children: ChildProcess[] = [];
const PROFILES = join(PROJECT_ROOT, 'profiles');
const specPath = join(scratch.dir, 'spec.yaml');
const cleanEnv = {
  TEMPORAL_ADDRESS: '',
  TEMPORAL_PROFILE: '',
  TEMPORAL_CONFIG_FILE: join(scratch.dir, 'none.toml'),
  WAVEGATE_PROFILES: '',
  WAVEGATE_METRICS_BIND: '',
};

/** `wavegate worker` with extra environment; resolves once it polls. */
function startWorker(
  args: string[],
  extraEnv: NodeJS.ProcessEnv = {},
): Promise<{ child: ChildProcess; output: () => string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [WAVEGATE_BIN, 'worker', ...args], {
      cwd: PROJECT_ROOT,
      env: { ...process.env, ...cleanEnv, ...extraEnv },
    });
    children.push(child);
    let out = '';
    const timer = setTimeout(() => reject(new Error(`worker not polling in 60 s:\n${out}`)), 60_000);
    const onData = (c: Buffer) => {
      out += c.toString();
      if (/worker \S+ polling/.test(out)) {
        clearTimeout(timer);
        resolve({ child, output: () => out });
      }
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`worker exited ${code}:\n${out}`));
    });
  });
}

/** The endpoint through the real curl binary, as an operator or a Prometheus would see it. */
async function curl(url: string): Promise<string> {
  const { stdout } = await exec('curl', ['-sS', '--fail', '--max-time', '10', url]);
  return stdout;
}

/** The sum of a series' samples whose labels include every `labels` pair (0 when absent). */
function sample(text: string, name: string, labels: Record<string, string> = {}): number {
  let total = 0;
  for (const line of text.split('\n')) {
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)/.exec(line);
    if (!m || m[1] !== name) continue;
    const have = Object.fromEntries([...(m[2] ?? '').matchAll(/(\w+)="([^"]*)"/g)].map((l) => [l[1], l[2]]));
    if (Object.entries(labels).every(([k, v]) => have[k] === v)) total += Number(m[3]);
  }
  return total;
}

beforeAll(async () => {
  env = await startDevServerEnv();
  ({ fleet, inventoryPath: inventory } = await fleetWithInventory(scratch.dir, demoDevices(6), {
    'pool-a': 1,
    'pool-b': 1,
  }));
  // Two devices, an 8 s gate, then the rest: the first scrape falls in the gate.
  writeFileSync(
    specPath,
    stringify({
      rollout: {
        profile: 'demo',
        fromRevision: 1,
        toRevision: 2,
        disruptionBudget: { 'pool-a': 1, 'pool-b': 1 },
        phases: [{ canary: '2 devices', gateMs: 8000 }, { bulk: 'remainder' }],
        gate: '1s',
      },
    }),
  );
}, 120_000);

afterAll(async () => {
  await Promise.all(children.map((c) => stopChild(c)));
  await fleet?.stop();
  await env?.teardown();
  scratch.cleanup();
});

describe("wavegate worker --metrics-bind serves the SDK's and wavegate's metrics", () => {
  it('during a rollout on the simulator, curl shows device applies going up, apply durations counted and rollout states, beside the SDK series', async () => {
    const bind = `127.0.0.1:${await freePort()}`;
    const worker = await startWorker([
      '--address',
      env.address,
      '--task-queue',
      'q-metrics',
      '--profiles',
      PROFILES,
      '--audit-dir',
      join(scratch.dir, 'audit'),
      '--metrics-bind',
      bind,
    ]);
    expect(worker.output()).toContain(`metrics: http://${bind}/metrics`);
    const url = `http://${bind}/metrics`;
    const before = await curl(url);
    expect(sample(before, METRIC.deviceApplies)).toBe(0);

    const start = await runCli(
      [
        'start',
        '-f',
        specPath,
        '--inventory',
        inventory,
        '--profiles',
        PROFILES,
        '--address',
        env.address,
        '--task-queue',
        'q-metrics',
      ],
      { env: cleanEnv },
    );
    const rolloutId =
      /^rollout (rollout:demo:\S+) started$/m.exec(start.stdout)?.[1] ??
      `no id printed: ${start.stdout}${start.stderr}`;
    expect(start.code, `${start.stdout}\n${start.stderr}`).toBe(0);

    // In the canary's gate: its two applies are counted, the bulk's not yet.
    const first = await until('the canary applies on the endpoint', async () => {
      const text = await curl(url);
      return sample(text, METRIC.deviceApplies, { outcome: 'applied', transport: 'ssh' }) >= 2 ? text : undefined;
    });
    const appliedFirst = sample(first, METRIC.deviceApplies, { outcome: 'applied', transport: 'ssh' });
    expect(appliedFirst).toBeLessThan(6);
    expect(sample(first, `${METRIC.applyDuration}_count`, { outcome: 'applied' })).toBe(appliedFirst);
    expect(sample(first, `${METRIC.applyDuration}_sum`, { outcome: 'applied' })).toBeGreaterThan(0);
    expect(sample(first, METRIC.rolloutStates, { state: 'running', profile: 'demo' })).toBeGreaterThanOrEqual(1);

    const status = await until(
      'the rollout to complete',
      async () => {
        const run = await runCli(['status', rolloutId, '--address', env.address], { env: cleanEnv });
        return run.code === 0 && /completed/.test(run.stdout) ? run : undefined;
      },
      120_000,
    );
    expect(status.code, status.stderr).toBe(0);

    const last = await curl(url);
    const appliedLast = sample(last, METRIC.deviceApplies, { outcome: 'applied', transport: 'ssh' });
    expect(appliedLast).toBe(6);
    expect(appliedLast).toBeGreaterThan(appliedFirst);
    expect(sample(last, `${METRIC.applyDuration}_count`, { outcome: 'applied', transport: 'ssh' })).toBe(6);
    // Buckets are cumulative: the +Inf bucket holds every apply, a one-second apply is under 30 s.
    expect(sample(last, `${METRIC.applyDuration}_bucket`, { outcome: 'applied', le: '+Inf' })).toBe(6);
    expect(sample(last, METRIC.rolloutStates, { state: 'completed', profile: 'demo' })).toBe(1);
    expect(sample(last, METRIC.auditWriteFailures)).toBe(0);
    // The SDK's own series come out of the same endpoint.
    expect(last).toMatch(/^temporal_\w+/m);
    expect(sample(last, 'temporal_activity_execution_latency_count')).toBeGreaterThanOrEqual(6);
    await stopChild(worker.child);
  }, 240_000);

  it('$WAVEGATE_METRICS_BIND opens the endpoint too; a bad address is refused with exit 2 naming the field and value, before connecting', async () => {
    const bind = `127.0.0.1:${await freePort()}`;
    const worker = await startWorker(
      [
        '--address',
        env.address,
        '--task-queue',
        'q-metrics-env',
        '--profiles',
        PROFILES,
        '--audit-dir',
        join(scratch.dir, 'audit'),
      ],
      { WAVEGATE_METRICS_BIND: bind },
    );
    expect(await curl(`http://${bind}/metrics`)).toMatch(/^temporal_\w+/m);
    await stopChild(worker.child);

    const bad = await runCli(
      ['worker', '--address', '127.0.0.1:1', '--profiles', PROFILES, '--metrics-bind', 'localhost'],
      { env: cleanEnv },
    );
    expect(bad.code, bad.stderr).toBe(2);
    expect(bad.stderr).toContain('--metrics-bind "localhost"');
    expect(bad.stderr).toContain('host:port');
    const badEnv = await runCli(['worker', '--address', '127.0.0.1:1', '--profiles', PROFILES], {
      env: { ...cleanEnv, WAVEGATE_METRICS_BIND: '127.0.0.1:70000' },
    });
    expect(badEnv.code, badEnv.stderr).toBe(2);
    expect(badEnv.stderr).toContain('WAVEGATE_METRICS_BIND "127.0.0.1:70000"');
    // A port someone else holds: refused naming it, before any connection.
    const holder = createServer();
    await new Promise<void>((r) => holder.listen(0, '127.0.0.1', () => r()));
    const taken = `127.0.0.1:${(holder.address() as AddressInfo).port}`;
    const inUse = await runCli(['worker', '--address', env.address, '--profiles', PROFILES, '--metrics-bind', taken], {
      env: cleanEnv,
    });
    await new Promise((r) => holder.close(r));
    expect(inUse.code, inUse.stderr).toBe(2);
    expect(inUse.stderr).toContain(`--metrics-bind ${taken}: cannot serve metrics there`);
    expect(inUse.stdout).not.toContain('polling');
  }, 120_000);
});
