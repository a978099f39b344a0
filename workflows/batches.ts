import * as wf from '@temporalio/workflow';
import type { RolloutInput } from '../core/rollout/input';
import type { RolloutModel } from '../core/rollout/model';
import type { DeviceSnapshot, DeviceState } from '../core/rollout-state';
import { runDevices, type DeviceRunOptions, type DeviceRunResult } from './device-runner';
import { sliceControlSignal } from './messages';
import { refreshDetails } from './progress';
import { rolloutSliceWorkflow, type SliceResult } from './slice';

export const DEFAULT_SLICE = 200;

export type BatchResult = Pick<DeviceRunResult, 'tally' | 'tripped' | 'started'>;

/**
 * Runs a phase's devices (apply) or the devices to put back (rollback): inline when the batch is small,
 * else in child workflows over slices of `sliceSize`, so no execution's history or pending activities
 * grow with the fleet. Pause and abort reach a running slice through `forwardControls`.
 */
export class DeviceBatches {
  private readonly sliceSize: number;
  private activeSlice: wf.ChildWorkflowHandle<typeof rolloutSliceWorkflow> | undefined;
  /** Best-effort devices still running: never awaited by a gate, awaited before compensation and the end. */
  private readonly background: Promise<void>[] = [];

  constructor(
    private readonly input: RolloutInput,
    private readonly model: RolloutModel,
  ) {
    this.sliceSize = input.sliceSize ?? DEFAULT_SLICE;
  }

  /** Tell the running slice (if any) the rollout's pause/abort state; compensation is never held. */
  forwardControls(): void {
    if (this.activeSlice && this.model.phaseName !== 'rollback') {
      void this.activeSlice.signal(sliceControlSignal, { paused: this.model.paused, stop: this.model.stopped }).catch(() => {});
    }
  }

  settled(): Promise<unknown> {
    return Promise.all(this.background);
  }

  private options(mode: 'apply' | 'rollback', phaseName: string): DeviceRunOptions {
    const { spec } = this.input;
    return {
      mode,
      steps: mode === 'apply' ? this.input.steps : this.input.rollbackSteps,
      provable: mode === 'apply' ? this.input.provable : true,
      limits: Object.fromEntries((this.model.plan?.pools ?? []).map((p) => [p.pool, p.maxInFlight])),
      applyTimeoutMs: spec.applyTimeout,
      offline: spec.offline,
      ...(spec.window ? { window: spec.window } : {}),
      phaseName,
      failurePolicy: { maxFailureRatio: spec.maxFailureRatio, minSample: spec.minSample },
    };
  }

  private hooks(mode: 'apply' | 'rollback') {
    const setState = (id: string, state: DeviceState, reason?: string) => {
      this.model.setDevice(id, state, reason);
      refreshDetails(this.model);
    };
    // Compensation is never held by a pause: it is what an operator's abort or a failed gate asked for.
    return mode === 'apply'
      ? { setState, isPaused: () => this.model.paused, isStopped: () => this.model.stopped }
      : { setState, isPaused: () => false, isStopped: () => false };
  }

  async run(batch: DeviceSnapshot[], mode: 'apply' | 'rollback', phaseName: string): Promise<BatchResult> {
    const opts = this.options(mode, phaseName);
    if (batch.length <= this.sliceSize) {
      const result = await runDevices(batch, opts, this.hooks(mode));
      this.background.push(result.background);
      return result;
    }
    const info = wf.workflowInfo();
    const model = this.model;
    const total: BatchResult = { tally: { succeeded: 0, failed: 0 }, tripped: false, started: [] };
    for (let i = 0, k = 0; i < batch.length; i += this.sliceSize, k++) {
      if (mode === 'apply') {
        if (model.stopped || total.tripped) break;
        await wf.condition(() => !model.paused || model.stopped);
        if (model.stopped) break;
      }
      const slice = batch.slice(i, i + this.sliceSize);
      this.activeSlice = await wf.startChild(rolloutSliceWorkflow, {
        workflowId: `${this.input.rolloutId}/${info.runId.slice(0, 8)}/${mode}-${phaseName.replace(/\s+/g, '_')}-${k}`,
        args: [{ devices: slice, options: opts, tallyBefore: total.tally, paused: mode === 'apply' && model.paused }],
        staticSummary: `${mode} ${phaseName}: slice ${k + 1} of ${Math.ceil(batch.length / this.sliceSize)} (${slice.length} devices)`,
      });
      const result: SliceResult = await this.activeSlice.result();
      this.activeSlice = undefined;
      // One details refresh for the whole slice: per device, it would rebuild the table 200 times over
      // a fleet that may hold 10,000 devices, inside one workflow task.
      for (const [id, deviceState, reason] of result.devices) model.setDevice(id, deviceState, reason);
      refreshDetails(model);
      total.tally.succeeded += result.tally.succeeded;
      total.tally.failed += result.tally.failed;
      total.tripped ||= result.tripped;
      total.started.push(...result.started);
    }
    return total;
  }
}
