import { join } from 'node:path';
import type { WorkflowHandle } from '@temporalio/client';
import type { temporal } from '@temporalio/proto';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { bundleWorkflowCode, Worker, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { mkdirSync, writeFileSync } from 'node:fs';
import { registerProfileEnvelopes } from '../../cli/registry-client';
import { WavegateError } from '../../core/errors';
import { demoDevices, type Fleet } from '../../sim';
import { startDevServerEnv } from '../../workers/dev-server';
import { PROJECT_ROOT } from '../../intake/package-layout';
import {
  defaultBuildId,
  describeDeployment,
  resolveWorkerVersioning,
  setCurrentVersion,
  workflowVersioning,
  type DeploymentDescription,
} from '../../workers/versioning';
import { createWorker } from '../../workers/worker';
import { pauseUpdate, resumeUpdate, type RolloutStatus } from '../../contracts/rollout';
import type { RolloutInput } from '../../workflows/rollout';
import type { BuildBMemo } from '../fixtures/build-b/workflows';
import { runCli, spawnCliUntil, stopChild } from '../support/cli';
import { fleetWithInventory, rolloutInputFor, scratchDir } from '../support/harness';
import { markerOf } from '../support/rollout-helpers';
import { workflowBundle } from '../support/temporal';
import { until } from '../support/until';

/**
 * Safe worker upgrades (issue 11 item 4) on a real dev server with the simulated fleet: rollouts started
 * on build A (the workflow code of this checkout) are paused, build B (test/fixtures/build-b: the same
 * workflows, its rollout workflow different behind `patched('test-build-b')`) becomes current, and the
 * rollouts resume. Pinned (the default) keeps a rollout on A: it finishes there while A runs, or an
 * operator moves it to B (`wavegate worker move`); auto-upgrade moves it to B at its next task. Both
 * histories (up to the pause on A, and the whole run) replay with B's code.
 */
const BUILD_B_PATH = join(PROJECT_ROOT, 'test', 'fixtures', 'build-b', 'workflows.ts');
const scratch = scratchDir('upgrade');
const auditDir = join(scratch.dir, 'audit');
const profilesRoot = join(PROJECT_ROOT, 'profiles');
let env: TestWorkflowEnvironment;
let bundleB: WorkflowBundleWithSourceMap;
const fleets: Fleet[] = [];
const stops: Array<() => Promise<void>> = [];
let n = 0;

beforeAll(async () => {
  // createWorker loads the activities with require() (kept off the CLI's start-up path): let Node's
  // loader take the .ts sources, as bin/wavegate.js does.
  (require('tsx/cjs/api') as { register: () => void }).register();
  env = await startDevServerEnv();
  bundleB = await bundleWorkflowCode({
    workflowsPath: BUILD_B_PATH,
    logger: { log() {}, trace() {}, debug() {}, info() {}, warn() {}, error: (m: string) => console.error(m) },
  });
}, 120_000);
afterEach(async () => {
  await Promise.all(stops.splice(0).map((stop) => stop()));
  await Promise.all(fleets.splice(0).map((f) => f.stop()));
});
afterAll(async () => {
  await env?.teardown();
  scratch.cleanup();
});

type Build = 'A' | 'B';
const buildId = (build: Build) => `build-${build.toLowerCase()}`;

/** An in-process worker of build A or B as a version of `deployment`; build B through the workflowsPath override. */
async function versionedWorker(
  build: Build,
  deployment: string,
  taskQueue: string,
  behavior: 'PINNED' | 'AUTO_UPGRADE' = 'PINNED',
) {
  const worker = await createWorker({
    connection: env.nativeConnection,
    namespace: env.namespace ?? 'default',
    taskQueue,
    ...(build === 'A' ? { workflowBundle: await workflowBundle() } : { workflowsPath: BUILD_B_PATH }),
    versioning: { version: { deploymentName: deployment, buildId: buildId(build) }, behavior, buildIdSource: 'test' },
    // Its rollouts name their fleets' inventories under the scratch dir: the worker reads them from there only.
    deps: { auditDir, profilesRoot, inventoryRoots: [scratch.dir], identity: `${buildId(build)}@${deployment}` },
  });
  const running = worker.run();
  let stopped = false;
  const stop = async () => {
    if (stopped) return;
    stopped = true;
    worker.shutdown();
    await running;
  };
  stops.push(stop);
  await deploymentHas(deployment, buildId(build));
  return { stop };
}

async function deploymentHas(deployment: string, build: string): Promise<DeploymentDescription> {
  return until(`${build} polling in ${deployment}`, async () => {
    try {
      const d = await describeDeployment(env.client, deployment);
      return d.versions.some((v) => v.buildId === build) ? d : undefined;
    } catch (err) {
      if (err instanceof WavegateError && err.code === 'NOT_FOUND') return undefined;
      throw err;
    }
  });
}

/**
 * Wait until `build` is current and the routing change reached the task queues. The server propagates it in the
 * background: 8 s alone here, but a CI run with three test files at once waited past a minute once (2026-12-05).
 */
async function currentIs(deployment: string, build: string): Promise<void> {
  await until(
    `${build} current in ${deployment}`,
    async () => {
      const d = await describeDeployment(env.client, deployment);
      return d.current === build && d.routingSettled ? true : undefined;
    },
    180_000,
  );
}

async function makeCurrent(deployment: string, build: string): Promise<void> {
  // A build's workers register each task queue with their first polls: until then the server refuses it.
  await until(`${build} accepted as current in ${deployment}`, async () => {
    try {
      return await setCurrentVersion(env.client, deployment, build, 'test');
    } catch (err) {
      if (err instanceof WavegateError && err.code === 'INVALID_STATE') return undefined;
      throw err;
    }
  });
  await currentIs(deployment, build);
}

/** Four simulated devices and a two-phase rollout whose canary gate leaves time to pause. */
async function rolloutOn(taskQueue: string): Promise<{ fleet: Fleet; input: RolloutInput; handle: WorkflowHandle }> {
  const dir = join(scratch.dir, `t${++n}`);
  const { fleet, inventoryPath } = await fleetWithInventory(dir, demoDevices(4), { 'pool-a': 0.5, 'pool-b': 0.5 });
  fleets.push(fleet);
  const input = rolloutInputFor(
    dir,
    {
      phases: [
        { canary: '1 device', gate: '3s' },
        { bulk: 'remainder', gate: '1s' },
      ],
      gate: '1s',
      disruptionBudget: { 'pool-a': 0.5, 'pool-b': 0.5 },
    },
    inventoryPath,
    `rollout:demo-upgrade-${n}`,
  );
  const handle = await env.client.workflow.start('rolloutWorkflow', {
    workflowId: input.rolloutId,
    taskQueue,
    args: [input],
  });
  return { fleet, input, handle };
}

/** Pause once the canary is applied (build A did real work), and wait until the rollout says paused. */
async function pauseAfterCanary(handle: WorkflowHandle): Promise<RolloutStatus> {
  await until('canary applied', async () => {
    const s = await handle.query<RolloutStatus>('status');
    return s.devices.some((d) => d.state === 'applied') ? s : undefined;
  });
  await handle.executeUpdate(pauseUpdate, { args: [{ by: 'test', reason: 'worker upgrade' }] });
  return until('paused', async () => {
    const s = await handle.query<RolloutStatus>('status');
    return s.state === 'paused' ? s : undefined;
  });
}

/** The build of every completed workflow task, in history order (adjacent repeats folded). */
function buildsOf(history: temporal.api.history.v1.IHistory): string[] {
  const builds: string[] = [];
  for (const e of history.events ?? []) {
    const attrs = e.workflowTaskCompletedEventAttributes;
    if (!attrs) continue;
    const id = attrs.deploymentVersion?.buildId ?? attrs.workerVersion?.buildId ?? '?';
    if (builds.at(-1) !== id) builds.push(id);
  }
  return builds;
}

async function buildBMemo(handle: WorkflowHandle): Promise<BuildBMemo | undefined> {
  return (await handle.describe()).memo?.buildB as BuildBMemo | undefined;
}

async function replay(
  bundle: WorkflowBundleWithSourceMap,
  histories: Array<{ workflowId: string; history: temporal.api.history.v1.IHistory }>,
) {
  const errors: Record<string, string | undefined> = {};
  for await (const r of Worker.runReplayHistories({ workflowBundle: bundle }, histories))
    errors[r.workflowId] = r.error ? String(r.error) : undefined;
  return errors;
}

function cliEnv() {
  return {
    TEMPORAL_ADDRESS: env.address,
    TEMPORAL_NAMESPACE: env.namespace ?? 'default',
    TEMPORAL_PROFILE: '',
    TEMPORAL_CONFIG_FILE: join(scratch.dir, 'none.toml'),
    WAVEGATE_DEPLOYMENT_NAME: '',
  };
}

describe('worker upgrade from build A to build B', () => {
  it('pinned (the default): a rollout paused on A, its workers replaced by B, is moved by the operator and completes on B; both histories replay with B', async () => {
    const deployment = 'wavegate-upgrade-pinned';
    const taskQueue = `upgrade-pinned-${process.pid}`;
    // Build A: the real `wavegate worker`, as an operator runs it.
    const a = await spawnCliUntil(
      [
        'worker',
        '--address',
        env.address,
        '--task-queue',
        taskQueue,
        '--profiles',
        profilesRoot,
        '--audit-dir',
        auditDir,
        '--deployment-name',
        deployment,
        '--build-id',
        buildId('A'),
      ],
      /worker \S+ polling/,
    );
    stops.push(() => stopChild(a.child));
    expect(a.output()).toContain(
      `versioning: deployment ${deployment} build build-a (--build-id), new rollouts pinned`,
    );
    await deploymentHas(deployment, 'build-a');
    const promoteA = await runCli(['worker', 'set-current', 'build-a', '--deployment-name', deployment], {
      env: cliEnv(),
    });
    expect(promoteA.stderr).toBe('');
    expect(promoteA.stdout).toContain(`deployment ${deployment}: current build build-a`);
    expect(promoteA.code).toBe(0);
    await currentIs(deployment, 'build-a');
    // The revision registry (an entity that never ends) starts on A too.
    const registered = await registerProfileEnvelopes(env.client, {
      profile: 'demo',
      profileDir: join(profilesRoot, 'demo'),
      by: 'test',
      taskQueue,
    });
    expect(registered.map((r) => r.outcome)).toEqual(['registered', 'registered']);

    const { fleet, handle } = await rolloutOn(taskQueue);
    await pauseAfterCanary(handle);
    const onA = await handle.fetchHistory();
    expect(await workflowVersioning(env.client, handle.workflowId)).toMatchObject({
      buildId: 'build-a',
      behavior: 'pinned',
    });

    // Replace A by B: stop A's worker, start B's, make B current.
    await stopChild(a.child);
    await versionedWorker('B', deployment, taskQueue);
    const promoteB = await runCli(['worker', 'set-current', 'build-b', '--deployment-name', deployment], {
      env: cliEnv(),
    });
    expect(promoteB.stdout).toContain(`deployment ${deployment}: current build build-b (was build-a)`);
    expect(promoteB.code).toBe(0);
    await currentIs(deployment, 'build-b');
    const versions = await runCli(['worker', 'versions', '--deployment-name', deployment], { env: cliEnv() });
    expect(versions.code).toBe(0);
    expect(versions.stdout).toMatch(/build-b \*\s+current/);
    // A pinned rollout still belongs to A (it is what keeps A "draining"): it never moves by itself.
    expect(versions.stdout).toMatch(/build-a\s+draining/);
    expect(await workflowVersioning(env.client, handle.workflowId)).toMatchObject({
      buildId: 'build-a',
      behavior: 'pinned',
    });
    // The registry entity never ends, so it is started with an auto-upgrade override: unlike the pinned
    // rollout it follows the current build by itself, and B answers it from then on with no operator step.
    expect(await workflowVersioning(env.client, 'registry:demo')).toMatchObject({
      buildId: 'build-a',
      override: 'auto-upgrade',
    });
    const again = await registerProfileEnvelopes(env.client, {
      profile: 'demo',
      profileDir: join(profilesRoot, 'demo'),
      by: 'test',
      taskQueue,
    });
    expect(again.map((r) => r.outcome)).toEqual(['existing', 'existing']);
    expect(buildsOf(await env.client.workflow.getHandle('registry:demo').fetchHistory())).toEqual([
      'build-a',
      'build-b',
    ]);
    expect(await workflowVersioning(env.client, 'registry:demo')).toMatchObject({
      buildId: 'build-b',
      override: 'auto-upgrade',
    });
    // A registry started by an older wavegate (no override) is moved once by hand; the command is idempotent.
    const follow = await runCli(['worker', 'move', 'registry:demo', '--auto-upgrade'], { env: cliEnv() });
    expect(follow.stdout).toContain('registry:demo: auto-upgrade (last ran on build-b)');
    expect(follow.code).toBe(0);

    // The operator moves it (or would keep A running until it drains), then resumes it.
    const move = await runCli(
      ['worker', 'move', handle.workflowId, '--to', 'build-b', '--deployment-name', deployment],
      { env: cliEnv() },
    );
    expect(move.stderr).toBe('');
    expect(move.stdout).toContain(`${handle.workflowId}: pinned to build-b`);
    expect(move.code).toBe(0);
    await handle.executeUpdate(resumeUpdate, { args: [{ by: 'test' }] });
    const result = (await handle.result()) as RolloutStatus;
    expect(result.state).toBe('completed');
    for (const d of fleet.devices) expect(markerOf(fleet, d.id)).toBe(2);
    // B took its new path at the end (live), and could tell the rollout started on A.
    expect(await buildBMemo(handle)).toEqual({ startedOn: 'A', finishedOn: 'B' });
    const whole = await handle.fetchHistory();
    expect(buildsOf(whole)).toEqual(['build-a', 'build-b']);

    // Both histories replay with the new code; build A cannot replay B's (the memo is a command A never
    // makes), which is why a rollback never moves a rollout B has advanced back onto A.
    const histories = [
      { workflowId: 'paused-on-a', history: onA },
      { workflowId: 'finished-on-b', history: whole },
    ];
    expect(await replay(bundleB, histories)).toEqual({ 'paused-on-a': undefined, 'finished-on-b': undefined });
    const onBuildA = await replay(await workflowBundle(), histories);
    expect(onBuildA['paused-on-a']).toBeUndefined();
    expect(onBuildA['finished-on-b']).toMatch(/Nondeterminism|DeterminismViolation/i);
  }, 240_000);

  it('pinned: while B is current, a rollout started on A finishes on A (A kept running to drain it) and a new rollout runs on B', async () => {
    const deployment = 'wavegate-upgrade-drain';
    const taskQueue = `upgrade-drain-${process.pid}`;
    await versionedWorker('A', deployment, taskQueue);
    await versionedWorker('B', deployment, taskQueue);
    await makeCurrent(deployment, 'build-a');
    const old = await rolloutOn(taskQueue);
    await pauseAfterCanary(old.handle);

    await makeCurrent(deployment, 'build-b');
    const fresh = await rolloutOn(taskQueue);
    await old.handle.executeUpdate(resumeUpdate, { args: [{ by: 'test' }] });
    const [oldResult, freshResult] = (await Promise.all([
      old.handle.result(),
      fresh.handle.result(),
    ])) as RolloutStatus[];
    expect(oldResult!.state).toBe('completed');
    expect(freshResult!.state).toBe('completed');
    for (const { fleet } of [old, fresh]) for (const d of fleet.devices) expect(markerOf(fleet, d.id)).toBe(2);
    // The old rollout never ran a task on B (no memo, every task on A); the new one ran B's code from its start.
    expect(buildsOf(await old.handle.fetchHistory())).toEqual(['build-a']);
    expect(await buildBMemo(old.handle)).toBeUndefined();
    expect(buildsOf(await fresh.handle.fetchHistory())).toEqual(['build-b']);
    expect(await buildBMemo(fresh.handle)).toEqual({ startedOn: 'B', finishedOn: 'B' });
  }, 240_000);

  it('auto-upgrade: a rollout paused on A moves to B by itself once B is current and A is gone, and completes', async () => {
    const deployment = 'wavegate-upgrade-auto';
    const taskQueue = `upgrade-auto-${process.pid}`;
    const a = await versionedWorker('A', deployment, taskQueue, 'AUTO_UPGRADE');
    await makeCurrent(deployment, 'build-a');
    const { fleet, handle } = await rolloutOn(taskQueue);
    await pauseAfterCanary(handle);
    expect(await workflowVersioning(env.client, handle.workflowId)).toMatchObject({
      buildId: 'build-a',
      behavior: 'auto_upgrade',
    });

    await a.stop();
    await versionedWorker('B', deployment, taskQueue, 'AUTO_UPGRADE');
    await makeCurrent(deployment, 'build-b');
    await handle.executeUpdate(resumeUpdate, { args: [{ by: 'test' }] });
    const result = (await handle.result()) as RolloutStatus;
    expect(result.state).toBe('completed');
    for (const d of fleet.devices) expect(markerOf(fleet, d.id)).toBe(2);
    expect(buildsOf(await handle.fetchHistory())).toEqual(['build-a', 'build-b']);
    expect(await buildBMemo(handle)).toEqual({ startedOn: 'A', finishedOn: 'B' });
    expect(await replay(bundleB, [{ workflowId: 'auto', history: await handle.fetchHistory() }])).toEqual({
      auto: undefined,
    });
  }, 240_000);

  it('a worker without --build-id derives one from the package version and the workflow sources, and prints it', async () => {
    const derived = defaultBuildId();
    expect(derived).toMatch(/^0\.1\.0-[0-9a-f]{12}$/);
    expect(defaultBuildId()).toBe(derived);
    // A changed workflow source is another build.
    const dir = join(scratch.dir, 'sources');
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, 'a.ts'), 'export const a = 1;\n');
    const before = defaultBuildId([dir]);
    writeFileSync(join(dir, 'a.ts'), 'export const a = 2;\n');
    expect(defaultBuildId([dir])).not.toBe(before);
    expect(
      resolveWorkerVersioning({}, { WAVEGATE_DEPLOYMENT_NAME: 'fleet', WAVEGATE_BUILD_ID: '2026.12.1' }),
    ).toMatchObject({
      version: { deploymentName: 'fleet', buildId: '2026.12.1' },
      behavior: 'PINNED',
      buildIdSource: 'WAVEGATE_BUILD_ID',
    });
    expect(
      resolveWorkerVersioning({ versioningBehavior: 'auto-upgrade' }, { WAVEGATE_DEPLOYMENT_NAME: 'fleet' }),
    ).toMatchObject({ behavior: 'AUTO_UPGRADE', version: { buildId: derived } });
    expect(resolveWorkerVersioning({}, {})).toBeUndefined();

    const w = await spawnCliUntil(
      [
        'worker',
        '--address',
        env.address,
        '--task-queue',
        `derived-${process.pid}`,
        '--profiles',
        profilesRoot,
        '--audit-dir',
        auditDir,
        '--deployment-name',
        'wavegate-derived',
      ],
      /worker \S+ polling/,
    );
    stops.push(() => stopChild(w.child));
    expect(w.output()).toContain(
      `versioning: deployment wavegate-derived build ${derived} (derived from the package version and the workflow sources), new rollouts pinned`,
    );
    expect(w.output()).toContain(`wavegate worker set-current ${derived} --deployment-name wavegate-derived`);
    await deploymentHas('wavegate-derived', derived);
  }, 120_000);

  it('refuses bad versioning input with exit 2 naming the flag, and a build nobody runs as current', async () => {
    const behavior = await runCli(['worker', '--deployment-name', 'd', '--versioning-behavior', 'sticky'], {
      env: cliEnv(),
    });
    expect(behavior.code).toBe(2);
    expect(behavior.stderr).toContain('--versioning-behavior "sticky": expected one of pinned, auto-upgrade');
    const lone = await runCli(['worker', '--build-id', 'b1'], { env: cliEnv() });
    expect(lone.code).toBe(2);
    expect(lone.stderr).toContain('--build-id b1: needs --deployment-name');
    const dotted = await runCli(['worker', '--deployment-name', 'a.b'], { env: cliEnv() });
    expect(dotted.code).toBe(2);
    expect(dotted.stderr).toContain('--deployment-name "a.b"');
    const unknown = await runCli(['worker', 'set-current', 'build-z', '--deployment-name', 'wavegate-upgrade-pinned'], {
      env: cliEnv(),
    });
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain('has no build "build-z" (known: build-a, build-b)');
  }, 120_000);
});
