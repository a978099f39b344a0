import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { rolloutFingerprint, startOrJoinRollout } from '../../cli/client';
import { profileLockId } from '../../core/rollout-id';
import type { RolloutStatus } from '../../core/rollout/status';
import { WavegatePhase, WavegateProfile, WavegateRevision, WavegateState } from '../../contracts/search-attributes';
import { prepareRollout } from '../../intake/prepare';
import { demoDevices, type Fleet } from '../../sim';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { runCli, runCliAgainst, type CliRun } from '../support/cli';
import { recordHistory } from '../support/histories';
import { writeDemoSpec } from '../support/harness';
import { realRollouts } from '../support/real-rollouts';
import { markerOf } from '../support/rollout-helpers';
import { until } from '../support/until';

/**
 * One id per rollout (issue 23), from the real command against a real Temporal dev server, a real
 * worker and a simulated SSH fleet: two rollouts of one profile get two ids (`rollout:demo:<UTC
 * yyyymmdd-hhmmss>`), `revert <id>` of the earlier one works after a later one, the same key and spec
 * after later rollouts returns the original rollout (another spec is refused), a second start while one
 * runs is refused naming it (the lock `profile-lock:demo`, strongly consistent: also straight after the
 * start, before visibility lists it), and a rollout started the old way as `rollout:demo` is still
 * listed, read, blocks a start, and its refused revert says how to find an earlier run.
 */
const real = realRollouts('rollout-ids');
let fleet: Fleet;
let inventory = '';
const DEVICES = ['edge-01', 'edge-02', 'edge-03', 'edge-04'];
const FAST = {
  phases: [
    { canary: '1 device', gate: '0s' },
    { bulk: 'remainder', gate: '0s' },
  ],
};
const MANUAL = {
  phases: [
    { canary: '1 device', gate: 'manual' },
    { bulk: 'remainder', gate: '0s' },
  ],
};
const NEW_ID = /^rollout:demo:\d{8}-\d{6}(-\d+)?$/;

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

interface Started {
  rolloutId: string;
  runId: string;
  existing: boolean;
}

