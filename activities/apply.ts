import { CompleteAsyncError, Context } from '@temporalio/activity';
import type { Client } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import { recordDeviceApply } from '../core/metrics';
import type { DeviceTarget } from '../core/rollout-state';
import { applyFailureOf } from '../device/apply-failure';
import { channelFor, transportName, type ChannelDeps } from '../device/channel';
import type { ApplyHolder, ApplyResult, RevisionSteps } from '../device/steps';
import { quietStartHeartbeat } from './quiet-heartbeat';
import { withRecordedClose } from './revert-close';

export interface ApplyInput {
  device: DeviceTarget;
  steps: RevisionSteps;
  commandTimeoutMs: number;
  /**
   * Return `{ outcome: 'offline' }` instead of failing or retrying when the device cannot be reached at
   * first contact (nothing ran on it): an SSH connect that fails before login, an agent whose twin has not synced lately.
   */
  reportOffline?: boolean;
  /**
   * A device whose revision marker is above this answers `{ outcome: 'ahead' }` and nothing runs: the
   * plan's not-for-me "ahead" rule, learned at the apply when the snapshot reads no marker.
   */
  aheadAbove?: number;
  /** The rollout's phase index (0-based) this apply is for: the device's receipt names it (core/receipt.ts). */
  phase?: number;
}

/**
 * Whether the workflow run that holds a device's apply lock is closed: a proof that its apply activity
 * is gone. Anything short of a closed run (running, unknown here, the server unreachable) is no proof.
 */
async function workflowRunClosed(client: Client, holder: ApplyHolder): Promise<boolean> {
  try {
    const run = await client.workflow.getHandle(holder.rollout, holder.run).describe();
    return run.status.name !== 'RUNNING';
  } catch {
    return false;
  }
}

/**
 * Map a device-step error to a Temporal failure (device/apply-failure.ts): only transport trouble that may pass is
 * retried. A failure that carries the device's receipt names the request it answers (the nonce is derived from it).
 */
function toFailure(err: unknown, request: string): never {
  const failure = applyFailureOf(err);
  const first = failure?.details?.[0] as { receipt?: unknown } | undefined;
  if (!failure || typeof first?.receipt !== 'string') throw failure ?? err;
  throw ApplicationFailure.create({
    type: failure.type ?? undefined,
    message: failure.message,
    nonRetryable: failure.nonRetryable ?? undefined,
    details: [{ ...first, request }, ...(failure.details ?? []).slice(1)],
    ...(failure.category ? { category: failure.category } : {}),
  });
}

export interface ApplyDeps {
  channels: ChannelDeps;
  /** Temporal's client (default: the worker's own, from the activity context). */
  client?: Client;
  log?: (line: string) => void;
}

/** One device's apply through its channel: the activity the device's apply lock names. */
export function createApplyActivities(deps: ApplyDeps) {
  const { channels } = deps;
  return {
    /** Bring one device to the revision (verify first, apply, verify, marker). */
    async applyRevision(input: ApplyInput): Promise<ApplyResult> {
      const ctx = Context.current();
      const { workflowExecution, activityId, attempt } = ctx.info;
      const startedAt = Date.now();
      const transport = transportName(input.device);
      const heartbeat = quietStartHeartbeat(ctx);
      try {
        const holder = {
          rollout: workflowExecution?.workflowId ?? 'standalone',
          run: workflowExecution?.runId ?? activityId,
          activity: activityId,
          attempt,
        };
        // A revert's window runs from the close Temporal recorded for the run it reverts, not from its input's word.
        const steps = await withRecordedClose(input.steps, () => deps.client ?? ctx.client);
        // Chosen inside the try: a transport this worker has no channel for is a Transport.config failure.
        const result = await channelFor(input.device, channels).apply(input.device, steps, {
          holder,
          rollout: workflowExecution?.workflowId ?? null,
          taskQueue: ctx.info.taskQueue,
          commandTimeoutMs: input.commandTimeoutMs,
          reportOffline: input.reportOffline,
          ...(input.aheadAbove !== undefined ? { aheadAbove: input.aheadAbove } : {}),
          ...(input.phase !== undefined ? { phase: input.phase } : {}),
          heartbeat,
          signal: ctx.cancellationSignal,
          holderClosed: (holder) => workflowRunClosed(deps.client ?? ctx.client, holder),
        });
        recordDeviceApply(ctx.metricMeter, { outcome: result.outcome, transport }, (Date.now() - startedAt) / 1000);
        // The request a receipt answers: its nonce is derived from this id (core/receipt.ts receiptNonce).
        return result.receipt ? { ...result, request: activityId } : result;
      } catch (err) {
        // Nothing left to complete: a gateway delivered the agent's answer to this apply (gateway/answers.ts), or the
        // attempt ended, and the server said so at a heartbeat. Nothing failed here. Told "completed asynchronously"
        // (which it was), the SDK sends no completion the server would refuse (a warning per device otherwise).
        if (ctx.cancellationDetails?.notFound) {
          const seconds = (Date.now() - startedAt) / 1000;
          recordDeviceApply(ctx.metricMeter, { outcome: 'answered-elsewhere', transport }, seconds);
          throw new CompleteAsyncError();
        }
        deps.log?.(`apply r${input.steps.revision} -> ${input.device.id} failed: ${(err as Error).message}`);
        recordDeviceApply(ctx.metricMeter, { outcome: 'failed', transport }, (Date.now() - startedAt) / 1000);
        return toFailure(err, activityId);
      }
    },
  };
}
