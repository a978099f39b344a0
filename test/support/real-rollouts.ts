import { join } from 'node:path';
import { runCliAgainst, type CliRun } from './cli';
import type { WorkflowHandle } from '@temporalio/client';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { afterAll, afterEach, beforeAll, beforeEach } from 'vitest';
import type { RolloutInput } from '../../core/rollout/input';
import type { Fleet, SimDeviceSpec } from '../../sim';
import { DEV_EVENTS_CACHE_BYTES, startDevServerEnv } from '../../workers/dev-server';
import { rolloutWorkflow } from '../../workflows/rollout';
import { fleetWithInventory, rolloutInputFor, scratchDir, startTestWorker } from './harness';

type TestWorker = Awaited<ReturnType<typeof startTestWorker>>;

export interface RealRolloutsOptions {
  /** The shared worker's profiles root (its pins and payload files), read once `prepare` has run; default the checkout's profiles/. */
  profilesRoot?: () => string;
  /** The server (default a dev server; `startTimeSkippingEnv` from ./temporal for skipped time). */
  startEnv?: () => Promise<TestWorkflowEnvironment>;
  /** false: no shared worker; the file starts its own (a worker killed mid-test, per-test task queues). */
  worker?: boolean;
  /** Runs in beforeAll before the server starts: what the worker must find at start (a profiles root, fixtures). */
  prepare?: () => void | Promise<void>;
  /** Runs in afterAll before the worker, fleets and server stop (agents, children of the test's own). */
  cleanup?: () => void | Promise<void>;
}

/** A simulated fleet of the test's own, with its inventory file, in a scratch directory of its own. */
export interface TestFleet {
  dir: string;
  fleet: Fleet;
  inventoryPath: string;
}

export interface RealRollouts {
  /** The Temporal server (set once beforeAll has run). */
  readonly env: TestWorkflowEnvironment;
  /** The shared worker with the real activities (absent with `worker: false`). */
  readonly worker: TestWorker;
  /** The file's scratch directory, removed after all its tests. */
  readonly dir: string;
  /** Where the shared worker writes audit trails. */
  readonly auditDir: string;
  /** A fleet in a fresh directory: stopped after the test that made it (after all tests, when made outside one). */
  fleet(devices: SimDeviceSpec[], budgets?: Record<string, number>): Promise<TestFleet>;
  /** A fleet, and the demo r1 → r2 rollout input with `rollout`'s fields over it (rollout id `rollout:<name>-<n>`). */
  rollout(
    rollout: Record<string, unknown>,
    devices: SimDeviceSpec[],
    budgets?: Record<string, number>,
  ): Promise<TestFleet & { input: RolloutInput }>;
  /** Starts the rollout workflow for `input` on the shared worker, its workflow id the rollout id. */
  start(input: RolloutInput): Promise<WorkflowHandle<typeof rolloutWorkflow>>;
  /** The CLI's flags for this server and the shared worker's task queue (`--address`, `--namespace`, `--task-queue`). */
  cliFlags(): string[];
  /** Runs the `wavegate` CLI against this server and the shared worker, blind to the user's Temporal settings. */
  cli(args: string[], timeoutMs?: number): Promise<CliRun>;
}

/**
 * The set-up every real-SSH workflow test shares: a Temporal dev server, a real worker with the real
 * activities on a task queue of its own, simulated fleets over real SSH, a scratch directory, and their
 * teardown in order (worker, fleets, server, files). Call it at the top of a file or a describe block:
 * it registers that scope's hooks.
 */
export function realRollouts(name: string, opts: RealRolloutsOptions = {}): RealRollouts {
  const scratch = scratchDir(name);
  const auditDir = join(scratch.dir, 'audit');
  let env: TestWorkflowEnvironment | undefined;
  let worker: TestWorker | undefined;
  const perTest: Fleet[] = [];
  const perFile: Fleet[] = [];
  let inTest = false;
  let n = 0;

  beforeAll(async () => {
    await opts.prepare?.();
    // The server `wavegate dev` runs (its events cache sized: docs/operations.md, "The server's events cache").
    env = await (opts.startEnv ?? (() => startDevServerEnv({ eventsCacheBytes: DEV_EVENTS_CACHE_BYTES })))();
    if (opts.worker !== false) {
      worker = await startTestWorker(env, {
        auditDir,
        ...(opts.profilesRoot ? { profilesRoot: opts.profilesRoot() } : {}),
      });
    }
  }, 240_000);
  beforeEach(() => {
    inTest = true;
  });
  afterEach(async () => {
    inTest = false;
    await Promise.all(perTest.splice(0).map((f) => f.stop()));
  });
  afterAll(async () => {
    await opts.cleanup?.();
    await worker?.stop();
    await Promise.all([...perTest.splice(0), ...perFile.splice(0)].map((f) => f.stop()));
    await env?.teardown();
    scratch.cleanup();
  });

  const fixture: RealRollouts = {
    get env() {
      if (!env) throw new Error(`${name}: the dev server is not started yet (use it inside a hook or test)`);
      return env;
    },
    get worker() {
      if (!worker)
        throw new Error(`${name}: no shared worker (${opts.worker === false ? 'worker: false' : 'not started yet'})`);
      return worker;
    },
    dir: scratch.dir,
    auditDir,
    async fleet(devices, budgets) {
      const dir = join(scratch.dir, `t${++n}`);
      const made = await fleetWithInventory(dir, devices, budgets);
      (inTest ? perTest : perFile).push(made.fleet);
      return { dir, ...made };
    },
    async rollout(rollout, devices, budgets) {
      const made = await fixture.fleet(devices, budgets);
      return { ...made, input: rolloutInputFor(made.dir, rollout, made.inventoryPath, `rollout:${name}-${n}`) };
    },
    cliFlags() {
      const { address, namespace } = fixture.env;
      return ['--address', address, '--namespace', namespace ?? 'default', '--task-queue', fixture.worker.taskQueue];
    },
    cli(args, timeoutMs) {
      const target = { address: fixture.env.address, taskQueue: fixture.worker.taskQueue, scratch: scratch.dir };
      return runCliAgainst(target, args, timeoutMs);
    },
    start(input) {
      return fixture.env.client.workflow.start(rolloutWorkflow, {
        workflowId: input.rolloutId,
        taskQueue: fixture.worker.taskQueue,
        args: [input],
      });
    },
  };
  return fixture;
}
