import * as wf from '@temporalio/workflow';
import { evaluateHealthGate, type CheckResult, type GateResult } from '../core/health';
import type { PlannedPhase } from '../core/planner';
import type { RolloutInput } from '../core/rollout/input';
import type { RolloutModel } from '../core/rollout/model';
import type * as activities from '../activities';
import { rootMessage } from './device-runner';

type Acts = ReturnType<typeof activities.createActivities>;

/** Devices per health-check activity: a 10,000-device phase is twenty checks, not one huge payload. */
const HEALTH_CHUNK = 500;

/**
 * The health gate after a phase: every check of the phase over the devices this rollout changed, in
 * chunks. A probe that could not run is a fact we could not read: inconclusive, never a pass.
 */
export async function runHealthGate(input: RolloutInput, model: RolloutModel, phase: PlannedPhase): Promise<GateResult> {
  const { spec, profile } = input;
  const healthCheck = wf.proxyActivities<Acts>({
    startToCloseTimeout: spec.healthTimeout + 30_000,
    heartbeatTimeout: '30 seconds',
    // A check that cannot answer is inconclusive by itself; retrying it only hides the evidence.
    retry: { maximumAttempts: 2 },
  }).runHealthCheck;
  const changed = model.healthTargets();
  const results: CheckResult[] = [];
  for (const check of phase.healthGate) {
    for (let i = 0; i < Math.max(changed.length, 1); i += HEALTH_CHUNK) {
      const chunk = changed.slice(i, i + HEALTH_CHUNK);
      try {
        results.push(
          await healthCheck.executeWithOptions({ summary: `health gate after ${phase.name}: ${check}` }, [
            { check, devices: chunk, runtimes: profile.runtimes, ...(profile.metrics ? { metrics: profile.metrics } : {}), timeoutMs: spec.healthTimeout },
          ]),
        );
      } catch (err) {
        if (wf.isCancellation(err)) throw err;
        results.push({ check, outcome: 'inconclusive', evidence: `probe failed: ${rootMessage(err)}`.slice(0, 300), durationMs: 0 });
      }
    }
  }
  return evaluateHealthGate(results);
}

/** A gate's results as the lines a phase shows and the audit keeps. */
export function gateEvidence(gate: GateResult): string[] {
  return gate.results.map((r) => `${r.check}: ${r.outcome} — ${r.evidence}`);
}
