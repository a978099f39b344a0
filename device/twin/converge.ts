import { Context } from '@temporalio/activity';
import type { Client } from '@temporalio/client';
import type { RevisionSteps } from '../../core/rollout/input';
import { mapLimit } from '../../core/map-limit';
import { desiredRequestOf } from './apply';
import { atOrAboveReason } from '../../core/twin';
import { desireOnTwin, readTwin } from '../../clients/twin';

/**
 * Offline convergence: after a rollout completes, the agent devices it skipped as
 * offline keep its outcome as their desired state, so each converges when its agent next syncs. One
 * activity takes at most MAX_CONVERGE_BATCH devices; the signals go out `concurrency` at a time.
 * Convergence never goes down: each twin is read first, and a device whose agent reports the revision
 * or a higher one (or whose twin desires a higher one) is left alone and not counted as asked.
 */
export const MAX_CONVERGE_BATCH = 500;

export interface ConvergeInput {
  rollout: string;
  run: string;
  devices: string[];
  steps: RevisionSteps;
  fromRevision: number | null;
}

export interface ConvergeResult {
  asked: number;
  /** Devices left alone: they report the revision or above, or are desired above it. */
  atOrAbove?: number;
}

/** The request for one device: `<rollout>:<run>:converge:<device>`, the same on every retry (idempotent on the twin). */
export function convergeRequest(input: ConvergeInput, device: string) {
  const holder = { rollout: input.rollout, run: input.run, activity: `converge:${device}`, attempt: 1 };
  return desiredRequestOf(input.steps, holder, input.rollout, input.fromRevision);
}

export function createConvergeActivities(deps: { client?: Client; concurrency?: number } = {}) {
  return {
    async desireAgentRevision(input: ConvergeInput): Promise<ConvergeResult> {
      if (input.devices.length > MAX_CONVERGE_BATCH)
        throw new Error(
          `desireAgentRevision: at most ${MAX_CONVERGE_BATCH} devices per batch (got ${input.devices.length})`,
        );
      const ctx = Context.current();
      const client = deps.client ?? ctx.client;
      let done = 0;
      let asked = 0;
      let atOrAbove = 0;
      await mapLimit(input.devices, deps.concurrency ?? 16, async (device) => {
        if (atOrAboveReason(await readTwin(client, device), input.steps.profile, input.steps.revision) !== null)
          atOrAbove++;
        else {
          await desireOnTwin(client, ctx.info.taskQueue, device, convergeRequest(input, device));
          asked++;
        }
        ctx.heartbeat(++done);
      });
      return { asked, atOrAbove };
    },
  };
}
