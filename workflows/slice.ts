import * as wf from '@temporalio/workflow';
import type { FailureTally } from '../core/failure-gate';
import type { DeviceSnapshot, DeviceState } from '../core/rollout-state';
import { runDevices, type DeviceRunOptions } from './device-runner';
import { sliceControlAckSignal, sliceControlSignal } from '../contracts/rollout';
import { SliceLink, type SliceLinkInput } from './slice-link';

/** A slice answers a numbered control (`ack`) with `sliceControlAck` to its parent. */
export const SLICE_CONTROL_ACK = 'slice-control-ack';

export interface SliceInput {
  devices: DeviceSnapshot[];
  options: DeviceRunOptions;
  /** The phase's tally before this slice: the failure gate is over the whole phase. */
  tallyBefore: FailureTally;
  paused: boolean;
  /** Its place in the phase's chain of overlapping slices sharing the budgets (slice-link.ts). */
  link: SliceLinkInput;
}

export interface SliceResult {
  /** Final state of each device: [id, state, reason]. Compact: a slice result crosses history. */
  devices: Array<[string, DeviceState, string | undefined]>;
  tally: FailureTally;
  tripped: boolean;
  started: string[];
}

/**
 * One slice of a large phase, as a child workflow, so no execution's history or pending activities grow
 * with the fleet. The parent forwards pause and abort through `sliceControl`.
 */
export async function rolloutSliceWorkflow(input: SliceInput): Promise<SliceResult> {
  let paused = input.paused;
  let stopped = false;
  wf.setHandler(sliceControlSignal, (c) => {
    paused = c.paused;
    stopped = c.stop;
    // The parent's control update answers once every live slice says it holds the new state: from this
    // workflow task on, no device of this slice starts on the old one (SLICE_CONTROL_ACK).
    const parent = wf.workflowInfo().parent;
    if (c.ack !== undefined && parent) {
      wf.deprecatePatch(SLICE_CONTROL_ACK);
      void wf
        .getExternalWorkflowHandle(parent.workflowId, parent.runId)
        .signal(sliceControlAckSignal, { workflowId: wf.workflowInfo().workflowId, ack: c.ack })
        .catch(() => {});
    }
  });
  const states = new Map<string, [DeviceState, string | undefined]>();
  for (const d of input.devices) states.set(d.id, ['pending', undefined]);
  // A slice of a chain shares the phase's budget with the slices before and after it (slice-link.ts).
  const link = new SliceLink(input.link, input.options.limits);
  const result = await runDevices(
    input.devices,
    input.options,
    {
      setState: (id, state, reason) => states.set(id, [state, reason]),
      isPaused: () => paused,
      isStopped: () => stopped,
      budget: link.budget,
      onQueueEmpty: () => link.queueEmpty(),
      onEnded: (pool: string, counted: 'succeeded' | 'failed' | undefined) => link.ended(pool, counted),
    },
    input.tallyBefore,
  );
  await result.background;
  await link.settled(() => stopped || result.tripped);
  return {
    devices: [...states].map(([id, [state, reason]]) => [id, state, reason]),
    tally: result.tally,
    tripped: result.tripped,
    started: result.started,
  };
}
