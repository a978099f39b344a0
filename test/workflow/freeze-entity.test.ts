import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { Worker } from '@temporalio/worker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addFreeze, freezeCoveringNow, liftFreeze, listFreezes } from '../../clients/freeze';
import type { HoldInput, HoldResult, ReleaseInput, ReleaseResult } from '../../contracts/freeze';
import { FREEZE_SWEEP_EVERY_MS, FREEZE_WINDOWS_MAX } from '../../core/freeze';
import { rejection } from '../support/refusal';
import { startTimeSkippingEnv, workflowBundle } from '../support/temporal';

/**
 * The freeze entity `wavegate-freeze` (workflows/freeze.ts) on the time-skipping server, its two activities
 * recorded by fakes (the real ones are in test/workflow/canary-exclusion.test.ts, against real rollouts): a
 * window scheduled hours ahead holds at its `from`, sweeps once more 10 s later, and lets go at its `until` with
 * the rollouts it paused; a window in force now answers with what it held, and a lift resumes them naming who
 * and why; an unknown id, an `until` in the past and one window too many are refused by the entity itself.
 */
let env: TestWorkflowEnvironment;
let worker: Worker;
let running: Promise<void>;
const taskQueue = `freeze-entity-${process.pid}`;
const calls: Array<
  { kind: 'hold'; input: HoldInput; at: number } | { kind: 'release'; input: ReleaseInput; at: number }
> = [];
/** What the next holds answer: the rollouts they paused. */
let pausing: string[][] = [];

beforeAll(async () => {
  env = await startTimeSkippingEnv();
  worker = await Worker.create({
    connection: env.nativeConnection,
    namespace: env.namespace ?? 'default',
    taskQueue,
    workflowBundle: await workflowBundle(),
    activities: {
      holdRolloutsForFreeze: async (input: HoldInput): Promise<HoldResult> => {
        calls.push({ kind: 'hold', input, at: (await env.currentTimeMs()) as number });
        return { paused: pausing.shift() ?? [], skipped: [] };
      },
      releaseRolloutsOfFreeze: async (input: ReleaseInput): Promise<ReleaseResult> => {
        calls.push({ kind: 'release', input, at: (await env.currentTimeMs()) as number });
        return { resumed: input.rollouts, left: [] };
      },
    },
  });
  running = worker.run();
}, 120_000);

let stopped = false;
afterAll(async () => {
  if (!stopped) worker?.shutdown();
  await running;
  await env?.teardown();
});

const H = 3_600_000;

