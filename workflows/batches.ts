import * as wf from '@temporalio/workflow';
import { DEFAULT_REVERT_WINDOW_MS, type FloorIntent } from '../core/floor';
import type { RevisionSteps, RolloutInput } from '../core/rollout/input';
import type { RolloutModel } from '../core/rollout/model';
import type { DeviceProof, DeviceSnapshot, DeviceState } from '../core/rollout-state';
import { runDevices, type BatchResult, type DeviceRunOptions } from './device-runner';
import {
  sliceActiveSignal,
  sliceControlAckSignal,
  sliceControlSignal,
  sliceSuccessorSignal,
} from '../contracts/rollout';
import { refreshDetails } from './progress';
import { rolloutSliceWorkflow, type SliceInput, type SliceResult } from './slice';

export const DEFAULT_SLICE = 200;
/** How long a control update waits for the live slices to answer it (SLICE_CONTROL_ACK). */
const CONTROL_ACK_TIMEOUT = '30 seconds';

/**
 * New executions run a phase's slices overlapping under one shared budget (workflows/slice-link.ts):
 * the next slice starts while the current one drains, and no pool is ever over its limit across them.
 */
export const OVERLAPPING_SLICES = 'overlapping-slices';
/**
 * New executions learn a device's reachability at its own apply (the snapshot no longer probes): an
 * apply that cannot reach the device at first contact answers `offline` (unless `offline: wait`).
 */
export const OFFLINE_AT_APPLY = 'offline-at-apply';

/**
 * New executions move each device's floor with its own confirmed apply (the apply's steps carry a
 * FloorIntent, core/floor.ts): no floor pass after completion, and a compensation names the run whose
 * floor it may go below.
 */
export const FLOOR_AT_APPLY = 'floor-at-apply';

export type { BatchResult };

/**
 * What a chain of slices runs (`runOverlapping`): how many slices, what each one is started with and what
 * its answer records. A batch of named devices cut into slices (`namedSlices`), or slices that load their
 * own devices and keep their records (sliced records, workflows/phase-records/sliced.ts).
 */
export interface SliceRun {
  count: number;
  /** How many devices slice `k` runs. */
  size(k: number): number;
  /** What slice `k` is started with: its devices, or where it loads them. */
  input(k: number): Pick<SliceInput, 'devices' | 'source'>;
  /** Slice `k` started as the child `workflowId`. */
  started(k: number, workflowId: string): void;
  /** A slice ended: its answer into the model. */
  ended(workflowId: string, result: SliceResult): void;
}

/** A batch of named devices in slices of `sliceSize`: each slice answers its devices' states. */
function namedSlices(batch: readonly DeviceSnapshot[], sliceSize: number, model: RolloutModel): SliceRun {
  return {
    count: Math.ceil(batch.length / sliceSize),
    size: (k) => Math.min(sliceSize, batch.length - k * sliceSize),
    input: (k) => ({ devices: batch.slice(k * sliceSize, (k + 1) * sliceSize) }),
    started: () => {},
    ended: (_workflowId, result) => {
      for (const [id, deviceState, reason, proof] of result.devices) model.setDevice(id, deviceState, reason, proof);
    },
  };
}

/**
 * Runs a phase's devices (apply) or the devices to put back (rollback): inline when the batch is small,
 * else in child workflows over slices of `sliceSize`, so no execution's history or pending activities
 * grow with the fleet. Pause and abort reach a running slice through `forwardControls`.
 */
export class DeviceBatches {
  private readonly sliceSize: number;
  /** Whether this execution's applies report an unreachable device as offline (OFFLINE_AT_APPLY). */
  readonly offlineAtApply: boolean;
  /**
   * The highest marker a device may show and still be applied to (AHEAD_AT_APPLY): set once the snapshot
   * read no markers, so a device ahead of the rollout is learned by its apply, as the plan did before.
   */
  aheadAbove: number | undefined;
  /** Every slice child running now, by workflow id. */
  private readonly liveSlices = new Map<string, wf.ChildWorkflowHandle<typeof rolloutSliceWorkflow>>();
  /** Overlapping slices: the children that told us they hold the budget. */
  private readonly activeSlices = new Set<string>();
  /** Best-effort devices still running: never awaited by a gate, awaited before compensation and the end. */
  private readonly background: Promise<void>[] = [];
  /** SLICE_CONTROL_ACK: the number of the last control sent, and the highest each slice answered. */
  private controlSeq = 0;
  private readonly acked = new Map<string, number>();
  /** Slice children being started right now (a control must wait for them too). */
  private starting = 0;

