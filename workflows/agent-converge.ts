import * as wf from '@temporalio/workflow';
import type { RolloutInput } from '../core/rollout/input';
import type { RolloutModel } from '../core/rollout/model';
import type * as activities from '../activities';

type Acts = ReturnType<typeof activities.createActivities>;

/** New executions whose snapshot has agent devices leave the skipped ones the completed revision as desired state. */
export const AGENT_DESIRED_STATE = 'agent-desired-state';
/** Devices per desireAgentRevision activity (activities/agent/converge.ts MAX_CONVERGE_BATCH). */
const BATCH = 500;

const { desireAgentRevision } = wf.proxyActivities<Acts>({ startToCloseTimeout: '5 minutes', heartbeatTimeout: '1 minute', retry: { maximumAttempts: 5 } });

/**
 * After a completed rollout: every agent device it skipped (offline, or not started) and that was not
 * at the target already gets the rollout's revision as its desired state on its twin, so it converges
 * when its agent returns. A rolled-back or aborted rollout leaves skipped devices' desired state alone:
 * they stay on the revision they have. Returns how many devices were asked.
 */
export async function convergeSkippedAgents(input: RolloutInput, model: RolloutModel): Promise<number> {
  const agents = model.snapshotDevices().filter((d) => d.transport === 'agent');
  if (agents.length === 0 || !wf.patched(AGENT_DESIRED_STATE)) return 0;
  const target = input.spec.toRevision;
  const ids = agents
    .filter((d) => model.deviceState(d.id) === 'skipped' && d.updateClass !== 'left-behind' && !d.nodeDown?.holds && d.current !== target)
    .map((d) => d.id);
  const { workflowId, runId } = wf.workflowInfo();
  for (let i = 0; i < ids.length; i += BATCH) {
    await desireAgentRevision({ rollout: workflowId, run: runId, devices: ids.slice(i, i + BATCH), steps: input.steps, fromRevision: input.spec.fromRevision || null });
  }
  return ids.length;
}
