import { randomUUID } from 'node:crypto';
import { WorkflowFailedError, type Client } from '@temporalio/client';
import { WavegateError } from '../core/errors';
import type { RolloutInput } from '../core/rollout/input';
import type { preflightWorkflow, WorkerContentAnswer, WorkerContentInput } from '../workflows/preflight';

/** How long `start` waits for a worker on the task queue to answer before it gives up (nothing started). */
export const PREFLIGHT_TIMEOUT_MS = 30_000;

/** The question for the worker: the rollout's target envelope and its way back, exactly as the workflow will hand them over. */
export function workerContentInput(input: RolloutInput): WorkerContentInput {
  const { steps, rollbackSteps } = input;
  return {
    profile: steps.profile,
    revision: steps.revision,
    ...(steps.envelope ? { envelope: steps.envelope } : {}),
    rollback: {
      revision: rollbackSteps.revision,
      ...(rollbackSteps.envelope ? { envelope: rollbackSteps.envelope } : {}),
      ...(rollbackSteps.rollbackOf ? { rollbackOf: rollbackSteps.rollbackOf } : {}),
    },
    ...(steps.after?.length ? { after: steps.after } : {}),
  };
}

/**
 * Ask a worker on `taskQueue` whether it would run this rollout's content (preflightWorkflow), before
 * anything is started: a worker without the profile's pins (or with other pins, or without the payload
 * files) is found here, not by a failure gate after devices were contacted. Resolves with the worker's
 * identity; throws INVALID_STATE (exit 2) on a refusal naming the profile, the reason and the worker,
 * UNAVAILABLE (exit 1) when no worker answers within `timeoutMs`.
 */
export async function preflightRollout(
  client: Client,
  taskQueue: string,
  input: RolloutInput,
  opts: { timeoutMs?: number } = {},
): Promise<string> {
  const timeoutMs = opts.timeoutMs ?? PREFLIGHT_TIMEOUT_MS;
  const question = workerContentInput(input);
  const noAnswer = () =>
    new WavegateError(
      'UNAVAILABLE',
      `no worker on task queue "${taskQueue}" answered the content preflight for profile "${question.profile}" within ${Math.round(timeoutMs / 1000)} s; nothing was started. Is a \`wavegate worker\` of this version polling that queue (--task-queue / $WAVEGATE_TASK_QUEUE)?`,
      { taskQueue },
    );
  const handle = await client.workflow.start<typeof preflightWorkflow>('preflightWorkflow', {
    workflowId: `preflight:${question.profile}:${randomUUID()}`,
    taskQueue,
    args: [question],
    // The server ends an unanswered question by itself too: no preflight outlives its caller for long.
    workflowExecutionTimeout: timeoutMs,
  });
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(noAnswer()), timeoutMs + 5_000);
  });
  let answer: WorkerContentAnswer;
  try {
    answer = await Promise.race([handle.result(), late]);
  } catch (err) {
    if (err instanceof WavegateError) {
      await handle.terminate('no worker answered the preflight').catch(() => {});
      throw err;
    }
    if (err instanceof WorkflowFailedError && err.cause?.name === 'TimeoutFailure') throw noAnswer();
    throw new WavegateError(
      'FAILED',
      `the content preflight for profile "${question.profile}" on task queue "${taskQueue}" failed: ${(err as Error).message}${err instanceof WorkflowFailedError && err.cause ? ` (${err.cause.message})` : ''}; nothing was started`,
      { taskQueue },
    );
  } finally {
    clearTimeout(timer);
  }
  if (!answer.ok) {
    throw new WavegateError(
      'INVALID_STATE',
      `profile "${question.profile}": worker ${answer.worker} on task queue "${taskQueue}" refuses r${question.revision} (${answer.reason}): ${answer.message}. Nothing was started and no device was contacted. Give that worker the profile's trust.yaml (and payload/) under its profiles root (\`wavegate worker --profiles <dir>\` or $WAVEGATE_PROFILES) and restart it`,
      { profile: question.profile, reason: answer.reason, worker: answer.worker, taskQueue },
    );
  }
  return answer.worker;
}