  constructor(
    private readonly input: RolloutInput,
    private readonly model: RolloutModel,
  ) {
    this.sliceSize = input.sliceSize ?? DEFAULT_SLICE;
    this.offlineAtApply = input.spec.offline !== 'wait';
    if (this.offlineAtApply) wf.deprecatePatch(OFFLINE_AT_APPLY);
    wf.deprecatePatch(FLOOR_AT_APPLY);
    wf.setHandler(sliceControlAckSignal, ({ workflowId, ack }) => {
      if (ack > (this.acked.get(workflowId) ?? 0)) this.acked.set(workflowId, ack);
    });
    wf.setHandler(sliceActiveSignal, ({ workflowId }) => {
      if (this.liveSlices.has(workflowId)) this.activeSlices.add(workflowId);
    });
  }

  /**
   * Tell the running slices the rollout's pause/abort state; compensation is never held. With `ack` (a
   * control update) it resolves once every live slice answered (forwardAcked); without, once every
   * running slice has the signal in its history (a slice that is gone counts as told).
   */
  forwardControls(ack = false): Promise<void> {
    if (this.model.phaseName === 'rollback') return Promise.resolve();
    const c = { paused: this.model.paused, stop: this.model.stopped };
    if (ack) return this.forwardAcked(c);
    const sent: Promise<void>[] = [];
    for (const slice of this.liveSlices.values()) sent.push(this.control(slice, c));
    return Promise.all(sent).then(() => undefined);
  }

  /**
   * SLICE_CONTROL_ACK: the control goes out numbered, and this resolves once every live slice has
   * answered that number (a slice that is gone, or was started with the new state, counts as having
   * answered; at most CONTROL_ACK_TIMEOUT, so a starved slice cannot hold the operator's command).
   */
  private async forwardAcked(c: { paused: boolean; stop: boolean }): Promise<void> {
    const seq = ++this.controlSeq;
    for (const slice of this.liveSlices.values()) void this.control(slice, { ...c, ack: seq });
    const live = () => [...this.liveSlices.keys()];
    await wf.condition(
      () => this.starting === 0 && live().every((id) => (this.acked.get(id) ?? 0) >= seq),
      CONTROL_ACK_TIMEOUT,
    );
  }

  private control(
    slice: wf.ChildWorkflowHandle<typeof rolloutSliceWorkflow>,
    c: { paused: boolean; stop: boolean; ack?: number },
  ): Promise<void> {
    // A slice that cannot be signalled has closed: nothing of it can start, so it has answered.
    return slice.signal(sliceControlSignal, c).catch(() => {
      if (c.ack !== undefined) this.acked.set(slice.workflowId, Math.max(this.acked.get(slice.workflowId) ?? 0, c.ack));
    });
  }

  settled(): Promise<unknown> {
    return Promise.all(this.background);
  }

  private options(mode: 'apply' | 'rollback', phaseName: string, phaseIndex?: number): DeviceRunOptions {
    const { spec } = this.input;
    return {
      mode,
      steps: this.stepsFor(mode),
      provable: mode === 'apply' ? this.input.provable : true,
      limits: Object.fromEntries((this.model.plan?.pools ?? []).map((p) => [p.pool, p.maxInFlight])),
      applyTimeoutMs: spec.applyTimeout,
      offline: spec.offline,
      ...(spec.window ? { window: spec.window } : {}),
      phaseName,
      ...(phaseIndex !== undefined ? { phaseIndex } : {}),
      ...(spec.requireReceipts ? { requireReceipts: true } : {}),
      failurePolicy: { maxFailureRatio: spec.maxFailureRatio, minSample: spec.minSample },
      ...(mode === 'apply' && this.offlineAtApply ? { reportOffline: true } : {}),
      ...(mode === 'apply' && this.aheadAbove !== undefined ? { aheadAbove: this.aheadAbove } : {}),
    };
  }

