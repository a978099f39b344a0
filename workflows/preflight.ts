import type { WorkerContentAnswer, WorkerContentInput } from '../activities';
import { checkWorkerContent } from './activity-proxies';

export type { WorkerContentAnswer, WorkerContentInput };

/**
 * `start`'s question to the task queue before it starts a rollout: would a worker here run this
 * content? One activity, no device contacted, nothing written; the answer names the worker.
 */
export async function preflightWorkflow(input: WorkerContentInput): Promise<WorkerContentAnswer> {
  return checkWorkerContent(input);
}
