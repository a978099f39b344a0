import { join } from 'node:path';
// Type-only at the top: loading the SDK's worker takes most of a second, and every CLI command imports
// this file for its connection settings; the worker code is loaded when a worker is actually made.
import type { NativeConnection, Worker, WorkflowBundleWithSourceMap } from '@temporalio/worker';
import type { ActivityDeps } from '../activities';

function workerSdk(): typeof import('@temporalio/worker') {
  return require('@temporalio/worker');
}

// A path, not require.resolve: the bundler takes the .ts source and tests run without a build.
export const WORKFLOWS_PATH = join(__dirname, '..', 'workflows', 'index.ts');
export const DEFAULT_TASK_QUEUE = 'wavegate';

export interface ConnectionSettings {
  address: string;
  namespace: string;
  taskQueue: string;
}

/** Flags first, then the standard Temporal environment variables, then the local defaults. */
export function connectionSettings(flags: Partial<ConnectionSettings> = {}): ConnectionSettings {
  return {
    address: flags.address ?? process.env.TEMPORAL_ADDRESS ?? '127.0.0.1:7233',
    namespace: flags.namespace ?? process.env.TEMPORAL_NAMESPACE ?? 'default',
    taskQueue: flags.taskQueue ?? process.env.WAVEGATE_TASK_QUEUE ?? DEFAULT_TASK_QUEUE,
  };
}

/** Connect to Temporal for a worker (loads the SDK's worker code on first use). */
export function connectWorker(address: string): Promise<NativeConnection> {
  return workerSdk().NativeConnection.connect({ address });
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
}): Promise<Worker> {
  const { createActivities } = require('../activities') as typeof import('../activities');
  return workerSdk().Worker.create({
    connection: opts.connection,
    namespace: opts.namespace,
    taskQueue: opts.taskQueue,
    ...(opts.workflowBundle ? { workflowBundle: opts.workflowBundle } : { workflowsPath: WORKFLOWS_PATH }),
    activities: createActivities(opts.deps),
    // Devices are slow and many; a few hundred concurrent activities per worker stays well inside limits.
    maxConcurrentActivityTaskExecutions: 200,
  });
}