  /**
   * The steps a device runs, with what they ask of its floor (FLOOR_AT_APPLY): an apply raises it once
   * confirmed, tagged with this rollout and run (a revert: to its target with no way back, allowed below
   * the floor of the rollout it reverts); a rollback is this run's compensation.
   */
  private stepsFor(mode: 'apply' | 'rollback'): RevisionSteps {
    const steps = mode === 'apply' ? this.input.steps : this.input.rollbackSteps;
    const { workflowId: rollout, runId: run } = wf.workflowInfo();
    const { spec, reverts } = this.input;
    let floor: FloorIntent;
    if (mode === 'rollback') floor = { rollout, run, below: { kind: 'compensation', rollout, run } };
    else if (reverts) {
      floor = {
        rollout,
        run,
        raise: { from: spec.toRevision, windowMs: 0 },
        ...(reverts.closedAt !== undefined
          ? { below: { kind: 'revert', rollout: reverts.rolloutId, run: reverts.runId, closedAt: reverts.closedAt } }
          : {}),
      };
    } else
      floor = {
        rollout,
        run,
        raise: { from: spec.fromRevision, windowMs: spec.revertWindow ?? DEFAULT_REVERT_WINDOW_MS },
      };
    return { ...steps, floor };
  }

  private hooks(mode: 'apply' | 'rollback') {
    const setState = (id: string, state: DeviceState, reason?: string, proof?: DeviceProof) => {
      this.model.setDevice(id, state, reason, proof);
      // A device that starts waiting for a dependency (or gives the wait up) then sits still for 15 s or
      // more: shown at once, not at the next change the throttle lets through.
      refreshDetails(this.model, state === 'waiting' || state === 'pending');
    };
    // Compensation is never held by a pause: it is what an operator's abort or a failed gate asked for.
    return mode === 'apply'
      ? { setState, isPaused: () => this.model.paused, isStopped: () => this.model.stopped }
      : { setState, isPaused: () => false, isStopped: () => false };
  }

  /**
   * Not `async`, on purpose: each path's promise reaches the caller after as many microtask turns as when
   * the three were one async method. Coroutines resumed by the same activation emit their commands in
   * the order those turns give, so a turn more or less could reorder a recorded history's commands.
   */
  run(
    batch: DeviceSnapshot[],
    mode: 'apply' | 'rollback',
    phaseName: string,
    phaseIndex?: number,
  ): Promise<BatchResult> {
    const opts = this.options(mode, phaseName, phaseIndex);
    if (batch.length <= this.sliceSize) return this.runInline(batch, mode, opts);
    // An async method returning runOverlapping's promise, as `run` was: one turn after it resolves.
    wf.deprecatePatch(OVERLAPPING_SLICES);
    return (async () => this.runOverlapping(namedSlices(batch, this.sliceSize, this.model), mode, phaseName, opts))();
  }

  /** Slices that load their own devices (a sliced phase of sliced records, or their compensation). */
  runSlices(
    slices: SliceRun,
    mode: 'apply' | 'rollback',
    phaseName: string,
    phaseIndex?: number,
  ): Promise<BatchResult> {
    const opts = this.options(mode, phaseName, phaseIndex);
    return this.runOverlapping(slices, mode, phaseName, opts);
  }

  private async runInline(
    batch: DeviceSnapshot[],
    mode: 'apply' | 'rollback',
    opts: DeviceRunOptions,
  ): Promise<BatchResult> {
    const result = await runDevices(batch, opts, this.hooks(mode));
    this.background.push(result.background);
    refreshDetails(this.model, true);
    return result;
  }