describe('the freeze entity', () => {
  it('holds a scheduled window at its from, once more 10 s later, then every minute without pausing again, and lets go at its until', async () => {
    const t0 = (await env.currentTimeMs()) as number;
    pausing = [['rollout:web:1', 'rollout:web:2'], ['rollout:web:3']];
    const { window, paused } = await addFreeze(env.client, taskQueue, {
      reason: 'release week',
      scope: { profile: 'web' },
      from: new Date(t0 + H).toISOString(),
      until: new Date(t0 + 3 * H).toISOString(),
      by: 'alice',
    });
    expect(window).toMatchObject({ id: 'freeze-1', scope: { profile: 'web' }, by: 'alice', paused: [] });
    expect(paused).toEqual([]);
    expect(calls).toEqual([]);

    await env.sleep(H + 15_000);
    expect(calls.map((c) => c.kind)).toEqual(['hold', 'hold']);
    expect(calls[0]!.input).toEqual({ freezeId: 'freeze-1', reason: 'release week', scope: { profile: 'web' } });
    expect(calls[0]!.at).toBeGreaterThanOrEqual(t0 + H);
    expect(calls[1]!.at - calls[0]!.at).toBeGreaterThanOrEqual(10_000);
    expect((await listFreezes(env.client))[0]).toMatchObject({
      id: 'freeze-1',
      paused: ['rollout:web:1', 'rollout:web:2', 'rollout:web:3'],
    });

    // In force, it sweeps every minute (a rollout started without asking the freeze), never pausing again what
    // it paused: here the third sweep finds a rollout started meanwhile.
    pausing = [['rollout:web:4']];
    await env.sleep(2 * H);
    const holds = calls.filter((c) => c.kind === 'hold');
    expect(calls.at(-1)!.kind).toBe('release');
    expect(holds.length).toBeGreaterThanOrEqual(2 + (2 * H - 15_000) / FREEZE_SWEEP_EVERY_MS - 2);
    for (let i = 2; i < holds.length; i++) {
      expect(holds[i]!.at - holds[i - 1]!.at).toBeGreaterThanOrEqual(FREEZE_SWEEP_EVERY_MS);
    }
    expect(holds[2]!.input.skip).toEqual(['rollout:web:1', 'rollout:web:2', 'rollout:web:3']);
    expect(holds[3]!.input.skip).toEqual(['rollout:web:1', 'rollout:web:2', 'rollout:web:3', 'rollout:web:4']);
    const release = calls.at(-1)!;
    expect(release.input).toEqual({
      freezeId: 'freeze-1',
      rollouts: ['rollout:web:1', 'rollout:web:2', 'rollout:web:3', 'rollout:web:4'],
      reason: `freeze-1 ended (until ${new Date(t0 + 3 * H).toISOString()})`,
    });
    expect(release.at).toBeGreaterThanOrEqual(t0 + 3 * H);
    expect(await listFreezes(env.client)).toEqual([]);
  });

  it('a window in force now answers with what it held; a lift resumes it naming who and why', async () => {
    calls.length = 0;
    pausing = [['rollout:db:1']];
    const added = await addFreeze(env.client, taskQueue, { reason: 'incident 42', scope: 'all', by: 'alice' });
    expect(added.window.id).toBe('freeze-2');
    expect(added.paused).toEqual(['rollout:db:1']);
    const lifted = await liftFreeze(env.client, { id: 'freeze-2', by: 'bob', reason: 'incident over' });
    expect(lifted).toEqual({ lifted: ['freeze-2'], resumed: ['rollout:db:1'], left: [] });
    expect(calls.at(-1)).toMatchObject({
      kind: 'release',
      input: { freezeId: 'freeze-2', rollouts: ['rollout:db:1'], reason: 'freeze-2 lifted by bob: incident over' },
    });
    expect(await listFreezes(env.client)).toEqual([]);
  });

  it('refuses, itself, an unknown id, an until in the past and a window over the bound', async () => {
    const unknown = await rejection(liftFreeze(env.client, { id: 'freeze-9', by: 'bob' }));
    expect(unknown).toMatchObject({ code: 'NOT_FOUND', message: 'no freeze "freeze-9" is held (held: none)' });
    const past = await rejection(
      addFreeze(env.client, taskQueue, { reason: 'r', scope: 'all', by: 'a', until: new Date(0).toISOString() }),
    );
    expect(past.code).toBe('INVALID_INPUT');
    expect(past.message).toContain('is in the past');
    const later = new Date(((await env.currentTimeMs()) as number) + 24 * H).toISOString();
    for (let i = 0; i < FREEZE_WINDOWS_MAX; i++)
      await addFreeze(env.client, taskQueue, { reason: `r${i}`, scope: 'all', by: 'a', from: later });
    const over = await rejection(addFreeze(env.client, taskQueue, { reason: 'one more', scope: 'all', by: 'a' }));
    expect(over).toMatchObject({ code: 'INVALID_INPUT' });
    expect(over.message).toContain(`at most ${FREEZE_WINDOWS_MAX} freeze windows at once`);
    const all = await liftFreeze(env.client, { all: true, by: 'bob' });
    expect(all.lifted).toHaveLength(FREEZE_WINDOWS_MAX);
    expect(await listFreezes(env.client)).toEqual([]);
  });

  it("a start's check reads the freezes from the entity's memo: it answers with no worker polling", async () => {
    pausing = [[]];
    // By the real clock, as the check reads it (this server's clock is hours ahead, skipped by the tests above).
    const from = new Date(Date.now() - H).toISOString();
    const until = new Date(Date.now() + 24 * H).toISOString();
    const { window } = await addFreeze(env.client, taskQueue, {
      reason: 'db migration',
      scope: { profile: 'db' },
      from,
      until,
      by: 'a',
    });
    expect(await freezeCoveringNow(env.client, { profile: 'web', pools: [] })).toBeUndefined();
    // A query would wait as long as the worker is away; the check does not.
    worker.shutdown();
    stopped = true;
    await running;
    expect(await freezeCoveringNow(env.client, { profile: 'db', pools: [] })).toMatchObject({
      id: window.id,
      reason: 'db migration',
      until,
    });
  });
});
