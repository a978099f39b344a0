import { beforeAll, describe, expect, it } from 'vitest';
import { demoDevices, type Fleet } from '../../sim';
import { runCliAgainst, type CliRun } from '../support/cli';
import { writeDemoSpec } from '../support/harness';
import { realRollouts } from '../support/real-rollouts';
import { until as waitUntil } from '../support/until';

/**
 * The exit codes a pipeline reads (docs/cli.md "Exit codes": 0 done, 1 pending work, 2 refused) from the real `wavegate`
 * command against a real Temporal dev server, a real worker and a simulated SSH fleet whose devices the
 * test takes offline and back: `start --wait`, `--exit-on-pause`, `status`, `fleet status`, `converge`.
 */
const real = realRollouts('exit-codes');
let fleet: Fleet;
let inventory = '';
const OFFLINE = 'edge-05';
const APPLY_R2 = 'install -m 0644 "$WAVEGATE_STAGING/motd"';

function wg(args: string[], timeoutMs?: number): Promise<CliRun> {
  return runCliAgainst(
    { address: real.env.address, taskQueue: real.worker.taskQueue, scratch: real.dir },
    args,
    timeoutMs,
  );
}

function spec(name: string, rollout: Record<string, unknown>): string {
  return writeDemoSpec(real.dir, name, rollout);
}

const FAST = {
  phases: [
    { canary: '1 device', gate: '0s' },
    { bulk: 'remainder', gate: '0s' },
  ],
};

/** This file's waits run against a loaded stack: longer than the shared default. */
const until = <T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 90_000) =>
  waitUntil(what, probe, timeoutMs);

const applyCounts = () => Object.fromEntries(fleet.devices.map((d) => [d.id, fleet.count(d.id, APPLY_R2)]));

beforeAll(async () => {
  ({ fleet, inventoryPath: inventory } = await real.fleet(demoDevices(12), { 'pool-a': 0.5, 'pool-b': 0.5 }));
});

