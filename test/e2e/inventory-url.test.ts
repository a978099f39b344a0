import type { ChildProcess } from 'node:child_process';
import { cpSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { temporal } from '@temporalio/proto';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { fleetInventory } from '../../sim/inventory';
import { demoDevices, startFleet, type Fleet } from '../../sim';
import type { RolloutInput } from '../../core/rollout/input';
import type { RolloutStatus } from '../../core/rollout/status';
import { fetchInventory } from '../../intake/inventory-url';
import { startDevServerEnv } from '../../workers/dev-server';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { runCli, spawnCliUntil, stopChild } from '../support/cli';
import { scratchDir } from '../support/harness';
import { recordHistory } from '../support/histories';

/**
 * Membership that does not depend on the worker's disk (issue 11 item 3), end to end: a real dev server,
 * the simulated fleet, a real `wavegate worker` whose cwd, HOME and profiles root are its own directory,
 * and `wavegate start` run from another directory X holding the spec and the inventory. The inventory is
 * deleted as soon as start returns, and the rollout still completes: the worker snapshots the membership
 * entity through the client. The HTTP source (`--inventory-url`) is read from a loopback node:http
 * server, including its failure modes; `--inventory-on-worker` keeps the old path.
 */
const scratch = scratchDir('membership-e2e');
const cliDir = join(scratch.dir, 'operator'); // X
const workerDir = join(scratch.dir, 'worker');
const TASK_QUEUE = 'membership-e2e';
const TOKEN = 'registry-token-5f0c2e';
let env: TestWorkflowEnvironment;
let fleet: Fleet;
let worker: ChildProcess | undefined;
let registry: Server;
let registryUrl = '';
const seenAuth: string[] = [];
/** The registry's behaviour per path: tests add routes. */
const routes = new Map<string, (req: IncomingMessage, res: ServerResponse) => void>();

function json(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

/** `wavegate <args>` run in `cwd`, with nothing from the test's Temporal environment. */
/** The newest rollout a `start` or `revert` here printed (`rollout <id> started`, `revert <id> started`): each has an id of its own. */
let latest = 'none started';

async function wavegate(args: string[], opts: { cwd: string; env?: NodeJS.ProcessEnv }) {
  const run = await runCli(args, { cwd: opts.cwd, env: { ...NO_TEMPORAL_ENV(), ...opts.env } });
  const printed = /^(?:rollout|revert) (rollout:demo:\S+) started/m.exec(run.stdout)?.[1];
  if (printed) latest = printed;
  return run;
}

const NO_TEMPORAL_ENV = () => ({
  TEMPORAL_ADDRESS: '',
  TEMPORAL_PROFILE: '',
  TEMPORAL_CONFIG_FILE: join(scratch.dir, 'none.toml'),
  WAVEGATE_PROFILES: '',
});
const temporalFlags = () => [
  '--address',
  env.address,
  '--namespace',
  env.namespace ?? 'default',
  '--task-queue',
  TASK_QUEUE,
];
const profilesFlags = () => ['--profiles', join(PROJECT_ROOT, 'profiles')];

async function rolloutInput(): Promise<RolloutInput> {
  const described = await env.client.workflow.getHandle(latest).fetchHistory();
  const started = described.events![0]!.workflowExecutionStartedEventAttributes!;
  return JSON.parse(Buffer.from(started.input!.payloads![0]!.data!).toString()) as RolloutInput;
}

/** The snapshotFleet activity inputs of the latest rollout, as JSON text. */
async function snapshotInputs(): Promise<string[]> {
  const history = await env.client.workflow.getHandle(latest).fetchHistory();
  return history
    .events!.filter((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'snapshotFleet')
    .map((e) => Buffer.from(e.activityTaskScheduledEventAttributes!.input!.payloads![0]!.data!).toString());
}

async function finished(): Promise<RolloutStatus> {
  return env.client.workflow.getHandle(latest).result() as Promise<RolloutStatus>;
}

beforeAll(async () => {
  env = await startDevServerEnv();
  fleet = await startFleet({ devices: demoDevices(4), dir: join(scratch.dir, 'fleet') });
  mkdirSync(cliDir, { recursive: true });
  mkdirSync(join(workerDir, 'home'), { recursive: true });
  cpSync(join(PROJECT_ROOT, 'profiles', 'demo'), join(workerDir, 'profiles', 'demo'), { recursive: true });
  writeFileSync(
    join(cliDir, 'spec.yaml'),
    stringify({
      rollout: {
        profile: 'demo',
        fromRevision: 1,
        toRevision: 2,
        disruptionBudget: { 'pool-a': 0.5, 'pool-b': 0.5 },
        phases: [{ bulk: 'remainder' }],
        gate: '1s',
      },
    }),
  );
  // The worker: its own cwd, HOME, profiles root and audit dir; nothing of X.
  const spawned = await spawnCliUntil(
    ['worker', ...temporalFlags(), '--profiles', join(workerDir, 'profiles'), '--audit-dir', join(workerDir, 'audit')],
    /worker \S+ polling/,
    120_000,
    { HOME: join(workerDir, 'home'), ...NO_TEMPORAL_ENV() },
    workerDir,
  );
  worker = spawned.child;
  registry = createServer((req, res) => {
    seenAuth.push(req.headers.authorization ?? '');
    const route = routes.get(new URL(req.url!, 'http://x').pathname);
    if (route) route(req, res);
    else json(res, 404, { error: 'no such page' });
  });
  await new Promise<void>((r) => registry.listen(0, '127.0.0.1', r));
  registryUrl = `http://127.0.0.1:${(registry.address() as AddressInfo).port}`;
  // The fleet as a registry serves it: two pages, pools and defaults on the first, a bearer token required.
  const doc = fleetInventory(fleet, { budgets: { 'pool-a': 0.5, 'pool-b': 0.5 } });
  const authed = (res: ServerResponse, req: IncomingMessage, body: unknown) =>
    req.headers.authorization === `Bearer ${TOKEN}` ? json(res, 200, body) : json(res, 401, { error: 'token' });
  routes.set('/devices', (req, res) =>
    authed(res, req, {
      pools: doc.pools,
      defaults: doc.defaults,
      devices: doc.devices.slice(0, 2),
      next: '/devices/page2?cursor=2',
    }),
  );
  routes.set('/devices/page2', (req, res) => authed(res, req, { devices: doc.devices.slice(2), next: null }));
}, 240_000);

afterAll(async () => {
  if (worker) await stopChild(worker);
  registry?.close();
  await fleet?.stop();
  await env?.teardown();
  scratch.cleanup();
});

describe('membership that does not live on the worker', () => {
  it('a rollout started from X completes on a worker elsewhere after the inventory in X is deleted', async () => {
    writeFileSync(
      join(cliDir, 'fleet.yaml'),
      stringify(fleetInventory(fleet, { budgets: { 'pool-a': 0.5, 'pool-b': 0.5 } })),
    );
    const start = await wavegate(
      ['start', '-f', 'spec.yaml', '--inventory', 'fleet.yaml', ...profilesFlags(), ...temporalFlags()],
      { cwd: cliDir },
    );
    expect(start.code, `${start.stdout}\n${start.stderr}`).toBe(0);
    // Gone before the worker's snapshot could read it (X was never the worker's to read anyway).
    rmSync(join(cliDir, 'fleet.yaml'));
    const status = await finished();
    expect(status.state, JSON.stringify(status.devices)).toBe('completed');
    expect(status.devices.map((d) => d.state)).toEqual(['applied', 'applied', 'applied', 'applied']);
    const input = await rolloutInput();
    expect(input.membership).toMatchObject({ devices: 4, pages: 1, source: join(cliDir, 'fleet.yaml') });
    const snapshots = await snapshotInputs();
    expect(snapshots.length).toBe(1);
    expect(snapshots[0]).toContain(input.membership!.workflowId);
    expect(JSON.parse(snapshots[0]!)).not.toHaveProperty('inventoryPath');
    // Histories of the new path (patch membership-entity) for test/workflow/replay.test.ts.
    await recordHistory(env.client.workflow.getHandle(latest), 'membership-rollout');
    await recordHistory(env.client.workflow.getHandle(input.membership!.workflowId), 'membership-entity-sealed');
  }, 180_000);

  it('node-down rechecks run on the CLI host at start, their standing stored with the record; the worker runs none', async () => {
    const inventory = join(cliDir, 'fleet2.yaml');
    writeFileSync(inventory, stringify(fleetInventory(fleet, { budgets: { 'pool-a': 0.5, 'pool-b': 0.5 } })));
    const log = join(scratch.dir, 'rechecks.log');
    const down = fleet.devices[0]!.id;
    // $PPID of the recheck's shell is the process that ran it: the CLI here, never the worker.
    const mark = await wavegate(
      [
        'fleet',
        'mark-down',
        down,
        '--inventory',
        'fleet2.yaml',
        '--recheck',
        `echo $PPID >> ${log}; exit 1`,
        '--reason',
        'PSU replaced',
      ],
      { cwd: cliDir },
    );
    expect(mark.code, mark.stderr).toBe(0);
    const start = await wavegate(
      ['start', '-f', 'spec.yaml', '--inventory', 'fleet2.yaml', ...profilesFlags(), ...temporalFlags()],
      { cwd: cliDir },
    );
    expect(start.code, `${start.stdout}\n${start.stderr}`).toBe(0);
    rmSync(inventory);
    rmSync(join(cliDir, 'fleet2.verdicts.yaml'));
    const status = await finished();
    expect(status.state).toBe('completed');
    const held = status.devices.find((d) => d.id === down)!;
    expect(held).toMatchObject({
      state: 'not-for-me',
      reason: expect.stringMatching(/^node-down since \S+Z, expires \S+Z: PSU replaced/),
    });
    const rechecks = readFileSync(log, 'utf8').trim().split('\n');
    expect(rechecks.length).toBe(1);
    expect(rechecks).not.toContain(String(worker!.pid));
    expect((await rolloutInput()).membership).toBeDefined();
  }, 180_000);

  it('--inventory-url: read page by page with the token from the environment, validated, stored, rolled out; the token is nowhere in history', async () => {
    const start = await wavegate(
      [
        'start',
        '-f',
        'spec.yaml',
        '--inventory-url',
        `${registryUrl}/devices`,
        '--inventory-token-env',
        'REGISTRY_TOKEN',
        ...profilesFlags(),
        ...temporalFlags(),
      ],
      {
        cwd: cliDir,
        env: { REGISTRY_TOKEN: TOKEN },
      },
    );
    expect(start.code, `${start.stdout}\n${start.stderr}`).toBe(0);
    expect(seenAuth.filter((a) => a === `Bearer ${TOKEN}`).length).toBeGreaterThanOrEqual(2);
    const status = await finished();
    expect(status.state).toBe('completed');
    // Already at r2 from the first rollout: every one of the 4 was snapshotted from the URL's membership.
    expect(status.devices.map((d) => d.id).sort()).toEqual(fleet.devices.map((d) => d.id).sort());
    const input = await rolloutInput();
    expect(input.inventoryPath).toBe(`${registryUrl}/devices`);
    expect(input.membership).toMatchObject({ devices: 4, source: `${registryUrl}/devices` });
    // The raw histories (every payload's bytes) of the rollout and its membership entity.
    for (const id of [latest, input.membership!.workflowId]) {
      const raw = Buffer.from(
        temporal.api.history.v1.History.encode(await env.client.workflow.getHandle(id).fetchHistory()).finish(),
      );
      expect(raw.includes('fleet-0') || raw.includes(fleet.devices[0]!.id)).toBe(true);
      expect(raw.includes(TOKEN)).toBe(false);
    }
  }, 180_000);

  it('revert of a rollout that read its inventory over HTTP: it asks for --inventory-url again, then reads it from there', async () => {
    // Every device back before r1 so the rollout changes all four (and raises their floors).
    for (const d of fleet.devices)
      for (const dir of ['.wavegate', 'etc']) rmSync(join(d.sandbox, dir), { recursive: true, force: true });
    const urlFlags = ['--inventory-url', `${registryUrl}/devices`, '--inventory-token-env', 'REGISTRY_TOKEN'];
    const start = await wavegate(
      ['start', '-f', 'spec.yaml', ...urlFlags, ...profilesFlags(), ...temporalFlags(), '--wait'],
      { cwd: cliDir, env: { REGISTRY_TOKEN: TOKEN } },
    );
    expect(start.code, `${start.stdout}\n${start.stderr}`).toBe(0);
    const original = latest;
    const { runId } = await env.client.workflow.getHandle(original).describe();

    // Without an inventory flag: the stored URL is not read again on its own (its query is not kept).
    const bare = await wavegate(['revert', original, ...profilesFlags(), ...temporalFlags()], {
      cwd: cliDir,
      env: { REGISTRY_TOKEN: TOKEN },
    });
    expect(bare.code, bare.stderr).toBe(2);
    expect(bare.stderr).toContain(
      `"${registryUrl}/devices" is a URL: the rollout read it with --inventory-url; give --inventory-url again`,
    );
    expect(latest).toBe(original); // nothing started

    const revert = await wavegate(['revert', original, ...urlFlags, ...profilesFlags(), ...temporalFlags(), '--wait'], {
      cwd: cliDir,
      env: { REGISTRY_TOKEN: TOKEN },
    });
    expect(revert.code, `${revert.stdout}\n${revert.stderr}`).toBe(0);
    expect(revert.stdout).toContain('over the 4 device(s)');
    for (const d of fleet.devices)
      expect(readFileSync(join(d.sandbox, '.wavegate/profiles/demo/revision'), 'utf8').trim()).toBe('1');
    const input = await rolloutInput();
    expect(latest).not.toBe(original);
    expect(input.reverts).toEqual({ rolloutId: original, runId, closedAt: expect.any(Number) });
    expect(input.membership).toMatchObject({ devices: 4, source: `${registryUrl}/devices` });
  }, 180_000);

  it('--inventory-on-worker: the worker reads the path on its own disk, as before', async () => {
    const path = join(scratch.dir, 'shared-fleet.yaml');
    writeFileSync(path, stringify(fleetInventory(fleet, { budgets: { 'pool-a': 0.5, 'pool-b': 0.5 } })));
    const start = await wavegate(
      [
        'start',
        '-f',
        'spec.yaml',
        '--inventory',
        path,
        '--inventory-on-worker',
        ...profilesFlags(),
        ...temporalFlags(),
      ],
      { cwd: cliDir },
    );
    expect(start.code, `${start.stdout}\n${start.stderr}`).toBe(0);
    expect((await finished()).state).toBe('completed');
    const input = await rolloutInput();
    expect(input.membership).toBeUndefined();
    expect(JSON.parse((await snapshotInputs())[0]!)).toMatchObject({ inventoryPath: path });
  }, 180_000);
});

describe('the HTTP source refuses what it cannot trust (exit 2, nothing started)', () => {
  const device = (id: string, port: unknown = 2222) => ({
    id,
    host: '127.0.0.1',
    port,
    user: 'u',
    pool: 'p',
    class: 'c',
    os: 'linux',
  });

  it('a 500 names the page and the status', async () => {
    routes.set('/broken', (_req, res) => json(res, 500, { error: 'db down' }));
    await expect(fetchInventory(`${registryUrl}/broken`)).rejects.toThrow(
      /\/broken page 1: the server answered 500 Internal Server Error/,
    );
  });

  it('a malformed page: not JSON, or not { devices, next }', async () => {
    routes.set('/garbage', (_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{"devices": [');
    });
    await expect(fetchInventory(`${registryUrl}/garbage`)).rejects.toThrow(
      /\/garbage page 1: invalid\n {2}\(root\): not JSON/,
    );
    routes.set('/shape', (_req, res) => json(res, 200, { devices: { a: 1 }, next: null }));
    await expect(fetchInventory(`${registryUrl}/shape`)).rejects.toThrow(/devices: must be a list of devices/);
    routes.set('/next-bad', (_req, res) => json(res, 200, { devices: [device('a')], next: 42 }));
    await expect(fetchInventory(`${registryUrl}/next-bad`)).rejects.toThrow(/next: must be a URL or null \(got 42\)/);
  });

  it('a device that fails the inventory schema is named with its field and value, as for a file', async () => {
    routes.set('/bad-device', (_req, res) =>
      json(res, 200, { devices: [device('a'), device('b', 'twenty-two')], next: null }),
    );
    await expect(fetchInventory(`${registryUrl}/bad-device`)).rejects.toThrow(/devices\[1\]\.port/);
  });

  it('a page that never ends times out', async () => {
    routes.set('/endless', (_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write('{"devices": [');
      const tick = setInterval(() => res.write(' '), 100);
      res.on('close', () => clearInterval(tick));
    });
    const started = Date.now();
    await expect(fetchInventory(`${registryUrl}/endless`, { pageTimeoutMs: 1_000 })).rejects.toThrow(
      /\/endless page 1: no whole page within 1s/,
    );
    expect(Date.now() - started).toBeLessThan(5_000);
  });

  it('an oversized page is refused while it is read', async () => {
    routes.set('/huge', (_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' }); // no content-length: chunked
      res.write('{"devices": [');
      for (let i = 0; i < 200; i++) res.write(`${JSON.stringify(device(`d-${i}`))},`);
      res.end(`${JSON.stringify(device('last'))}], "next": null}`);
    });
    await expect(fetchInventory(`${registryUrl}/huge`, { maxPageBytes: 4_096 })).rejects.toThrow(
      /\/huge page 1: page larger than 4096 bytes/,
    );
  });

  it('pages that loop, leave the origin, or never stop are refused', async () => {
    routes.set('/loop', (_req, res) => json(res, 200, { devices: [device('a')], next: '/loop' }));
    await expect(fetchInventory(`${registryUrl}/loop`)).rejects.toThrow(/next: "\/loop" was already read/);
    routes.set('/away', (_req, res) => json(res, 200, { devices: [device('a')], next: 'http://192.0.2.1/devices' }));
    await expect(fetchInventory(`${registryUrl}/away`)).rejects.toThrow(/next: "http:\/\/192.0.2.1" is another origin/);
    let n = 0;
    routes.set('/more', (_req, res) => json(res, 200, { devices: [device(`m-${n}`)], next: `/more?p=${++n}` }));
    await expect(fetchInventory(`${registryUrl}/more`, { maxPages: 5 })).rejects.toThrow(/more than 5 pages/);
  });

  it('URLs and token references are checked before anything is read', async () => {
    await expect(fetchInventory('ftp://127.0.0.1/devices')).rejects.toThrow(
      /--inventory-url "ftp:\/\/127.0.0.1\/devices": must be http or https \(got ftp\)/,
    );
    await expect(fetchInventory(`http://ops:hunter2@127.0.0.1:1/devices`)).rejects.toThrow(
      /credentials may not be in the URL/,
    );
    await expect(fetchInventory(`http://ops:hunter2@127.0.0.1:1/devices`)).rejects.not.toThrow(/hunter2/);
    await expect(fetchInventory(`${registryUrl}/devices`, { tokenEnv: 'NO_SUCH_TOKEN_VAR', env: {} })).rejects.toThrow(
      /--inventory-token-env "NO_SUCH_TOKEN_VAR": that environment variable is not set/,
    );
  });

  it('wavegate plan and start exit 2 on a bad page, and start starts nothing', async () => {
    routes.set('/bad-device', (_req, res) =>
      json(res, 200, { devices: [device('a'), device('b', 'twenty-two')], next: null }),
    );
    // Every start takes the profile's lock first: its latest run is the same after a refused start.
    const before = (await env.client.workflow.getHandle('profile-lock:demo').describe()).runId;
    const plan = await wavegate(
      ['plan', '-f', 'spec.yaml', '--inventory-url', `${registryUrl}/bad-device`, ...profilesFlags()],
      { cwd: cliDir },
    );
    expect(plan.code).toBe(2);
    expect(plan.stderr).toMatch(/devices\[1\]\.port/);
    const start = await wavegate(
      ['start', '-f', 'spec.yaml', '--inventory-url', `${registryUrl}/broken`, ...profilesFlags(), ...temporalFlags()],
      { cwd: cliDir },
    );
    expect(start.code).toBe(2);
    expect(start.stderr).toMatch(/answered 500/);
    expect((await env.client.workflow.getHandle('profile-lock:demo').describe()).runId).toBe(before);
    const both = await wavegate(
      [
        'start',
        '-f',
        'spec.yaml',
        '--inventory',
        'x.yaml',
        '--inventory-url',
        `${registryUrl}/devices`,
        ...profilesFlags(),
        ...temporalFlags(),
      ],
      { cwd: cliDir },
    );
    expect(both.code).toBe(2);
    expect(both.stderr).toMatch(/--inventory-url: give --inventory or --inventory-url, not both/);
    const planOk = await wavegate(
      [
        'plan',
        '-f',
        'spec.yaml',
        '--inventory-url',
        `${registryUrl}/devices`,
        '--inventory-token-env',
        'REGISTRY_TOKEN',
        ...profilesFlags(),
      ],
      { cwd: cliDir, env: { REGISTRY_TOKEN: TOKEN } },
    );
    expect(planOk.code, planOk.stderr).toBe(0);
    expect(planOk.stdout).toContain(fleet.devices[3]!.id);
  }, 120_000);
});
