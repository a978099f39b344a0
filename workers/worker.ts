import { join } from 'node:path';
// Type-only at the top: loading the SDK's worker takes most of a second, and CLI commands import this
// file; the worker code is loaded when a worker is actually made.
import type { NativeConnection, Worker, WorkflowBundleWithSourceMap } from '@temporalio/worker';
import type { ActivityDeps } from '../activities';
import { DEFAULT_MAX_ACTIVITIES, DEFAULT_WORKFLOW_CACHE, type WorkerLayout } from '../core/worker-layout';
import { connectionOptions, type ConnectionSettings } from './connection';
import { workerDeploymentOptions, type WorkerVersioning } from './versioning';
import { prebuiltWorkflowBundle } from './workflow-bundle';

function workerSdk(): typeof import('@temporalio/worker') {
  return require('@temporalio/worker');
}

// A path, not require.resolve: from source the bundler takes the .ts entry (tests run without a build);
// compiled (the installed package) this file is dist/workers/worker.js and the entry dist/workflows/index.js.
export const WORKFLOWS_PATH = join(__dirname, '..', 'workflows', __filename.endsWith('.ts') ? 'index.ts' : 'index.js');

/**
 * Connect to Temporal for a worker (loads the SDK's worker code on first use), with the same settings
 * the CLI resolves: address, namespace, TLS and API key (workers/connection.ts).
 */
export function connectWorker(settings: ConnectionSettings): Promise<NativeConnection> {
  return workerSdk().NativeConnection.connect(connectionOptions(settings));
}

let runtimeInstalled = false;
/**
 * Keep the SDK's own logging to warnings: progress is ours to print. Must run before the first
 * NativeConnection is made, which creates the default runtime.
 */
export function installQuietRuntime(): void {
  if (runtimeInstalled) return;
  runtimeInstalled = true;
  try {
    const { Runtime, DefaultLogger } = workerSdk();
    Runtime.install({ logger: new DefaultLogger('WARN') });
  } catch {
    // Already installed by the host process (e.g. a test environment): keep theirs.
  }
}

export async function createWorker(opts: {
  connection: NativeConnection;
  namespace: string;
  taskQueue: string;
  deps?: ActivityDeps;
  workflowBundle?: WorkflowBundleWithSourceMap;
  /** Another workflows entry than workflows/index.ts (a test's next build); ignored with a bundle. */
  workflowsPath?: string;
  /** Poll as this Worker Deployment Version (workers/versioning.ts); unversioned without it. */
  versioning?: WorkerVersioning;
  /** Workflows, activities or both, and the slots of each (core/worker-layout.ts); both without it. */
  layout?: WorkerLayout;
}): Promise<Worker> {
  const { createActivities, defaultWorkerIdentity } = require('../activities') as typeof import('../activities');
  // One identity for Temporal and for the preflight's answer, so a refusal names the worker people see.
  const identity = opts.deps?.identity ?? defaultWorkerIdentity();
  const role = opts.layout?.role ?? 'all';
  // Run from the build, the workflow code it bundled (workers/workflow-bundle.ts): no webpack at start.
  const bundle =
    opts.workflowBundle ??
    (opts.workflowsPath === undefined && role !== 'activities' && WORKFLOWS_PATH.endsWith('.js')
      ? prebuiltWorkflowBundle(WORKFLOWS_PATH)
      : undefined);
  return workerSdk().Worker.create({
    connection: opts.connection,
    namespace: opts.namespace,
    taskQueue: opts.taskQueue,
    identity,
    // An activities-only worker gets no workflow code, so it never polls workflow tasks (nor bundles).
    ...(role === 'activities'
      ? {}
      : bundle
        ? { workflowBundle: bundle }
        : { workflowsPath: opts.workflowsPath ?? WORKFLOWS_PATH }),
    ...(opts.versioning ? { workerDeploymentOptions: workerDeploymentOptions(opts.versioning) } : {}),
    // A workflows-only worker registers no activities, so it never polls activity tasks.
    ...(role === 'workflows'
      ? {}
      : {
          activities: createActivities({ ...opts.deps, identity }),
        }),
    // Devices are slow and many; a few hundred concurrent activities per worker stays well inside limits.
    ...(role === 'workflows'
      ? {}
      : { maxConcurrentActivityTaskExecutions: opts.layout?.maxActivities ?? DEFAULT_MAX_ACTIVITIES }),
    ...(role === 'activities' || !opts.layout
      ? {}
      : { maxConcurrentWorkflowTaskExecutions: opts.layout.maxWorkflowTasks }),
    // Bounded whatever the fleet: an evicted twin or rollout is replayed from its (bounded) history at its next task.
    ...(role === 'activities' ? {} : { maxCachedWorkflows: opts.layout?.maxCachedWorkflows ?? DEFAULT_WORKFLOW_CACHE }),
  });
}
