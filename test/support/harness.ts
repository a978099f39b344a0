import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { stringify } from 'yaml';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { Worker } from '@temporalio/worker';
import { createActivities } from '../../activities';
import { prepareRollout } from '../../cli/prepare';
import { startFleet, writeFleetInventory, type Fleet, type SimDeviceSpec } from '../../sim';
import { PROJECT_ROOT } from '../../workers/toolchain';
import type { RolloutInput } from '../../core/rollout/input';
import { workflowBundle } from './temporal';

/** A scratch directory under the OS temp dir, removed by the returned cleanup. */
export function scratchDir(prefix: string): { dir: string; cleanup: () => void } {
  const dir = mkdtempSync(join(tmpdir(), `wavegate-${prefix}-`));
  return { dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

/** A simulated fleet with its inventory file written next to it. */
export async function fleetWithInventory(dir: string, devices: SimDeviceSpec[], budgets?: Record<string, number>) {
  const fleet: Fleet = await startFleet({ devices, dir: join(dir, 'fleet') });
  const inventoryPath = writeFleetInventory(fleet, join(dir, 'inventory.yaml'), { budgets });
  return { fleet, inventoryPath };
}

/** The demo profile's rollout input for a spec under examples/ or a test file, against an inventory. */
export function demoRolloutInput(specPath: string, inventoryPath: string, rolloutId?: string): RolloutInput {
  const input = prepareRollout({ specPath, inventoryPath, profilesDir: join(PROJECT_ROOT, 'profiles'), startedBy: 'test' });
  return rolloutId ? { ...input, rolloutId } : input;
}

/** Write a rollout spec document (the `rollout:` body) to a file and prepare it against the demo profile. */
export function rolloutInputFor(dir: string, rollout: Record<string, unknown>, inventoryPath: string, rolloutId: string): RolloutInput {
  const specPath = join(dir, `${rolloutId.replace(/[^A-Za-z0-9_-]/g, '_')}.yaml`);
  writeFileSync(specPath, stringify({ rollout: { profile: 'demo', fromRevision: 1, toRevision: 2, ...rollout } }));
  return demoRolloutInput(specPath, inventoryPath, rolloutId);
}

let queueCounter = 0;
/** A real worker with the real activities on a fresh task queue of `env`. */
export async function startTestWorker(env: TestWorkflowEnvironment, opts: { auditDir?: string; taskQueue?: string } = {}) {
  const taskQueue = opts.taskQueue ?? `test-${process.pid}-${++queueCounter}`;
  const worker = await Worker.create({
    connection: env.nativeConnection,
    namespace: env.namespace ?? 'default',
    taskQueue,
    workflowBundle: await workflowBundle(),
    activities: createActivities({ auditDir: opts.auditDir ?? join(tmpdir(), 'wavegate-test-audit') }),
    maxConcurrentActivityTaskExecutions: 200,
  });
  const running = worker.run();
  return {
    worker,
    taskQueue,
    async stop() {
      worker.shutdown();
      await running;
    },
  };
}

export const DEMO_SPEC = join(PROJECT_ROOT, 'examples', 'demo-rollout.yaml');
