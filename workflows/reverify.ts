import * as wf from '@temporalio/workflow';
import type { PlannedPhase } from '../core/planner';
import type { RolloutInput } from '../core/rollout/input';
import type { RolloutModel } from '../core/rollout/model';
import { REVERIFY_CHECK, unverifiedHoldReason } from '../core/rollout/reverify';
import { gateEvidence, REVERIFY_FLIPS, runHealthGate } from './health-gate';
import { publishIfChanged } from './progress';
import type { RolloutStages } from './rollout-stages';

/**
 * Before a later phase starts: no device this rollout flipped with a failed re-verify may still be
 * failing it (core/rollout/reverify.ts). The flipped devices are verified again at once: those that
 * verify now are `applied` again; while any still fails the rollout pauses (cause `reverify`, naming
 * them) and verifies them again after each resume. An abort ends the wait. Nothing is asked unless a
 * re-verify flipped a device, which only a `verify` check can do.
 */
export async function holdWhileUnverified(
  input: RolloutInput,
  model: RolloutModel,
  stages: RolloutStages,
  phase: PlannedPhase,
): Promise<void> {
  if (model.unverified().length === 0) return;
  wf.patched(REVERIFY_FLIPS);
  for (;;) {
    const flipped = model.unverified();
    if (flipped.length === 0 || model.stopped) return;
    const where = `before ${phase.name}`;
    const gate = await runHealthGate(input, model, { name: where, healthGate: [REVERIFY_CHECK] }, flipped);
    // All verify again, or none is taken back: a probe that could not run names no device.
    if (gate.outcome === 'pass')
      model.unflip(
        flipped.map((d) => d.id),
        `verified again ${where}`,
      );
    await stages.audit(gate.outcome === 'pass' ? 'gate.passed' : 'gate.failed', {
      reason: `re-verify ${where}`,
      evidence: { devices: flipped.map((d) => d.id), results: gate.results, lines: gateEvidence(gate) },
    });
    const left = model.unverified().map((d) => d.id);
    if (left.length === 0) {
      publishIfChanged(model);
      return;
    }
    model.pauseFor('reverify', unverifiedHoldReason(phase.name, left));
    await stages.audit('rollout.paused', { reason: model.pausedReason });
    publishIfChanged(model);
    await stages.holdWhilePaused();
  }
}
