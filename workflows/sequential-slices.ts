import * as wf from '@temporalio/workflow';
import type { RolloutModel } from '../core/rollout/model';
import type { DeviceSnapshot } from '../core/rollout-state';
import type { BatchResult, DeviceRunOptions } from './device-runner';
import { refreshDetails } from './progress';
import { rolloutSliceWorkflow, type SliceResult } from './slice';

/**
 * The sequential-slice path: a sliced phase as one slice child after another, each started once the one
 * before it ended, the failure tally carried across. Only executions recorded before patch
 * `overlapping-slices` (workflows/batches.ts `OVERLAPPING_SLICES`) take it; new executions run their
 * slices overlapping under one shared budget (`DeviceBatches.runOverlapping`).
 *
 * Retired with `overlapping-slices`: once no execution that started before that patch can still run (the
 * patch deprecated, then removed), deleting this file and the one branch in `DeviceBatches.run` that
 * calls it removes the path; nothing else refers to it.
 */
export interface SequentialSliceHost {
  rolloutId: string;
  sliceSize: number;
  model: RolloutModel;
  /** A slice child is running: pause and abort are forwarded to it (DeviceBatches `forwardControls`). */
  sliceRunning(handle: wf.ChildWorkflowHandle<typeof rolloutSliceWorkflow>): void;
  /** The slice child ended: nothing more to forward to it. */
  sliceEnded(handle: wf.ChildWorkflowHandle<typeof rolloutSliceWorkflow>): void;
}

/** Runs a batch as sequential slice children: a pause holds the next slice's start, an abort or a tripped gate ends the batch. */
export async function runSequentialSlices(
  batch: DeviceSnapshot[],
  mode: 'apply' | 'rollback',
  phaseName: string,
  opts: DeviceRunOptions,
  host: SequentialSliceHost,
): Promise<BatchResult> {
  const info = wf.workflowInfo();
  const { model, sliceSize } = host;
  const total: BatchResult = { tally: { succeeded: 0, failed: 0 }, tripped: false, started: [] };
  for (let i = 0, k = 0; i < batch.length; i += sliceSize, k++) {
    if (mode === 'apply') {
      if (model.stopped || total.tripped) break;
      await wf.condition(() => !model.paused || model.stopped);
      if (model.stopped) break;
    }
    const slice = batch.slice(i, i + sliceSize);
    const handle = await wf.startChild(rolloutSliceWorkflow, {
      workflowId: `${host.rolloutId}/${info.runId.slice(0, 8)}/${mode}-${phaseName.replace(/\s+/g, '_')}-${k}`,
      args: [{ devices: slice, options: opts, tallyBefore: total.tally, paused: mode === 'apply' && model.paused }],
      staticSummary: `${mode} ${phaseName}: slice ${k + 1} of ${Math.ceil(batch.length / sliceSize)} (${slice.length} devices)`,
    });
    host.sliceRunning(handle);
    const result: SliceResult = await handle.result();
    host.sliceEnded(handle);
    // One details refresh for the whole slice: per device, it would rebuild the table 200 times over
    // a fleet that may hold 10,000 devices, inside one workflow task.
    for (const [id, deviceState, reason] of result.devices) model.setDevice(id, deviceState, reason);
    refreshDetails(model, true);
    total.tally.succeeded += result.tally.succeeded;
    total.tally.failed += result.tally.failed;
    total.tripped ||= result.tripped;
    total.started.push(...result.started);
  }
  return total;
}
