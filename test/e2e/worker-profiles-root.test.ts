import { cpSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { stringify } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WorkflowNotFoundError } from '@temporalio/client';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { keyPairFromSeed, pinOf } from '../../core/signing';
import { demoDevices, type Fleet } from '../../sim';
import { startDevServerEnv } from '../../workers/dev-server';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { runCli, spawnCliUntil, stopChild } from '../support/cli';
import { fleetWithInventory, scratchDir, writeDemoSpecAt } from '../support/harness';

/**
 * Content outside the checkout (issue 10 item 1): real `wavegate worker` processes whose profiles root
 * (`--profiles`) is a temp dir, a real dev server, the simulated fleet, and `wavegate start` as an
 * operator runs it. A worker that would refuse the content is found by `start` before anything starts:
 * exit 2 naming the profile, the reason and the worker, and not one command on any device.
 */
const scratch = scratchDir('worker-root');
let env: TestWorkflowEnvironment;
let fleet: Fleet;
let inventory = '';
const workers: Array<Awaited<ReturnType<typeof spawnCliUntil>>> = [];
const CHECKOUT_DEMO = join(PROJECT_ROOT, 'profiles', 'demo');
const specPath = join(scratch.dir, 'spec.yaml');

/** A profiles root outside the checkout holding a copy of profiles/demo, changed by `edit`. */
function rootWith(name: string, edit: (demoDir: string) => void = () => {}): string {
  const root = join(scratch.dir, name);
  cpSync(CHECKOUT_DEMO, join(root, 'demo'), { recursive: true });
  edit(join(root, 'demo'));
  return root;
}

/** `wavegate worker --profiles <root>` on a task queue of its own; resolves with its identity once polling. */
async function workerFor(root: string, taskQueue: string): Promise<string> {
  const w = await spawnCliUntil(
    [
      'worker',
      '--address',
      env.address,
      '--namespace',
      env.namespace ?? 'default',
      '--task-queue',
      taskQueue,
      '--profiles',
      root,
      '--audit-dir',
      join(scratch.dir, 'audit'),
    ],
    /worker \S+ polling/,
  );
  workers.push(w);
  expect(w.output()).toContain(`profiles root: ${root} (--profiles)`);
  return /worker (\S+) polling/.exec(w.output())![1]!;
}

/** `start` with the CLI's own profiles root being the checkout's copy (the operator has the content). */
function start(taskQueue: string, extra: string[] = []) {
  return runCli(
    [
      'start',
      '-f',
      specPath,
      '--inventory',
      inventory,
      '--profiles',
      join(PROJECT_ROOT, 'profiles'),
      '--address',
      env.address,
      '--task-queue',
      taskQueue,
      ...extra,
    ],
    {
      env: {
        TEMPORAL_ADDRESS: '',
        TEMPORAL_PROFILE: '',
        TEMPORAL_CONFIG_FILE: join(scratch.dir, 'none.toml'),
        WAVEGATE_PROFILES: '',
      },
    },
  );
}

function commandsOnDevices(): Record<string, number> {
  return Object.fromEntries(fleet.devices.map((d) => [d.id, fleet.commands(d.id).length]));
}

async function rolloutExists(): Promise<boolean> {
  try {
    // Every start takes the profile's lock first: none taken, no rollout started.
    await env.client.workflow.getHandle('profile-lock:demo').describe();
    return true;
  } catch (err) {
    if (err instanceof WorkflowNotFoundError) return false;
    throw err;
  }
}

beforeAll(async () => {
  env = await startDevServerEnv();
  ({ fleet, inventoryPath: inventory } = await fleetWithInventory(scratch.dir, demoDevices(4), {
    'pool-a': 0.5,
    'pool-b': 0.5,
  }));
  writeDemoSpecAt(specPath, {
    phases: [{ bulk: 'remainder' }],
    gate: '1s',
  });
});

afterAll(async () => {
  await Promise.all(workers.map((w) => stopChild(w.child)));
  await fleet?.stop();
  await env?.teardown();
  scratch.cleanup();
});

describe('a worker reads pins and payloads from its --profiles root, and start asks it first', () => {
  it("a worker whose root lacks the profile's trust.yaml: start exits 2 naming the profile, NO_TRUST and the worker; nothing started, no device contacted", async () => {
    const root = rootWith('no-trust', (demo) => rmSync(join(demo, 'trust.yaml')));
    const identity = await workerFor(root, 'q-no-trust');
    const run = await start('q-no-trust');
    expect(run.code, run.stderr).toBe(2);
    expect(run.stderr).toContain('profile "demo"');
    expect(run.stderr).toContain('NO_TRUST');
    expect(run.stderr).toContain(`worker ${identity}`);
    expect(run.stderr).toContain(join(root, 'demo', 'trust.yaml'));
    expect(run.stdout).not.toContain('started');
    expect(await rolloutExists()).toBe(false);
    expect(commandsOnDevices()).toEqual(Object.fromEntries(fleet.devices.map((d) => [d.id, 0])));
  });

  it('a worker whose root pins other keys: start exits 2 with UNPINNED_KEY naming the worker; no device contacted', async () => {
    const other = keyPairFromSeed(randomBytes(32));
    const root = rootWith('other-pins', (demo) =>
      writeFileSync(join(demo, 'trust.yaml'), stringify({ threshold: 1, pins: [pinOf(other, 'someone-else')] })),
    );
    const identity = await workerFor(root, 'q-other-pins');
    const run = await start('q-other-pins');
    expect(run.code, run.stderr).toBe(2);
    expect(run.stderr).toContain('profile "demo"');
    expect(run.stderr).toContain('UNPINNED_KEY');
    expect(run.stderr).toContain(`worker ${identity}`);
    expect(await rolloutExists()).toBe(false);
    expect(commandsOnDevices()).toEqual(Object.fromEntries(fleet.devices.map((d) => [d.id, 0])));
  });

  it('a worker given a root outside the checkout with the profile: start --wait completes, pins and payload read from that root, every device at r2', async () => {
    const root = rootWith('good');
    await workerFor(root, 'q-good');
    const run = await start('q-good', ['--wait']);
    expect(run.code, `${run.stdout}\n${run.stderr}`).toBe(0);
    expect(run.stdout).toMatch(/rollout completed/);
    for (const d of fleet.devices) {
      expect(readFileSync(join(d.sandbox, '.wavegate/profiles/demo/revision'), 'utf8').trim(), d.id).toBe('2');
    }
  });
});