  /**
   * The phase's slices as a chain (workflows/slice-link.ts): the first holds the budget, each later one
   * is started once the one before it holds the budget, waits for its handoff, and so starts devices as
   * soon as slots free up. Typically two or three slices live at a time (at most the in-flight
   * budget + 2: a slice lives while a device of its own or of one before it runs), so every history stays bounded. A stop
   * (abort, or a slice's tripped failure gate) starts no more slices and stops the ones waiting.
   */
  private async runOverlapping(
    slices: SliceRun,
    mode: 'apply' | 'rollback',
    phaseName: string,
    opts: DeviceRunOptions,
  ): Promise<BatchResult> {
    const run8 = wf.workflowInfo().runId.slice(0, 8);
    const model = this.model;
    const { count } = slices;
    const idOf = (k: number) => `${this.input.rolloutId}/${run8}/${mode}-${phaseName.replace(/\s+/g, '_')}-${k}`;
    const results: Array<SliceResult | undefined> = [];
    const ended: Array<Promise<void>> = [];
    let tripped = false;
    const closing = () => tripped || (mode === 'apply' && model.stopped);
    const applyResult = (result: SliceResult, workflowId: string) => {
      slices.ended(workflowId, result);
      // One details refresh per slice: per device, it would rebuild the table over the whole fleet.
      refreshDetails(model, true);
      if (result.tripped && !tripped) {
        tripped = true;
        // Nobody starts after a tripped failure gate: the slices still waiting for the budget stop.
        for (const slice of this.liveSlices.values())
          void this.control(slice, { paused: mode === 'apply' && model.paused, stop: true });
      }
    };
    const start = async (k: number) => {
      const size = slices.size(k);
      const paused = mode === 'apply' && model.paused;
      const seqAtStart = this.controlSeq;
      this.starting++;
      let handle: wf.ChildWorkflowHandle<typeof rolloutSliceWorkflow>;
      try {
        handle = await wf.startChild(rolloutSliceWorkflow, {
          workflowId: idOf(k),
          args: [
            {
              ...slices.input(k),
              options: opts,
              tallyBefore: { succeeded: 0, failed: 0 },
              paused,
              link: { index: k, holding: k === 0, last: k === count - 1 },
            },
          ],
          staticSummary: `${mode} ${phaseName}: slice ${k + 1} of ${count} (${size} devices), overlapping`,
        });
      } finally {
        this.starting--;
      }
      this.liveSlices.set(handle.workflowId, handle);
      slices.started(k, handle.workflowId);
      // A control that came while the child was being started has not reached it yet (numbered: the
      // update waiting for it counts this slice too). Otherwise its input already has the state.
      if (mode === 'apply' && (model.paused !== paused || model.stopped))
        void this.control(handle, {
          paused: model.paused,
          stop: model.stopped,
          ...(this.controlSeq > seqAtStart ? { ack: this.controlSeq } : {}),
        });
      else this.acked.set(handle.workflowId, this.controlSeq);
      if (tripped) void this.control(handle, { paused, stop: true });
      ended[k] = handle.result().then((result) => {
        this.liveSlices.delete(handle.workflowId);
        this.activeSlices.delete(handle.workflowId);
        results[k] = result;
        applyResult(result, handle.workflowId);
      });
      ended[k]!.catch(() => {}); // awaited below; a cancel must not leave it unhandled meanwhile
      return handle;
    };
    try {
      let previous = await start(0);
      let startedCount = 1;
      for (let k = 1; k < count; k++) {
        // Slice k is started once slice k-1 holds the budget (slice 1 at once: slice 0 holds it from its start).
        if (k >= 2)
          await wf.condition(() => closing() || this.activeSlices.has(idOf(k - 1)) || results[k - 1] !== undefined);
        if (closing() || results[k - 1] !== undefined) break;
        const next = await start(k);
        void previous.signal(sliceSuccessorSignal, { workflowId: next.workflowId }).catch(() => {});
        previous = next;
        startedCount += 1;
      }
      // No successor will come after the last slice started: it may end without handing off.
      if (startedCount < count) void previous.signal(sliceSuccessorSignal, { workflowId: null }).catch(() => {});
      await Promise.all(ended);
    } finally {
      this.liveSlices.clear();
      this.activeSlices.clear();
    }
    const total: BatchResult = { tally: { succeeded: 0, failed: 0 }, tripped, started: [] };
    for (const result of results) {
      if (!result) continue;
      total.tally.succeeded += result.tally.succeeded;
      total.tally.failed += result.tally.failed;
      total.started.push(...result.started);
    }
    return total;
  }
}
