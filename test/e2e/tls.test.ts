import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { demoDevices, type Fleet } from '../../sim';
import { startDevServerEnv } from '../../workers/dev-server';
import { freePort } from '../../sim/ports';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { runCli, spawnCliUntil, stopChild } from '../support/cli';
import { fleetWithInventory, scratchDir } from '../support/harness';
import { makeTestPki, startTlsProxy, type TestPki, type TlsProxy } from '../support/tls-proxy';
import { until } from '../support/until';

/**
 * Issue 11 item 1, connection parity: `wavegate worker` and the CLI reach a Temporal frontend behind
 * Debian's nginx terminating TLS (and verifying client certificates for mTLS), over a throwaway test CA
 * made with openssl, by flags, by the TEMPORAL_* environment and by a TOML client config profile, and a
 * simulator rollout runs through it. A CA that did not sign the server and a missing client certificate
 * are refused with exit 2 naming what failed; a frontend that is not there stays exit 1 (UNAVAILABLE).
 */
const scratch = scratchDir('tls');
let env: TestWorkflowEnvironment;
let pki: TestPki;
let tlsProxy: TlsProxy;
let mtlsProxy: TlsProxy;
const fleets: Fleet[] = [];
const workers: Array<Awaited<ReturnType<typeof spawnCliUntil>>> = [];
const PROFILES = join(PROJECT_ROOT, 'profiles');
const specPath = join(scratch.dir, 'spec.yaml');
const configFile = join(scratch.dir, 'temporal.toml');
/** Nothing from the developer's own environment or ~/.config/temporalio decides where these connect. */
const cleanEnv: NodeJS.ProcessEnv = {
  TEMPORAL_ADDRESS: '',
  TEMPORAL_NAMESPACE: '',
  TEMPORAL_PROFILE: '',
  TEMPORAL_CONFIG_FILE: join(scratch.dir, 'none.toml'),
  TEMPORAL_TLS: '',
  TEMPORAL_TLS_SERVER_CA_CERT_PATH: '',
  TEMPORAL_TLS_CLIENT_CERT_PATH: '',
  TEMPORAL_TLS_CLIENT_KEY_PATH: '',
  TEMPORAL_API_KEY: '',
  WAVEGATE_PROFILES: '',
  WAVEGATE_METRICS_BIND: '',
};

const tlsFlags = () => ['--address', tlsProxy.address, '--tls-ca-cert', pki.caCert];
const mtlsFlags = () => [
  '--address',
  mtlsProxy.address,
  '--tls-ca-cert',
  pki.caCert,
  '--tls-cert',
  pki.clientCert,
  '--tls-key',
  pki.clientKey,
];
const mtlsEnv = (): NodeJS.ProcessEnv => ({
  TEMPORAL_ADDRESS: mtlsProxy.address,
  TEMPORAL_TLS_SERVER_CA_CERT_PATH: pki.caCert,
  TEMPORAL_TLS_CLIENT_CERT_PATH: pki.clientCert,
  TEMPORAL_TLS_CLIENT_KEY_PATH: pki.clientKey,
});

/** `wavegate worker` connecting as `connect` says (flags and environment); resolves once it polls. */
async function startWorker(taskQueue: string, connect: { flags?: string[]; env?: NodeJS.ProcessEnv }) {
  const w = await spawnCliUntil(
    [
      'worker',
      ...(connect.flags ?? []),
      '--task-queue',
      taskQueue,
      '--profiles',
      PROFILES,
      '--audit-dir',
      join(scratch.dir, 'audit'),
    ],
    /worker \S+ polling/,
    60_000,
    { ...cleanEnv, ...connect.env },
  );
  workers.push(w);
  return w;
}

function cli(args: string[], connect: { flags?: string[]; env?: NodeJS.ProcessEnv }) {
  return runCli([...args, ...(connect.flags ?? [])], { env: { ...cleanEnv, ...connect.env }, timeoutMs: 60_000 });
}