describe('exit codes and converge, as a pipeline sees them', () => {
  it('refused input exits 2 with nothing started: bad spec for start --wait, unknown rollout for status and converge without a completed rollout', async () => {
    const unknownPool = await wg([
      'start',
      '-f',
      spec('bad-pool', { ...FAST, disruptionBudget: { 'pool-z': 0.5 } }),
      '--inventory',
      inventory,
      '--wait',
    ]);
    expect(unknownPool.code, unknownPool.stderr).toBe(2);
    expect(unknownPool.stderr).toContain('pool-z');
    const unknown = await wg(['status', 'rollout:nope']);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain('NOT_FOUND');
    const noneCompleted = await wg([
      'converge',
      '--profile',
      'demo',
      '-f',
      spec('fast', FAST),
      '--inventory',
      inventory,
    ]);
    expect(noneCompleted.code, noneCompleted.stdout).toBe(2);
    expect(noneCompleted.stderr).toContain('has no completed rollout');
    expect(fleet.totalCommands()).toBe(0);
  });

  it('start --wait --exit-on-pause exits 1 when the rollout pauses, printing why and the exact resume/abort commands; status exits 1 while paused', async () => {
    const waiting = wg([
      'start',
      '-f',
      spec('manual', {
        phases: [
          { canary: '1 device', gate: 'manual' },
          { bulk: 'remainder', gate: '0s' },
        ],
      }),
      '--inventory',
      inventory,
      '--wait',
      '--exit-on-pause',
      '--interval',
      '300',
    ]);
    // Its id (the start prints it only when --wait returns): the running rollout of demo, as list shows it.
    const id = await until('the rollout to be listed', async () => {
      const rows = JSON.parse(
        (await wg(['list', '--profile', 'demo', '--state', 'running', '--json'])).stdout,
      ) as Array<{ workflowId: string }>;
      return rows[0]?.workflowId;
    });
    expect(id).toMatch(/^rollout:demo:\d{8}-\d{6}$/);
    await until('the canary at its manual gate', async () => {
      const run = await wg(['status', id, '--json']);
      if (run.code === 2) return undefined; // not started yet
      expect(run.code, 'status of a running rollout').toBe(1);
      return (JSON.parse(run.stdout) as { phases: Array<{ stage: string }> }).phases[0]?.stage === 'awaiting-approval'
        ? true
        : undefined;
    });
    const paused = await wg(['pause', id, '--reason', 'change freeze']);
    expect(paused.code, paused.stderr).toBe(0);
    const wait = await waiting;
    expect(wait.code, wait.stdout + wait.stderr).toBe(1);
    expect(wait.stdout).toMatch(/paused: .*change freeze.* wavegate resume \S+; to stop: wavegate abort \S+/);
    expect(wait.stdout).toContain(`wavegate resume ${id}; to stop: wavegate abort ${id}`);
    expect(wait.stdout).toMatch(/rollout paused: .* — exit 1/);
    const status = await wg(['status', id]);
    expect(status.code).toBe(1);
    expect(status.stdout).toContain(`wavegate resume ${id}`);

    const aborted = await wg(['abort', id, '--reason', 'test over']);
    expect(aborted.code, aborted.stderr).toBe(0);
    await until('the abort to finish', async () => {
      const run = await wg(['status', id, '--json']);
      const state = (JSON.parse(run.stdout) as { state: string }).state;
      if (state === 'running' || state === 'paused') return undefined;
      expect(run.code, `status of an ${state} rollout`).toBe(1);
      return true;
    });
  });

  it('a rollout that completes with an offline device skipped exits 1 (start --wait and status); back online, converge applies r2 to exactly that device and exits 0', async () => {
    await fleet.setFaults(OFFLINE, { offline: true });
    const fast = spec('fast', FAST);
    const run = await wg(['start', '-f', fast, '--inventory', inventory, '--wait', '--interval', '300']);
    expect(run.code, run.stdout + run.stderr).toBe(1);
    expect(run.stdout).toContain('completed with pending work: 1 skipped');
    expect(run.stdout).toMatch(/rollout completed: .* — exit 1/);
    const id = /^rollout (rollout:demo:\S+) started$/m.exec(run.stdout)?.[1] ?? 'no id printed';
    const status = await wg(['status', id, '--json']);
    expect(status.code).toBe(1);
    const devices = (JSON.parse(status.stdout) as { devices: Array<{ id: string; state: string }> }).devices;
    expect(devices.filter((d) => d.state !== 'applied')).toEqual([
      expect.objectContaining({ id: OFFLINE, state: 'skipped' }),
    ]);

    await fleet.setFaults(OFFLINE, {});
    const board = await wg(['fleet', 'status', '--profile', 'demo', '--inventory', inventory]);
    expect(board.code, board.stdout).toBe(1);
    expect(board.stdout).toContain(`1 device(s) behind r2, where ${id} completed (${OFFLINE})`);
    expect(board.stdout).toContain(
      `wavegate converge --profile demo --file <the spec of ${id}: r1 → r2> --inventory ${inventory}`,
    );

    const before = applyCounts();
    // A 10-minute poll interval: --wait still returns when the rollout closes (it waits on the result), not an interval later.
    const converge = await wg([
      'converge',
      '--profile',
      'demo',
      '-f',
      fast,
      '--inventory',
      inventory,
      '--wait',
      '--interval',
      '600000',
    ]);
    expect(converge.code, converge.stdout + converge.stderr).toBe(0);
    expect(converge.stdout).toContain(
      `converge rollout:demo:converge-1 started: 1 device(s) behind r2 (last completed: ${id})`,
    );
    expect(converge.stdout).toMatch(new RegExp(`behind +${OFFLINE} +verify exited \\d`));
    expect(converge.stdout).toMatch(/rollout completed: .* — exit 0/);
    const after = applyCounts();
    expect(after[OFFLINE]).toBe(before[OFFLINE]! + 1);
    expect({ ...after, [OFFLINE]: 0 }).toEqual({ ...before, [OFFLINE]: 0 });

    const clean = await wg(['status', 'rollout:demo:converge-1', '--json']);
    expect(clean.code).toBe(0);
    expect((JSON.parse(clean.stdout) as { devices: Array<{ id: string; state: string }> }).devices).toEqual([
      expect.objectContaining({ id: OFFLINE, state: 'applied' }),
    ]);
    const green = await wg(['fleet', 'status', '--profile', 'demo', '--inventory', inventory]);
    expect(green.code, green.stdout).toBe(0);
    const again = await wg(['converge', '--profile', 'demo', '-f', fast, '--inventory', inventory]);
    expect(again.code, again.stdout + again.stderr).toBe(0);
    expect(again.stdout).toContain('nothing to converge');
    expect(applyCounts()).toEqual(after);
  });
});
