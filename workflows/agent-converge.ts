import * as wf from '@temporalio/workflow';
import type { RolloutInput } from '../core/rollout/input';
import { convergeCandidate } from '../core/rollout/device-outcome';
import type { RolloutModel } from '../core/rollout/model';
import { SLICES_PER_ACTIVITY } from '../core/rollout/sliced-plan';
import { desireAgentRevision, desireAgentRevisionInSlices } from './activity-proxies';

/** New executions whose snapshot has agent devices leave the skipped ones the completed revision as desired state. */
export const AGENT_DESIRED_STATE = 'agent-desired-state';
/**
 * New executions leave the revision as desired state only on agent devices skipped as offline (never on
 * one found ahead, not-for-me or never started), with the floor it raises when applied (no way back).
 */
export const CONVERGE_OFFLINE_ONLY = 'converge-offline-only';
/** Devices per desireAgentRevision activity (device/twin/converge.ts MAX_CONVERGE_BATCH). */
const BATCH = 500;

/**
 * After a completed rollout: every agent device it skipped as offline (at snapshot or at its apply) gets
 * the rollout's revision as its desired state on its twin, so it converges when its agent returns; the
 * activity leaves alone a device whose agent reports that revision or a higher one. A device skipped for
 * any other reason (ahead of the target, not-for-me, never started) is not asked: convergence never
 * goes down. A rolled-back or aborted rollout leaves skipped devices' desired state alone: they stay on
 * the revision they have. Returns how many devices were asked.
 */
export async function convergeSkippedAgents(input: RolloutInput, model: RolloutModel): Promise<number> {
  const agents = model.snapshotDevices().filter((d) => d.transport === 'agent');
  // Sliced records: the sliced phases' agent devices are read from their slices (a few per activity).
  const slices = model.sliced.agents > 0 ? model.sliced.appliedSlices() : [];
  if (agents.length === 0 && slices.length === 0) return 0;
  wf.deprecatePatch(AGENT_DESIRED_STATE);
  const target = input.spec.toRevision;
  wf.deprecatePatch(CONVERGE_OFFLINE_ONLY);
  const ids = agents
    .filter((d) => {
      const { state, reason } = model.outcomesOf([d.id])[0]!;
      return convergeCandidate(d, state, reason, target);
    })
    .map((d) => d.id);
  const { workflowId, runId } = wf.workflowInfo();
  // The revision a device converges to raises its floor there with no way back: this rollout did not change it.
  const steps = { ...input.steps, floor: { rollout: workflowId, run: runId, raise: { from: target, windowMs: 0 } } };
  for (let i = 0; i < ids.length; i += BATCH) {
    await desireAgentRevision({
      rollout: workflowId,
      run: runId,
      devices: ids.slice(i, i + BATCH),
      steps,
      fromRevision: input.spec.fromRevision || null,
    });
  }
  let asked = ids.length;
  for (let i = 0; i < slices.length; i += SLICES_PER_ACTIVITY) {
    const answer = await desireAgentRevisionInSlices({
      rollout: workflowId,
      run: runId,
      slices: slices.slice(i, i + SLICES_PER_ACTIVITY),
      target,
      steps,
      fromRevision: input.spec.fromRevision || null,
    });
    asked += answer.asked;
  }
  return asked;
}