/** A worker and the CLI on one connection: start a simulator rollout, see it in `list`, `status` until completed. */
async function rolloutThrough(
  taskQueue: string,
  connect: { flags?: string[]; env?: NodeJS.ProcessEnv },
  expectInWorkerLine: RegExp,
) {
  // A fleet of its own per case: every rollout changes every one of its devices r1 -> r2.
  const { fleet, inventoryPath: inventory } = await fleetWithInventory(join(scratch.dir, taskQueue), demoDevices(2), {
    'pool-a': 1,
    'pool-b': 1,
  });
  fleets.push(fleet);
  const worker = await startWorker(taskQueue, connect);
  expect(worker.output()).toMatch(expectInWorkerLine);
  const start = await cli(
    ['start', '-f', specPath, '--inventory', inventory, '--profiles', PROFILES, '--task-queue', taskQueue],
    connect,
  );
  expect(start.code, `${start.stdout}\n${start.stderr}`).toBe(0);
  const id = /^rollout (rollout:demo:\S+) started$/m.exec(start.stdout)?.[1] ?? 'no id printed';
  const listed = await cli(['list', '--profile', 'demo', '--json'], connect);
  expect(listed.code, listed.stderr).toBe(0);
  expect((JSON.parse(listed.stdout) as Array<{ workflowId: string }>).map((r) => r.workflowId)).toContain(id);
  const status = await until(
    'the rollout to complete through the proxy',
    async () => {
      const run = await cli(['status', id], connect);
      return run.code === 0 ? run : undefined;
    },
    120_000,
  );
  expect(status.stdout).toMatch(/completed/);
  for (const d of fleet.devices)
    expect(readFileSync(join(d.sandbox, '.wavegate/profiles/demo/revision'), 'utf8').trim(), d.id).toBe('2');
  // The profile's lock closes in a workflow task of its own once the rollout has: on this worker, so it must still
  // be polling (under load, stopped at once, the next case's start found the lock held: CONFLICT).
  await until('the profile lock released', async () => {
    const lock = await env.client.workflow.getHandle('profile-lock:demo').describe();
    return lock.status.name === 'RUNNING' ? undefined : true;
  });
  await stopChild(worker.child);
}

beforeAll(async () => {
  env = await startDevServerEnv();
  pki = makeTestPki(join(scratch.dir, 'pki'));
  tlsProxy = await startTlsProxy({
    dir: join(scratch.dir, 'nginx-tls'),
    upstream: env.address,
    pki,
    verifyClient: false,
  });
  mtlsProxy = await startTlsProxy({
    dir: join(scratch.dir, 'nginx-mtls'),
    upstream: env.address,
    pki,
    verifyClient: true,
  });
  writeFileSync(
    specPath,
    stringify({
      rollout: {
        profile: 'demo',
        fromRevision: 1,
        toRevision: 2,
        disruptionBudget: { 'pool-a': 1, 'pool-b': 1 },
        phases: [{ bulk: 'remainder' }],
        gate: '1s',
      },
    }),
  );
  writeFileSync(
    configFile,
    [
      '[profile.secure]',
      `address = "${mtlsProxy.address}"`,
      'namespace = "default"',
      '[profile.secure.tls]',
      `server_ca_cert_path = "${pki.caCert}"`,
      `client_cert_path = "${pki.clientCert}"`,
      `client_key_path = "${pki.clientKey}"`,
      '[profile.tls]',
      `address = "${tlsProxy.address}"`,
      '[profile.tls.tls]',
      `server_ca_cert_path = "${pki.caCert}"`,
      '',
    ].join('\n'),
  );
}, 180_000);

afterAll(async () => {
  await Promise.all(workers.map((w) => stopChild(w.child)));
  await Promise.all(fleets.map((f) => f.stop()));
  await tlsProxy?.stop();
  await mtlsProxy?.stop();
  await env?.teardown();
  scratch.cleanup();
});

