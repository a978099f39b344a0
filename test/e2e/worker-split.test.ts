import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { demoDevices, type Fleet } from '../../sim';
import { startDevServerEnv } from '../../workers/dev-server';
import { PARK_CONNECTIONS_RETIRED_NOTE } from '../../core/worker-layout';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { runCli, spawnCliUntil, stopChild } from '../support/cli';
import { fleetWithInventory, scratchDir, writeDemoSpecAt } from '../support/harness';

/**
 * Issue 12 item 5: `wavegate worker --workflows-only` and `--activities-only` as two real processes on one
 * task queue of a real dev server run a simulated rollout to the end, and the history shows who did what:
 * every workflow task completed by the first, every activity started by the second.
 */
const scratch = scratchDir('worker-split');
let env: TestWorkflowEnvironment;
let fleet: Fleet;
let inventory = '';
const workers: Array<Awaited<ReturnType<typeof spawnCliUntil>>> = [];
const specPath = join(scratch.dir, 'spec.yaml');
const cliEnv = () => ({
  TEMPORAL_ADDRESS: '',
  TEMPORAL_PROFILE: '',
  TEMPORAL_CONFIG_FILE: join(scratch.dir, 'none.toml'),
  WAVEGATE_PROFILES: '',
});

async function worker(flags: string[]): Promise<{ identity: string; output: () => string }> {
  const w = await spawnCliUntil(
    [
      'worker',
      '--address',
      env.address,
      '--namespace',
      env.namespace ?? 'default',
      '--task-queue',
      'q-split',
      '--profiles',
      join(PROJECT_ROOT, 'profiles'),
      '--audit-dir',
      join(scratch.dir, 'audit'),
      ...flags,
    ],
    /worker \S+ polling/,
    120_000,
    cliEnv(),
  );
  workers.push(w);
  return { identity: /worker (\S+) polling/.exec(w.output())![1]!, output: w.output };
}

beforeAll(async () => {
  env = await startDevServerEnv();
  ({ fleet, inventoryPath: inventory } = await fleetWithInventory(scratch.dir, demoDevices(4), {
    'pool-a': 0.5,
    'pool-b': 0.5,
  }));
  writeDemoSpecAt(specPath, {
    phases: [{ canary: 1 }, { bulk: 'remainder' }],
    gate: '0s',
  });
}, 180_000);

afterAll(async () => {
  await Promise.all(workers.map((w) => stopChild(w.child)));
  await fleet?.stop();
  await env?.teardown();
  scratch.cleanup();
});

describe('wavegate worker --workflows-only / --activities-only', () => {
  it('the two flags together: exit 2 naming both, nothing polls', async () => {
    const run = await runCli(['worker', '--workflows-only', '--activities-only', '--address', '127.0.0.1:1'], {
      env: cliEnv(),
    });
    expect(run.code).toBe(2);
    expect(run.stderr).toContain('--workflows-only');
    expect(run.stderr).toContain('--activities-only');
    expect(run.stdout).not.toContain('polling');
  });

  it('the retired --park-connections is not in the help (it is still accepted: the rollout below)', async () => {
    const help = await runCli(['worker', '--help'], { env: cliEnv() });
    expect(help.code).toBe(0);
    expect(help.stdout).toContain('--max-activities');
    expect(help.stdout).not.toContain('--park-connections');
  });

  it.each([
    [['--max-activities', '0'], '--max-activities "0"'],
    [['--max-activities', '99999'], '--max-activities "99999"'],
    [['--max-workflow-tasks', 'many'], '--max-workflow-tasks "many"'],
    [['--workflows-only', '--max-activities', '10'], '--max-activities "10" with --workflows-only'],
  ])('bad sizing %j: exit 2 naming the flag and the value', async (flags, named) => {
    const run = await runCli(['worker', ...flags, '--address', '127.0.0.1:1'], { env: cliEnv() });
    expect(run.code, run.stderr).toBe(2);
    expect(run.stderr).toContain(named);
  });

  it('one worker of each on one task queue completes a rollout: workflow tasks on the first, activities on the second', async () => {
    const workflows = await worker(['--workflows-only', '--max-workflow-tasks', '10']);
    // With the retired --park-connections, as an existing unit file may still pass it: it starts, and says so once.
    const activities = await worker(['--activities-only', '--max-activities', '20', '--park-connections', '30s']);
    expect(workflows.output()).toContain('runs: workflow tasks only (10 slots, no activities)');
    expect(activities.output()).toContain('runs: activities only (20 slots, no workflows)\n');
    expect(activities.output().split(PARK_CONNECTIONS_RETIRED_NOTE)).toHaveLength(2);
    expect(workflows.output()).not.toContain('--park-connections');
    expect(workflows.identity).not.toBe(activities.identity);

    const run = await runCli(
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
        'q-split',
        '--wait',
      ],
      { env: cliEnv(), timeoutMs: 300_000 },
    );
    expect(
      run.code,
      `${run.stdout}\n${run.stderr}\nworkflows worker:\n${workflows.output()}\nactivities worker:\n${activities.output()}`,
    ).toBe(0);
    expect(run.stdout).toMatch(/rollout completed/);
    for (const d of fleet.devices) {
      expect(readFileSync(join(d.sandbox, '.wavegate/profiles/demo/revision'), 'utf8').trim(), d.id).toBe('2');
    }

    const rolloutId = /^rollout (rollout:demo:\S+) started$/m.exec(run.stdout)?.[1] ?? 'no id printed';
    const history = await env.client.workflow.getHandle(rolloutId).fetchHistory();
    const events = history.events ?? [];
    const workflowTaskWorkers = new Set(
      events
        .filter((e) => e.workflowTaskCompletedEventAttributes)
        .map((e) => e.workflowTaskCompletedEventAttributes!.identity),
    );
    const activityWorkers = new Set(
      events
        .filter((e) => e.activityTaskStartedEventAttributes)
        .map((e) => e.activityTaskStartedEventAttributes!.identity),
    );
    expect([...workflowTaskWorkers]).toEqual([workflows.identity]);
    expect([...activityWorkers]).toEqual([activities.identity]);
  }, 400_000);
});
