import { randomUUID } from 'node:crypto';
import { WorkflowFailedError, type Client } from '@temporalio/client';
import { WavegateError } from '../core/errors';
import { devicesInScope } from '../core/gates';
import type { Device } from '../core/inventory';
import type { RolloutInput } from '../core/rollout/input';
import { sshFilesOf, sshRefusal } from '../core/ssh-files';
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

/** The devices a rollout's input is for: its profile's scope, narrowed to `onlyDevices` (a converge, a revert). */
export function inputDevices(input: RolloutInput, devices: readonly Device[]): Device[] {
  const only = input.onlyDevices ? new Set(input.onlyDevices) : undefined;
  return devicesInScope(input.profile.scope, devices).filter((d) => !only || only.has(d.id));
}

/** What a refusal of the content asks the operator to do: the fix depends on what the worker found. */
function contentFix(reason: string): string {
  if (reason.startsWith('PAYLOAD_'))
    return 'Give that worker the payload files that were signed, under its profiles root (`wavegate worker --profiles <dir>` or $WAVEGATE_PROFILES); if the file was changed on purpose, sign and cosign the revision again (`wavegate sign`, `wavegate cosign`) and give the worker the new envelope and payload';
  return "Give that worker the profile's trust.yaml (and payload/) under its profiles root (`wavegate worker --profiles <dir>` or $WAVEGATE_PROFILES) and restart it";
}

/** What a worker said about a rollout's content and its devices' SSH files. */
export interface PreflightAnswer {
  worker: string;
  /** Whether the worker judged the SSH files (false: asked none, or a worker built before the question). */
  sshChecked: boolean;
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
  opts: { timeoutMs?: number; devices?: readonly Device[] } = {},
): Promise<PreflightAnswer> {
  const timeoutMs = opts.timeoutMs ?? PREFLIGHT_TIMEOUT_MS;
  const devices = opts.devices ? inputDevices(input, opts.devices) : undefined;
  const question: WorkerContentInput = {
    ...workerContentInput(input),
    ...(devices ? { ssh: sshFilesOf(devices) } : {}),
  };
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
      `profile "${question.profile}": worker ${answer.worker} on task queue "${taskQueue}" refuses r${question.revision} (${answer.reason}): ${answer.message}. Nothing was started and no device was contacted. ${contentFix(answer.reason)}`,
      { profile: question.profile, reason: answer.reason, worker: answer.worker, taskQueue },
    );
  }
  if (devices && answer.ssh?.length) throw sshRefusal(answer.ssh, devices, answer.worker);
  return { worker: answer.worker, sshChecked: !!devices && answer.ssh !== undefined };
}