describe('worker and CLI through a TLS-terminating nginx in front of Temporal', () => {
  it('TLS by flags (--tls-ca-cert): the worker polls and start/list/status run a rollout to completion; list by TEMPORAL_TLS_SERVER_CA_CERT_PATH and by a TOML profile', async () => {
    await rolloutThrough(
      'q-tls-flags',
      { flags: tlsFlags() },
      new RegExp(`polling ${tlsProxy.address.replace(/\./g, '\\.')} namespace default \\(TLS\\)`),
    );
    // TLS with the CA alone, by the environment and by a TOML profile: the CLI lists that rollout.
    const byEnv = await cli(['list', '--profile', 'demo'], {
      env: { TEMPORAL_ADDRESS: tlsProxy.address, TEMPORAL_TLS_SERVER_CA_CERT_PATH: pki.caCert },
    });
    const byToml = await cli(['list', '--profile', 'demo'], {
      env: { TEMPORAL_CONFIG_FILE: configFile, TEMPORAL_PROFILE: 'tls' },
    });
    for (const run of [byEnv, byToml]) {
      expect(run.code, run.stderr).toBe(0);
      expect(run.stdout).toMatch(/rollout:demo:\S+\s+rollout\s+demo\s+completed/);
    }
  }, 240_000);

  it('mTLS by flags (--tls-cert/--tls-key)', async () => {
    await rolloutThrough('q-mtls-flags', { flags: mtlsFlags() }, /\(TLS\)/);
  }, 240_000);

  it('mTLS by the TEMPORAL_* environment alone', async () => {
    await rolloutThrough(
      'q-mtls-env',
      { env: mtlsEnv() },
      new RegExp(`polling ${mtlsProxy.address.replace(/\./g, '\\.')}`),
    );
  }, 240_000);

  it('mTLS by a TOML client config profile (TEMPORAL_CONFIG_FILE + TEMPORAL_PROFILE, and --config-file/--profile-name)', async () => {
    await rolloutThrough(
      'q-mtls-toml',
      { env: { TEMPORAL_CONFIG_FILE: configFile, TEMPORAL_PROFILE: 'secure' } },
      /\(TLS\)/,
    );
    const listed = await cli(['list', '--profile', 'demo'], {
      flags: ['--config-file', configFile, '--profile-name', 'secure'],
    });
    expect(listed.code, listed.stderr).toBe(0);
    expect(listed.stdout).toContain('rollout:demo');
  }, 240_000);
});

describe('TLS misconfiguration is refused with exit 2 naming what failed; a frontend that is not there is exit 1', () => {
  const wrongCa = () => ['--address', tlsProxy.address, '--tls-ca-cert', pki.otherCaCert];
  const noClientCert = () => ['--address', mtlsProxy.address, '--tls-ca-cert', pki.caCert];

  it('a CA that did not sign the server certificate: CLI and worker exit 2 naming --tls-ca-cert', async () => {
    for (const run of [
      await cli(['list'], { flags: wrongCa() }),
      await cli(['worker', '--profiles', PROFILES, '--task-queue', 'q-never'], { flags: wrongCa() }),
    ]) {
      expect(run.code, run.stderr).toBe(2);
      expect(run.stderr).toContain(`TLS to Temporal at ${tlsProxy.address}`);
      expect(run.stderr).toContain("the server's certificate is not trusted by the CA given (--tls-ca-cert");
      expect(run.stdout).not.toContain('polling');
    }
  }, 60_000);

  it('no client certificate for the mTLS frontend: CLI and worker exit 2 saying the server requires one', async () => {
    for (const run of [
      await cli(['list'], { flags: noClientCert() }),
      await cli(['worker', '--profiles', PROFILES, '--task-queue', 'q-never'], { flags: noClientCert() }),
    ]) {
      expect(run.code, run.stderr).toBe(2);
      expect(run.stderr).toContain(
        'the server requires a client certificate (mTLS) and none was given: set --tls-cert and --tls-key',
      );
      expect(run.stdout).not.toContain('polling');
    }
    // Also when the environment, not a flag, was to give it.
    const fromEnv = await cli(['list'], {
      env: { ...mtlsEnv(), TEMPORAL_TLS_CLIENT_CERT_PATH: '', TEMPORAL_TLS_CLIENT_KEY_PATH: '' },
    });
    expect(fromEnv.code, fromEnv.stderr).toBe(2);
    expect(fromEnv.stderr).toContain('requires a client certificate');
  }, 60_000);

  it('no TLS against the TLS frontend: exit 2, saying the server speaks TLS', async () => {
    const run = await cli(['list'], { flags: ['--address', tlsProxy.address] });
    expect(run.code, run.stderr).toBe(2);
    expect(run.stderr).toContain('the server speaks TLS and this connection does not');
  }, 60_000);

  it('a frontend that is not listening, with or without TLS: exit 1 UNAVAILABLE, not bad input', async () => {
    const closed = `127.0.0.1:${await freePort()}`;
    for (const flags of [
      ['--address', closed, '--tls-ca-cert', pki.caCert],
      ['--address', closed],
    ]) {
      for (const run of [
        await cli(['list'], { flags }),
        await cli(['worker', '--profiles', PROFILES, '--task-queue', 'q-never'], { flags }),
      ]) {
        expect(run.code, run.stderr).toBe(1);
        expect(run.stderr).toContain(`UNAVAILABLE: cannot reach Temporal at ${closed}`);
      }
    }
  }, 90_000);
});
