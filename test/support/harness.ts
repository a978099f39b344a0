import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { stringify } from 'yaml';
import { Worker } from '@temporalio/worker';
import { createActivities } from '../../activities';
import { prepareRollout, rolloutInputFromFiles } from '../../intake/prepare';
import { parseRolloutSpec } from '../../core/spec';
import { startFleet, writeFleetInventory, type Fleet, type SimDeviceSpec } from '../../sim';
import { PROJECT_ROOT } from '../../intake/package-layout';
import type { RolloutInput } from '../../core/rollout/input';
import { workflowBundle } from './temporal';

/** A scratch directory under the OS temp dir, removed by the returned cleanup. */
export function scratchDir(prefix: string): { dir: string; cleanup: () => void } {
  const dir = mkdtempSync(join(tmpdir(), `wavegate-${prefix}-`));
  return { dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

/** A rollout spec file of the demo profile, r1 → r2 over pools a and b at half each, with `rollout`'s fields over those. */
export function writeDemoSpec(dir: string, name: string, rollout: Record<string, unknown>): string {
  return writeDemoSpecAt(join(dir, `${name}.yaml`), rollout);
}

/** The same at a path of the caller's choosing. */
export function writeDemoSpecAt(path: string, rollout: Record<string, unknown>): string {
  writeFileSync(
    path,
    stringify({
      rollout: {
        profile: 'demo',
        fromRevision: 1,
        toRevision: 2,
        disruptionBudget: { 'pool-a': 0.5, 'pool-b': 0.5 },
        ...rollout,
      },
    }),
  );
  return path;
}

/** A simulated fleet with its inventory file written next to it. */
export async function fleetWithInventory(dir: string, devices: SimDeviceSpec[], budgets?: Record<string, number>) {
  const fleet: Fleet = await startFleet({ devices, dir: join(dir, 'fleet') });
  const inventoryPath = writeFleetInventory(fleet, join(dir, 'inventory.yaml'), { budgets });
  return { fleet, inventoryPath };
}

/** The demo profile's rollout input for a spec under examples/ or a test file, against an inventory. */
export function demoRolloutInput(specPath: string, inventoryPath: string, rolloutId?: string): RolloutInput {
  const input = prepareRollout({
    specPath,
    inventoryPath,
    profilesRoot: join(PROJECT_ROOT, 'profiles'),
    startedBy: 'test',
  });
  return rolloutId ? { ...input, rolloutId } : input;
}

/**
 * A rollout spec body (the `rollout:` mapping, over demo r1 → r2) prepared against the demo profile
 * through intake, as an object: no spec file. `_dir` is unused (callers still pass their scratch dir).
 */
export function rolloutInputFor(
  _dir: string,
  rollout: Record<string, unknown>,
  inventoryPath: string,
  rolloutId: string,
): RolloutInput {
  const specSource = `${rolloutId} spec`;
  const spec = parseRolloutSpec(
    { rollout: { profile: 'demo', fromRevision: 1, toRevision: 2, ...rollout } },
    specSource,
  );
  return rolloutInputFromFiles({
    spec,
    specSource,
    inventoryPath,
    profilesRoot: join(PROJECT_ROOT, 'profiles'),
    startedBy: 'test',
    rolloutId,
  });
}

let queueCounter = 0;
/** A real worker with the real activities on a fresh task queue of `env`. */
export async function startTestWorker(
  env: TestWorkflowEnvironment,
  opts: { auditDir?: string; taskQueue?: string; profilesRoot?: string; inventoryRoots?: string[] } = {},
) {
  const taskQueue = opts.taskQueue ?? `test-${process.pid}-${++queueCounter}`;
  const worker = await Worker.create({
    connection: env.nativeConnection,
    namespace: env.namespace ?? 'default',
    taskQueue,
    workflowBundle: await workflowBundle(),
    activities: createActivities({
      auditDir: opts.auditDir ?? join(tmpdir(), 'wavegate-test-audit'),
      // Every test's fleet and inventory are in a scratch directory under the temp dir (scratchDir).
      inventoryRoots: opts.inventoryRoots ?? [tmpdir()],
      ...(opts.profilesRoot ? { profilesRoot: opts.profilesRoot } : {}),
    }),
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
