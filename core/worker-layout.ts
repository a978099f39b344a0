import { WavegateError } from './errors';

/**
 * What one worker process polls for. Splitting them lets workflow tasks run in a process that never
 * waits behind dozens of SSH sessions, and lets activity workers be sized to the fleet's SSH
 * concurrency on their own (docs/operations.md "Worker layout and sizing").
 */
export type WorkerRole = 'all' | 'workflows' | 'activities';

export interface WorkerLayout {
  role: WorkerRole;
  /** Concurrent activity executions (SSH sessions, audit appends); 0 when the role runs no activities. */
  maxActivities: number;
  /** Concurrent workflow tasks; 0 when the role runs no workflows. */
  maxWorkflowTasks: number;
  /**
   * Workflow executions kept in memory between their tasks (the sticky cache); 0 when the role runs no workflows.
   * Past it the least recently used is evicted and replayed from its history at its next task: device twins, one
   * per agent device, must not each hold memory for the fleet's lifetime (docs/operations.md, "Worker layout and sizing").
   */
  maxCachedWorkflows: number;
}

export const DEFAULT_MAX_ACTIVITIES = 200;
export const DEFAULT_MAX_WORKFLOW_TASKS = 40;
export const DEFAULT_WORKFLOW_CACHE = 300;
export const WORKFLOW_CACHE_LIMIT = 100_000;
/** Bounds: past these a single process is the wrong answer; run another worker instead. */
export const MAX_ACTIVITIES_LIMIT = 2000;
export const MAX_WORKFLOW_TASKS_LIMIT = 500;

export interface WorkerLayoutFlags {
  workflowsOnly?: boolean;
  activitiesOnly?: boolean;
  maxActivities?: string;
  maxWorkflowTasks?: string;
  workflowCache?: string;
  /**
   * Retired (r10): it kept SSH connections open for the floor pass after a rollout completed, which no
   * rollout runs any more. Accepted, whatever its value, so existing unit files still start a worker.
   */
  parkConnections?: string;
}

/** What `wavegate worker` says on stderr when started with `--park-connections`. */
export const PARK_CONNECTIONS_RETIRED_NOTE =
  'note: --park-connections no longer does anything (the floor pass it kept connections for retired at r10) and will be removed in a later release; drop it from the command line';

/** The notes the layout flags call for on stderr: a retired flag that is still accepted, named. */
export function workerLayoutNotes(flags: WorkerLayoutFlags): string[] {
  return flags.parkConnections === undefined ? [] : [PARK_CONNECTIONS_RETIRED_NOTE];
}

function slots(flag: string, value: string | undefined, fallback: number, max: number): number {
  if (value === undefined) return fallback;
  if (!/^\d+$/.test(value) || Number(value) < 1 || Number(value) > max) {
    throw new WavegateError(
      'INVALID_INPUT',
      `${flag} ${JSON.stringify(value)}: must be a whole number from 1 to ${max}`,
    );
  }
  return Number(value);
}

/** The worker command's layout flags, validated (INVALID_INPUT naming the flag and the value). */
export function resolveWorkerLayout(flags: WorkerLayoutFlags): WorkerLayout {
  if (flags.workflowsOnly && flags.activitiesOnly) {
    throw new WavegateError(
      'INVALID_INPUT',
      '--workflows-only and --activities-only together: a worker polling neither would do nothing; run one process with each flag, or neither flag for both',
    );
  }
  const role: WorkerRole = flags.workflowsOnly ? 'workflows' : flags.activitiesOnly ? 'activities' : 'all';
  if (role === 'workflows' && flags.maxActivities !== undefined) {
    throw new WavegateError(
      'INVALID_INPUT',
      `--max-activities ${JSON.stringify(flags.maxActivities)} with --workflows-only: that worker runs no activities`,
    );
  }
  if (role === 'activities' && flags.workflowCache !== undefined) {
    throw new WavegateError(
      'INVALID_INPUT',
      `--workflow-cache ${JSON.stringify(flags.workflowCache)} with --activities-only: that worker runs no workflows`,
    );
  }
  if (role === 'activities' && flags.maxWorkflowTasks !== undefined) {
    throw new WavegateError(
      'INVALID_INPUT',
      `--max-workflow-tasks ${JSON.stringify(flags.maxWorkflowTasks)} with --activities-only: that worker runs no workflows`,
    );
  }
  const maxActivities = slots('--max-activities', flags.maxActivities, DEFAULT_MAX_ACTIVITIES, MAX_ACTIVITIES_LIMIT);
  const maxWorkflowTasks = slots(
    '--max-workflow-tasks',
    flags.maxWorkflowTasks,
    DEFAULT_MAX_WORKFLOW_TASKS,
    MAX_WORKFLOW_TASKS_LIMIT,
  );
  const maxCachedWorkflows = slots(
    '--workflow-cache',
    flags.workflowCache,
    DEFAULT_WORKFLOW_CACHE,
    WORKFLOW_CACHE_LIMIT,
  );
  // The SDK runs no more workflow tasks at once than it may cache (and never caches fewer than 2): say so, not shrink.
  if (role !== 'activities' && maxCachedWorkflows < Math.max(2, maxWorkflowTasks)) {
    throw new WavegateError(
      'INVALID_INPUT',
      `--workflow-cache ${JSON.stringify(String(maxCachedWorkflows))}: must be at least 2 and at least --max-workflow-tasks (${maxWorkflowTasks}), since a workflow task runs on a cached execution`,
    );
  }
  return {
    role,
    maxActivities: role === 'workflows' ? 0 : maxActivities,
    maxWorkflowTasks: role === 'activities' ? 0 : maxWorkflowTasks,
    maxCachedWorkflows: role === 'activities' ? 0 : maxCachedWorkflows,
  };
}

export function describeWorkerLayout(layout: WorkerLayout): string {
  if (layout.role === 'workflows') return `workflow tasks only (${layout.maxWorkflowTasks} slots, no activities)`;
  if (layout.role === 'activities') return `activities only (${layout.maxActivities} slots, no workflows)`;
  return `workflow tasks (${layout.maxWorkflowTasks} slots) and activities (${layout.maxActivities} slots)`;
}