/** `start --json` (and `--wait`): the first line, parsed. */
async function start(file: string, extra: string[] = []): Promise<{ started: Started; run: CliRun }> {
  const run = await wg(['start', '-f', file, '--inventory', inventory, '--json', ...extra]);
  const first = run.stdout.split('\n')[0] ?? '';
  expect(first, run.stdout + run.stderr).toMatch(/^\{/);
  return { started: JSON.parse(first) as Started, run };
}

async function status(id: string, run?: string): Promise<RolloutStatus> {
  const out = await wg(['status', id, '--json', ...(run ? ['--run', run] : [])]);
  expect(out.code, out.stderr).not.toBe(2);
  return JSON.parse(out.stdout) as RolloutStatus;
}

beforeAll(async () => {
  ({ fleet, inventoryPath: inventory } = await real.fleet(demoDevices(4), { 'pool-a': 0.5, 'pool-b': 0.5 }));
});

describe('one id per rollout', () => {
  let first: Started;
  const keyed = () => spec('keyed', { ...FAST, revertWindow: '1h' });

  it('a start gets an id of its own, shown by start, status, list and the audit; its lock is free once it closed', async () => {
    // The plan shown before the start (seeded by rollout:demo) is the plan the rollout makes under its own id.
    const planned = await runCli(['plan', '-f', keyed(), '--inventory', inventory, '--json'], {
      env: { WAVEGATE_PROFILES: '' },
    });
    expect(planned.code, planned.stderr).toBe(0);
    const previewCanary = (JSON.parse(planned.stdout) as { phases: Array<{ devices: string[] }> }).phases[0]!.devices;
    const { started, run } = await start(keyed(), ['--key', 'change-4711', '--wait', '--interval', '300']);
    expect(run.code, run.stdout + run.stderr).toBe(0);
    const canaryOf = (await status(started.rolloutId)).devices.filter((d) => d.phase === 0).map((d) => d.id);
    expect(canaryOf).toEqual(previewCanary);
    const history = await real.env.client.workflow.getHandle(started.rolloutId, started.runId).fetchHistory();
    const startedWith = await real.env.client.options.loadedDataConverter.payloadConverter.fromPayload<{
      planSeed?: string;
    }>(history.events![0]!.workflowExecutionStartedEventAttributes!.input!.payloads![0]!);
    expect(startedWith.planSeed).toBe('rollout:demo');
    expect(started.rolloutId).toMatch(NEW_ID);
    expect(started.existing).toBe(false);
    expect(started.runId).toMatch(/^[0-9a-f-]{36}$/);
    first = started;
    for (const id of DEVICES) expect(markerOf(fleet, id)).toBe(2);

    const s = await status(first.rolloutId);
    expect(s).toMatchObject({ rolloutId: first.rolloutId, state: 'completed' });
    const human = await wg(['start', '-f', keyed(), '--inventory', inventory, '--key', 'change-4711']);
    expect(human.code, human.stderr).toBe(0);
    expect(human.stdout).toContain(
      `rollout ${first.rolloutId} already started with this key (same spec): returning it`,
    );
    expect(human.stdout).toContain(`/workflows/${encodeURIComponent(first.rolloutId)}`);

    const audit = await wg(['audit', first.rolloutId, '--audit-dir', real.auditDir, '--json']);
    expect(audit.code, audit.stderr).toBe(0);
    const records = JSON.parse(audit.stdout) as Array<{ rolloutId: string; event: string }>;
    expect(records[0]).toMatchObject({ event: 'rollout.started', rolloutId: first.rolloutId });

    // The lock ran as profile-lock:demo, started the rollout as its child, and closed with it.
    const lock = await real.env.client.workflow.getHandle(profileLockId('demo')).describe();
    expect(lock.type).toBe('profileLockWorkflow');
    expect(lock.status.name).toBe('COMPLETED');
    expect(await real.env.client.workflow.getHandle(profileLockId('demo')).result()).toMatchObject({
      rolloutId: first.rolloutId,
      runId: first.runId,
      closed: 'completed',
      state: 'completed',
    });
    await recordHistory(
      real.env.client.workflow.getHandle(profileLockId('demo'), lock.runId),
      'profile-lock-completed',
    );
  });

  it('a second rollout of the profile gets a second id; list shows both; the same key and spec then returns the first (another spec is refused)', async () => {
    const { started: second, run } = await start(
      spec('second', {
        phases: [
          { canary: '2 devices', gate: '0s' },
          { bulk: 'remainder', gate: '0s' },
        ],
      }),
      ['--wait', '--interval', '300'],
    );
    expect(run.code, run.stdout + run.stderr).toBe(0);
    expect(second.rolloutId).toMatch(NEW_ID);
    expect(second.rolloutId).not.toBe(first.rolloutId);

    const listed = await until('both rollouts to be listed', async () => {
      const out = await wg(['list', '--profile', 'demo', '--json']);
      const rows = JSON.parse(out.stdout) as Array<{ workflowId: string; type: string }>;
      const ids = rows.map((r) => r.workflowId);
      return ids.includes(first.rolloutId) && ids.includes(second.rolloutId) ? rows : undefined;
    });
    // The lock is no rollout: list does not show it.
    expect(listed.map((r) => r.workflowId)).not.toContain(profileLockId('demo'));

    const again = await start(keyed(), ['--key', 'change-4711']);
    expect(again.run.code, again.run.stderr).toBe(0);
    expect(again.started).toEqual({
      rolloutId: first.rolloutId,
      runId: first.runId,
      url: expect.any(String),
      existing: true,
    });

    const other = await wg([
      'start',
      '-f',
      spec('other', { ...FAST, revertWindow: '2h' }),
      '--inventory',
      inventory,
      '--key',
      'change-4711',
    ]);
    expect(other.code, other.stdout).toBe(2);
    expect(other.stderr).toContain(
      `CONFLICT: idempotency key "change-4711" was used for ${first.rolloutId} with a different spec; use a new key for a new rollout`,
    );
  });

  it('revert <id> of the earlier rollout works after a later one: its devices back at r1, a third id, naming the one it undoes', async () => {
    const revert = await wg(['revert', first.rolloutId, '--wait', '--interval', '300', '--json']);
    expect(revert.code, revert.stdout + revert.stderr).toBe(0);
    const started = JSON.parse(revert.stdout.split('\n')[0]!) as {
      rolloutId: string;
      reverts: { rolloutId: string; runId: string };
    };
    expect(started.rolloutId).toMatch(NEW_ID);
    expect(started.rolloutId).not.toBe(first.rolloutId);
    expect(started.reverts).toMatchObject({ rolloutId: first.rolloutId, runId: first.runId });
    for (const id of DEVICES) expect(markerOf(fleet, id), id).toBe(1);
    expect(await status(started.rolloutId)).toMatchObject({
      state: 'completed',
      fromRevision: 2,
      toRevision: 1,
      reverts: { rolloutId: first.rolloutId },
    });
  });

  it('a second start while one runs is refused naming the running rollout: by the CLI and by the lock alone (before visibility lists it)', async () => {
    const { started: held, run } = await start(spec('manual', MANUAL));
    expect(run.code, run.stderr).toBe(0);
    expect(held.rolloutId).toMatch(NEW_ID);
    const refused = await wg(['start', '-f', spec('fast', FAST), '--inventory', inventory]);
    expect(refused.code, refused.stdout).toBe(2);
    expect(refused.stderr).toMatch(/CONFLICT: .*rollout of profile "demo" is .*running \(/);
    expect(refused.stderr).toContain(held.rolloutId);

    // The lock without the CLI's visibility check: a start straight through it is refused with the holder's id.
    const input = prepareRollout({
      specPath: spec('direct', FAST),
      inventoryPath: inventory,
      profilesRoot: join(PROJECT_ROOT, 'profiles'),
      startedBy: 'test',
    });
    await expect(
      startOrJoinRollout(real.env.client, real.worker.taskQueue, input, { newId: true }),
    ).rejects.toMatchObject({
      code: 'CONFLICT',
      message: expect.stringContaining(`a rollout of profile "demo" is already running (${held.rolloutId})`),
    });
    // A rollout cancelled on its own (as from the Web UI) closes; its lock completes after it and is free again.
    await real.env.client.workflow.getHandle(held.rolloutId).cancel();
    const lockRun = await until(
      'the lock to close after its rollout',
      async () => {
        const d = await real.env.client.workflow.getHandle(profileLockId('demo')).describe();
        return d.status.name === 'RUNNING' ? undefined : d;
      },
      90_000,
    );
    expect(lockRun.status.name).toBe('COMPLETED');
    expect((await real.env.client.workflow.getHandle(held.rolloutId).describe()).status.name).toBe('CANCELLED');
    expect(await real.env.client.workflow.getHandle(profileLockId('demo'), lockRun.runId).result()).toMatchObject({
      rolloutId: held.rolloutId,
      closed: 'failed',
    });
    await recordHistory(
      real.env.client.workflow.getHandle(profileLockId('demo'), lockRun.runId),
      'profile-lock-rollout-cancelled',
    );
  });

  it('a rollout started the old way as rollout:demo is listed, read with status, blocks a start, and its refused revert says how to find an earlier run', async () => {
    await until(
      'the lock to be free',
      async () =>
        (await real.env.client.workflow.getHandle(profileLockId('demo')).describe()).status.name === 'RUNNING'
          ? undefined
          : true,
      60_000,
    );
    // As the start of 7b668b3 did: workflow id rollout:<profile>, the key and fingerprint in its memo.
    const input = {
      ...prepareRollout({
        specPath: spec('legacy', MANUAL),
        inventoryPath: inventory,
        profilesRoot: join(PROJECT_ROOT, 'profiles'),
        startedBy: 'test',
      }),
      rolloutId: 'rollout:demo',
    };
    const legacy = await real.env.client.workflow.start('rolloutWorkflow', {
      workflowId: 'rollout:demo',
      taskQueue: real.worker.taskQueue,
      args: [input],
      memo: { wavegateSpec: rolloutFingerprint(input), wavegateKey: 'old-key' },
      typedSearchAttributes: [
        { key: WavegateProfile, value: 'demo' },
        { key: WavegateState, value: 'running' },
        { key: WavegatePhase, value: 'snapshot' },
        { key: WavegateRevision, value: 2 },
      ],
    });
    await until(
      'the old-style rollout at its manual gate',
      async () => ((await status('rollout:demo')).phases[0]?.stage === 'awaiting-approval' ? true : undefined),
      90_000,
    );

    const refused = await wg(['start', '-f', spec('fast', FAST), '--inventory', inventory]);
    expect(refused.code, refused.stdout).toBe(2);
    expect(refused.stderr).toContain('rollout:demo');
    const direct = prepareRollout({
      specPath: spec('direct', FAST),
      inventoryPath: inventory,
      profilesRoot: join(PROJECT_ROOT, 'profiles'),
      startedBy: 'test',
    });
    await expect(
      startOrJoinRollout(real.env.client, real.worker.taskQueue, direct, { newId: true }),
    ).rejects.toMatchObject({ code: 'CONFLICT', message: expect.stringContaining('already running (rollout:demo)') });

    const listed = await until('rollout:demo to be listed', async () => {
      const out = await wg(['list', '--profile', 'demo']);
      return out.stdout.split('\n').some((line) => /^rollout:demo\s/.test(line)) ? out.stdout : undefined;
    });
    expect(listed).toMatch(/^rollout:demo\s+rollout\s+demo\s+(running|paused)/m);

    expect((await wg(['abort', 'rollout:demo', '--reason', 'test over'])).code).toBe(0);
    await legacy.result().catch(() => undefined);
    const s = await status('rollout:demo', legacy.firstExecutionRunId);
    expect(s).toMatchObject({ rolloutId: 'rollout:demo', state: expect.stringMatching(/aborted|rolled-back/) });

    const revert = await wg(['revert', 'rollout:demo']);
    expect(revert.code, revert.stdout).toBe(2);
    expect(revert.stderr).toContain(
      'rollout:demo is an id every rollout of "demo" re-used before each rollout had its own; this was its latest run.',
    );
    expect(revert.stderr).toContain('wavegate list --profile demo --json');
    expect(revert.stderr).toContain('wavegate revert rollout:demo --run <runId>');
  });
});
