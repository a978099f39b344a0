import type { WorkflowHandle } from '@temporalio/client';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { Worker } from '@temporalio/worker';
import { afterAll, beforeAll } from 'vitest';
import type { RolloutInput } from '../../core/rollout/input';
import { DEV_EVENTS_CACHE_BYTES, startDevServerEnv } from '../../workers/dev-server';
import { rolloutWorkflow } from '../../workflows/rollout';
import { createMockActivities, mockInput, type Scenario } from './mock-activities';
import { workflowBundle } from './temporal';

/**
 * For a describe block of decision tests: a server of its own (a dev server unless `startEnv` says
 * otherwise) and one worker running the real workflow bundle with mocked activities (./mock-activities.ts),
 * started before the block's tests and stopped after them. `start` runs one rollout with its scenario:
 * ids `rollout:<prefix>-<n>`, the spec's fields over `defaults`.
 */
export function mockedRolloutWorker(
  prefix: string,
  opts: { startEnv?: () => Promise<TestWorkflowEnvironment>; defaults?: Record<string, unknown> } = {},
) {
  const mocks = createMockActivities();
  const taskQueue = `${prefix}-${process.pid}`;
  let env: TestWorkflowEnvironment | undefined;
  let worker: Worker | undefined;
  let running: Promise<void> | undefined;
  let n = 0;
  beforeAll(async () => {
    // The server `wavegate dev` runs (its events cache sized: docs/operations.md, "The server's events cache").
    env = await (opts.startEnv ?? (() => startDevServerEnv({ eventsCacheBytes: DEV_EVENTS_CACHE_BYTES })))();
    worker = await Worker.create({
      connection: env.nativeConnection,
      namespace: env.namespace ?? 'default',
      taskQueue,
      workflowBundle: await workflowBundle(),
      activities: mocks.activities,
    });
    running = worker.run();
  });
  afterAll(async () => {
    worker?.shutdown();
    await running;
    await env?.teardown();
  });
  return {
    mocks,
    taskQueue,
    get env(): TestWorkflowEnvironment {
      if (!env) throw new Error('the mocked worker is not started (use it inside a test)');
      return env;
    },
    async start(
      rollout: Record<string, unknown>,
      scenario: Omit<Scenario, 'log' | 'audit' | 'healthCalls'>,
      extra: Partial<RolloutInput> = {},
    ) {
      const input = mockInput(`rollout:${prefix}-${++n}`, { ...opts.defaults, ...rollout }, extra);
      const s = mocks.add(input.rolloutId, scenario);
      const h: WorkflowHandle<typeof rolloutWorkflow> = await this.env.client.workflow.start(rolloutWorkflow, {
        workflowId: input.rolloutId,
        taskQueue,
        args: [input],
      });
      return { input, s, h };
    },
  };
}
