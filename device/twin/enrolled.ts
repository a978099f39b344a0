import { defaultPayloadConverter } from '@temporalio/common';
import type { Client } from '@temporalio/client';
import { devicesInScope } from '../../core/gates';
import type { Device } from '../../core/inventory';
import type { RolloutInput } from '../../core/rollout/input';
import { atOrAboveReason } from '../../core/twin';
import { desiredRequestOf } from './apply';
import { desireOnTwin, readTwin } from '../../clients/twin';

/**
 * A device enrolled after a rollout completed converges to the revision of the latest completed
 * rollout of each profile it is in scope of. Called on a device's first sync (the gateway) or by
 * whoever enrolls it: for each such profile whose twin entry is empty, the desired entry is the one that
 * rollout applied (its own signed steps, read from its start event; `requestId`
 * `<rollout>:<run>:converge:<device>`), found by the search attributes `WavegateProfile` and
 * `WavegateState = 'completed'`. A device already desired for the profile is left alone, and so is one
 * whose agent reports that revision or a higher one: enrolment never desires below what the device runs.
 */
export interface ProfileScope {
  name: string;
  scope: Record<string, string>;
}

/** The newest completed rollout of `profile` (not a canary), or undefined. */
export async function latestCompletedRollout(
  client: Client,
  profile: string,
): Promise<{ workflowId: string; runId: string } | undefined> {
  if (!/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/.test(profile))
    throw new Error(`profile ${JSON.stringify(profile)}: not a profile name`);
  let best: { workflowId: string; runId: string; closed: number } | undefined;
  let seen = 0;
  for await (const w of client.workflow.list({
    query: `WorkflowType = 'rolloutWorkflow' AND WavegateProfile = '${profile}' AND WavegateState = 'completed'`,
    pageSize: 100,
  })) {
    const closed = (w.closeTime ?? w.startTime).getTime();
    if (!best || closed > best.closed) best = { workflowId: w.workflowId, runId: w.runId, closed };
    if (++seen >= 1_000) break;
  }
  return best && { workflowId: best.workflowId, runId: best.runId };
}

async function rolloutInputOf(client: Client, workflowId: string, runId: string): Promise<RolloutInput | undefined> {
  const history = await client.workflow.getHandle(workflowId, runId).fetchHistory();
  const payload = history.events?.[0]?.workflowExecutionStartedEventAttributes?.input?.payloads?.[0];
  return payload ? defaultPayloadConverter.fromPayload<RolloutInput>(payload) : undefined;
}

/** The latest completed rollout of a profile and its input (what enrolment converges a device to). */
export type LatestRollout = (
  profile: string,
) => Promise<{ workflowId: string; runId: string; input: RolloutInput | undefined } | undefined>;

export function latestRolloutLookup(client: Client): LatestRollout {
  return async (profile) => {
    const last = await latestCompletedRollout(client, profile);
    return last && { ...last, input: await rolloutInputOf(client, last.workflowId, last.runId) };
  };
}

/**
 * The lookup remembered for `ttlMs` per profile: a gateway that restarts meets thousands of first syncs at once,
 * and each would list the profile's completed rollouts and read the newest one's start.
 */
export function cachedLatestRollout(lookup: LatestRollout, ttlMs: number, now = Date.now): LatestRollout {
  const cache = new Map<string, { at: number; answer: ReturnType<LatestRollout> }>();
  return (profile) => {
    const known = cache.get(profile);
    if (known && now() - known.at < ttlMs) return known.answer;
    const answer = lookup(profile);
    cache.set(profile, { at: now(), answer });
    // A failed lookup is not remembered.
    answer.catch(() => cache.delete(profile));
    return answer;
  };
}

/** Set the desired state of a newly enrolled agent device; returns the profiles it was asked to converge on. */
export async function convergeEnrolledDevice(
  client: Client,
  taskQueue: string,
  device: Device,
  profiles: readonly ProfileScope[],
  latest: LatestRollout = latestRolloutLookup(client),
): Promise<string[]> {
  if (device.transport !== 'agent' || device.updateClass === 'left-behind') return [];
  const view = await readTwin(client, device.id);
  const asked: string[] = [];
  for (const profile of profiles) {
    if (devicesInScope(profile.scope, [device]).length === 0) continue;
    if (view && Object.hasOwn(view.desired, profile.name)) continue;
    const last = await latest(profile.name);
    if (!last) continue;
    const input = last.input;
    if (!input || input.canary) continue;
    if (atOrAboveReason(view, profile.name, input.steps.revision) !== null) continue;
    const holder = { rollout: last.workflowId, run: last.runId, activity: `converge:${device.id}`, attempt: 1 };
    // Once applied, the device's floor rises to the revision with no way back: that rollout did not change it.
    const steps = {
      ...input.steps,
      floor: { rollout: last.workflowId, run: last.runId, raise: { from: input.steps.revision, windowMs: 0 } },
    };
    await desireOnTwin(
      client,
      taskQueue,
      device.id,
      desiredRequestOf(steps, holder, last.workflowId, input.spec.fromRevision || null),
    );
    asked.push(profile.name);
  }
  return asked;
}
