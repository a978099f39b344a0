import * as wf from '@temporalio/workflow';
import type { RolloutInput } from '../core/rollout/input';
import type { RolloutModel } from '../core/rollout/model';
import { endingOf, stopCause, type Ending } from '../core/rollout/ending';
import {
  devicesNamed,
  watchFailureReason,
  watchStarted,
  watchStep,
  watchWaits,
  type WatchCheck,
} from '../core/rollout/watch';
import { gateEvidence, runHealthGate } from './health-gate';
import { publishIfChanged } from './progress';
import type { RolloutStages } from './rollout-stages';

/** New executions whose spec has a `watch` keep checking the changed devices after the last phase. Only such inputs ask. */
export const WATCH_AFTER_PROMOTION = 'watch-after-promotion';

/**
 * The watch after promotion (core/rollout/watch.ts decides): the rollout is `watching`, and every `every`
 * until `for` has passed it runs the watch's checks over the devices it changed, through the same health
 * gate a phase runs. A failed check under `onFail: revert` returns the ending that puts exactly those
 * devices back (the rollout's own compensation, so its floors let it); under `onFail: alert` it is recorded
 * (a warning, a `watch.failed` event) and the watch goes on. An abort (or a cancel) ends the watch as it
 * ends a phase. Null: the watch ran its time and the rollout completes; `alerts` says what it raised.
 */
export async function watchAfterPromotion(
  input: RolloutInput,
  model: RolloutModel,
  stages: RolloutStages,
): Promise<{ ending: Ending | null; alerts: string[] }> {
  const { spec } = input;
  const watch = spec.watch!;
  wf.patched(WATCH_AFTER_PROMOTION);
  const waits = watchWaits(watch);
  model.startWatch(watchStarted(watch));
  publishIfChanged(model);
  const status = model.watch!;
  await stages.audit('watch.started', {
    evidence: {
      forMs: status.forMs,
      everyMs: status.everyMs,
      checks: waits.length,
      onFail: watch.onFail,
      healthGate: watch.healthGate,
      devices: model.changedDevices(),
    },
  });
  // Each check's time is where the watch's schedule put it (`+5m`), not the clock after its timer and probes.
  let at = 0;
  const alerts: string[] = [];
  const stopped = () => {
    model.endWatch('stopped');
    return { ending: endingOf(stopCause(model.abort!)), alerts };
  };
  for (const [i, wait] of waits.entries()) {
    await wf.condition(() => model.stopped, wait, { summary: `watch: check ${i + 1} of ${waits.length}` });
    if (model.stopped) return stopped();
    at += wait;
    const gate = await runHealthGate(input, model, { name: 'watch', healthGate: watch.healthGate });
    if (model.stopped) return stopped();
    const check: WatchCheck = {
      n: i + 1,
      atMs: at,
      outcome: gate.outcome,
      evidence: gateEvidence(gate),
      devices: devicesNamed(gate.results),
    };
    const step = watchStep(gate.outcome, { onInconclusive: spec.onInconclusive, watch });
    if (step.next === 'continue') {
      model.recordWatchCheck(check);
      await stages.audit(step.event, { evidence: { check: check.n, results: gate.results } });
      publishIfChanged(model);
      continue;
    }
    const reason = watchFailureReason(check, waits.length, gate.results);
    model.recordWatchCheck(check, step.next === 'alert' ? reason : undefined);
    if (step.next === 'revert') model.endWatch('reverted', reason);
    await stages.audit('watch.failed', {
      reason,
      evidence: { check: check.n, onFail: watch.onFail, devices: check.devices, results: gate.results },
    });
    publishIfChanged(model);
    if (step.next === 'revert') return { ending: endingOf({ kind: 'watch-revert', reason }), alerts };
    alerts.push(reason);
  }
  model.endWatch(alerts.length ? 'alerted' : 'passed');
  await stages.audit('watch.completed', {
    reason: alerts.length ? `watch alerted: ${alerts.length} of ${waits.length} checks failed` : null,
    evidence: { checks: waits.length, alerts },
  });
  publishIfChanged(model);
  return { ending: null, alerts };
}
