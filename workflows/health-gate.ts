import * as wf from '@temporalio/workflow';
import { evaluateHealthGate, type CheckResult, type GateResult } from '../core/health';
import type { PlannedPhase } from '../core/planner';
import type { RolloutInput } from '../core/rollout/input';
import type { RolloutModel } from '../core/rollout/model';
import type { Activities } from '../activities';
import type { DeviceTarget } from '../core/rollout-state';
import { runHealthCheckActivity, sliceHealthCheckActivity } from './activity-proxies';
import { SLICES_PER_ACTIVITY } from '../core/rollout/sliced-plan';
import { rootMessage } from './device-runner';
import { flipReason, reverifyFailed } from '../core/rollout/reverify';

/** New executions whose `verify` check failed flip the devices it named to `failed` (only such a check asks). */
export const REVERIFY_FLIPS = 'reverify-flips';

type HealthCheckInput = Parameters<Activities['runHealthCheck']>[0];

/** Devices per health-check activity: a 10,000-device phase is twenty checks, not one huge payload. */
const HEALTH_CHUNK = 500;

/**
 * The health gate after a phase (or a check of the watch after the last one, core/rollout/watch.ts): every
 * check of the phase over the devices this rollout changed, in chunks. A probe that could not run is a fact
 * we could not read: inconclusive, never a pass.
 */
export async function runHealthGate(
  input: RolloutInput,
  model: RolloutModel,
  phase: Pick<PlannedPhase, 'name' | 'healthGate'>,
  /** Only these devices (a re-verify of the flipped ones); default every device this rollout changed. */
  targets?: DeviceTarget[],
): Promise<GateResult> {
  const { spec } = input;
  const healthCheck = runHealthCheckActivity(spec.healthTimeout);
  const changed = targets ?? model.healthTargets();
  // Sliced records: the sliced phases' changed devices are read from their slices, a few slices per check.
  const slices = targets ? [] : model.sliced.appliedSlices();
  const results: CheckResult[] = [];
  for (const check of phase.healthGate) {
    for (let i = 0; i < slices.length; i += SLICES_PER_ACTIVITY) {
      try {
        results.push(
          await sliceHealthCheckActivity(spec.healthTimeout).executeWithOptions(
            {
              summary: `health gate after ${phase.name}: ${check} (slices ${i + 1}-${Math.min(i + SLICES_PER_ACTIVITY, slices.length)})`,
            },
            [
              {
                ...withoutDevices(healthCheckInput(input, check, [])),
                slices: slices.slice(i, i + SLICES_PER_ACTIVITY),
              },
            ],
          ),
        );
      } catch (err) {
        if (wf.isCancellation(err)) throw err;
        results.push(probeFailed(check, err));
      }
    }
    // Without sliced devices, a check runs at least once (a check with no device to ask still answers).
    const rounds = slices.length ? changed.length : Math.max(changed.length, 1);
    for (let i = 0; i < rounds; i += HEALTH_CHUNK) {
      const chunk = changed.slice(i, i + HEALTH_CHUNK);
      try {
        results.push(
          await healthCheck.executeWithOptions({ summary: `health gate after ${phase.name}: ${check}` }, [
            healthCheckInput(input, check, chunk),
          ]),
        );
      } catch (err) {
        if (wf.isCancellation(err)) throw err;
        results.push(probeFailed(check, err));
      }
    }
  }
  // A re-verify that failed flips its devices to `failed` at this check (core/rollout/reverify.ts).
  const unverified = reverifyFailed(results);
  if (unverified.length) {
    wf.patched(REVERIFY_FLIPS);
    model.flipUnverified(unverified, flipReason(`the health gate after ${phase.name}`, results));
  }
  return evaluateHealthGate(results);
}

/**
 * One check's activity input: the devices and the target revision's signed envelope, from which the
 * worker reads every device-side command after verifying it against its own pins. No raw commands: a
 * profile's worker-side metrics source only (an old input's `command` source is left out, never sent).
 */
function healthCheckInput(input: RolloutInput, check: string, devices: DeviceTarget[]): HealthCheckInput {
  const { steps, profile } = input;
  const source = profile.metrics?.errorRate as Record<string, unknown> | undefined;
  const workerSide = source !== undefined && !('command' in source);
  return {
    check,
    devices,
    profile: steps.profile,
    revision: steps.revision,
    ...(steps.envelope ? { envelope: steps.envelope } : {}),
    ...(workerSide && profile.metrics ? { metrics: profile.metrics } : {}),
    timeoutMs: input.spec.healthTimeout,
  };
}

/** A gate's results as the lines a phase shows and the audit keeps. */
export function gateEvidence(gate: GateResult): string[] {
  return gate.results.map((r) => `${r.check}: ${r.outcome} — ${r.evidence}`);
}

function withoutDevices<T extends { devices: unknown }>(input: T): Omit<T, 'devices'> {
  const { devices: _devices, ...rest } = input;
  return rest;
}

/** A check whose activity failed: a fact we could not read, inconclusive (never a pass), with why. */
function probeFailed(check: string, err: unknown): CheckResult {
  return { check, outcome: 'inconclusive', evidence: `probe failed: ${rootMessage(err)}`.slice(0, 300), durationMs: 0 };
}
