import * as wf from '@temporalio/workflow';
import type { GateOutcome } from '../core/health';
import type { PlannedPhase } from '../core/planner';
import type { RolloutInput } from '../core/rollout/input';
import { endingOf, stopCause } from '../core/rollout/ending';
import { RolloutModel } from '../core/rollout/model';
import * as policy from '../core/rollout/policy';
import type { RolloutStatus } from '../core/rollout/status';
import { watchDeadlines } from './deadlines';
import { rootMessage } from './device-runner';
import { gateEvidence, runHealthGate } from './health-gate';
import { publishIfChanged } from './progress';
import { REVERT_ROLLOUTS, RolloutStages } from './rollout-stages';
import { convergeSkippedAgents } from './agent-converge';
import { watchAfterPromotion } from './watch';
import { holdWhileUnverified } from './reverify';

export type { RolloutInput };

/** A device that refused us at snapshot (host key, login, config) fails instead of being skipped as offline. */
export const SNAPSHOT_REFUSALS_FAIL = 'snapshot-refusals-fail';

/**
 * A rollout, as a story (docs/architecture.md): snapshot the membership, plan the phases, then for each
 * phase apply the revision within the pools' budgets, judge the failure gate, wait the gate, check
 * health, and advance, pause for an operator, or put back every device this rollout changed; after the
 * last phase a spec's `watch` keeps checking the changed devices for a while. The state
 * lives in a RolloutModel, the decisions in core/rollout/policy.ts, the stages in rollout-stages.ts; this
 * file only tells them in order.
 */
export async function rolloutWorkflow(input: RolloutInput): Promise<RolloutStatus> {
  const { spec } = input;
  const model = new RolloutModel({ rolloutId: input.rolloutId, ...spec });
  // Phase timings for the status's estimate: workflow time, kept in memory only (no command, every history replays).
  model.useClock(() => Date.now());
  const stages = new RolloutStages(input, model);

  /** The nightly canary: the first phase, its gate and health gate; the outcome is the verdict. */
  async function canaryRun(phase: PlannedPhase | undefined): Promise<RolloutStatus> {
    model.closePhases('all-after-first');
    stages.skipPending('not in the canary phase', phase?.index ?? -1);
    if (!phase) {
      model.recordVerdict(policy.NOTHING_TO_TEST);
      await stages.audit('canary.verdict', {
        phase: null,
        reason: 'no device needs the revision',
        evidence: { verdict: model.verdict },
      });
      return stages.end(endingOf({ kind: 'canary-nothing-to-test' }));
    }
    const applied = await stages.applyPhase(phase, true);
    let outcome: { verdict: GateOutcome; evidence: string[] } | null = policy.canaryApplyVerdict(applied.tally);
    if (!outcome) {
      await stages.gateTimer(phase);
      const gate = await runHealthGate(input, model, phase);
      outcome = { verdict: gate.outcome, evidence: gateEvidence(gate) };
    }
    const { verdict, evidence } = outcome;
    model.recordVerdict(verdict);
    model.recordGate(phase.index, verdict, evidence, policy.canaryStage(verdict));
    await stages.audit('canary.verdict', {
      reason: verdict,
      evidence: { verdict, evidence, kept: input.canary!.keep },
    });
    publishIfChanged(model);
    return stages.end(endingOf({ kind: 'canary-verdict', verdict, keep: input.canary!.keep }));
  }

  async function story(): Promise<RolloutStatus> {
    publishIfChanged(model);
    // Only when the spec sets a deadline.
    const deadlines = watchDeadlines(input, model, stages);
    // A revert names the rollout (id and run) it undoes, in its first record and in its status.
    if (input.reverts) wf.deprecatePatch(REVERT_ROLLOUTS);
    model.recordReverts(input.reverts);
    const reverts = model.reverts ? { reverts: model.reverts.rolloutId, revertsRun: model.reverts.runId } : {};
    await stages.audit('rollout.started', {
      phase: null,
      by: input.startedBy,
      evidence: { from: spec.fromRevision, to: spec.toRevision, phases: spec.phases.length, ...reverts },
    });
    // The two-person rule's starter, verified before any device is touched (a spec with `approval` only).
    await stages.approvals?.verifyStarter();
    // 1. Snapshot the membership in scope; 2. plan, deterministically from the rollout id.
    await stages.snapshot();
    const plan = await stages.plan();
    wf.deprecatePatch(SNAPSHOT_REFUSALS_FAIL);
    stages.adoptPlan();
    publishIfChanged(model);
    await stages.recordPlan();
    if (input.canary) return canaryRun(plan.phases[0]);

    // 3-5. Each phase: apply, failure gate, gate, health gate.
    for (const phase of plan.phases) {
      await stages.holdWhilePaused();
      if (model.stopped) break;
      // A device flipped by a failed re-verify holds every later phase until it verifies again.
      await holdWhileUnverified(input, model, stages, phase);
      if (model.stopped) break;
      const applied = await stages.applyPhase(phase, false);
      if (model.stopped) {
        model.setStage(phase.index, 'stopped');
        break;
      }
      const failureGate = policy.phaseFailureGate(phase.name, applied, applied.offlineFailed, spec);
      if (failureGate.tripped) {
        model.setStage(phase.index, 'failed');
        await stages.audit('gate.failed', { reason: 'failure-gate', evidence: { tally: failureGate.tally } });
        const next = await stages.onFailure('failure-gate', failureGate.evidence, phase);
        if (typeof next === 'object') return stages.end(next);
        if (next === 'aborted') break;
      }
      const gated = await stages.gateThenHealth(phase);
      if (gated !== 'done') return stages.end(gated);
      if (model.stopped) break;
    }
    deadlines?.stop();

    // Stopped by an operator's abort or by a deadline (which only recorded its request on the model).
    if (model.abort) return stages.end(endingOf(stopCause(model.abort)));
    await stages.settled();
    // 6. The watch after promotion (only a spec with `watch`): a failed check may put every changed device back.
    let alerts: string[] = [];
    if (spec.watch) {
      const watched = await watchAfterPromotion(input, model, stages);
      if (watched.ending) return stages.end(watched.ending);
      alerts = watched.alerts;
    }
    // Each device's floor rose with its own confirmed apply: recorded here.
    await stages.recordFloor();
    // Agent devices skipped as offline take the revision as desired state (patched, only with agent devices).
    await convergeSkippedAgents(input, model);
    const alerted = alerts.length
      ? { reason: `completed; its watch alerted ${alerts.length} time(s), last: ${alerts.at(-1)}` }
      : {};
    return stages.end(endingOf({ kind: 'completed', ...alerted }));
  }

  try {
    return await story();
  } catch (err) {
    await wf.CancellationScope.nonCancellable(async () => {
      if (wf.isCancellation(err)) {
        // A cancel (e.g. Request Cancellation in the Web UI) still puts every changed device back.
        const cancel = endingOf({ kind: 'cancel' });
        model.recordControl('cancel', { by: cancel.by }, true, new Date(Date.now()).toISOString());
        model.clearWaits();
        await stages.end(cancel);
      } else {
        // No compensation (core/rollout/ending.ts says why): the rollout fails where it was.
        await stages.end(endingOf({ kind: 'error', message: rootMessage(err) }));
      }
    });
    throw err;
  }
}
