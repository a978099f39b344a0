import * as wf from '@temporalio/workflow';
import type { Activities, WorkerContentAnswer, WorkerContentInput } from '../activities';

export type { WorkerContentAnswer, WorkerContentInput };

// One attempt: a worker that cannot answer (an older one without the activity) is the client's timeout
// to report, not something a retry would change.
const { checkWorkerContent } = wf.proxyActivities<Pick<Activities, 'checkWorkerContent'>>({
  startToCloseTimeout: '20 seconds',
  retry: { maximumAttempts: 1 },
});

/**
 * `start`'s question to the task queue before it starts a rollout: would a worker here run this
 * content? One activity, no device contacted, nothing written; the answer names the worker.
 */
export async function preflightWorkflow(input: WorkerContentInput): Promise<WorkerContentAnswer> {
  return checkWorkerContent(input);
}
