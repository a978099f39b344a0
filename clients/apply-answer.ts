import { ActivityNotFoundError, type Client } from '@temporalio/client';
import type { TwinHolder } from '../core/twin';

/**
 * Complete a waiting apply activity by its id (the desired entry's holder: workflow, run, activity), with its
 * result or its failure. 'gone' when there is nothing to complete: the worker answered it first (its safety read),
 * another gateway did, or the attempt ended (timed out, cancelled, its workflow closed). Any attempt of the activity
 * is completed by the id: the answer is to the request, the same on every attempt.
 */
export async function completeApply(
  client: Client,
  holder: TwinHolder,
  outcome: { result: unknown } | { failure: Error },
): Promise<'completed' | 'gone'> {
  const id = { workflowId: holder.rollout, runId: holder.run, activityId: holder.activity };
  try {
    if ('result' in outcome) await client.activity.complete(id, outcome.result);
    else await client.activity.fail(id, outcome.failure);
    return 'completed';
  } catch (err) {
    if (err instanceof ActivityNotFoundError) return 'gone';
    throw err;
  }
}
