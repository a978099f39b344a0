import * as wf from '@temporalio/workflow';
import type { FailureTally } from '../core/failure-gate';
import type { Counts, DeviceProof, DeviceSnapshot, DeviceState } from '../core/rollout-state';
import { countDevices } from '../core/rollout-state';
import { plannedState } from '../core/rollout/sliced-plan';
import { runDevices, type DeviceRunOptions } from './device-runner';
import { sliceControlAckSignal, sliceControlSignal, sliceRecordsQuery } from '../contracts/rollout';
import type { SliceDevicesInput } from '../activities/sliced-records';
import { sliceDevices, sliceTouched } from './activity-proxies';
import { AuditTrail } from './audit-trail';
import { SliceLink, type SliceLinkInput } from './slice-link';

/** A slice answers a numbered control (`ack`) with `sliceControlAck` to its parent. */
export const SLICE_CONTROL_ACK = 'slice-control-ack';

/** Devices per `devices.outcome` record of a slice's own trail. */
const OUTCOME_CHUNK = 500;

/**
 * Where a slice of sliced records (core/rollout/sliced-plan.ts) gets its devices: a slice of the plan
 * the parent adopted, or (a rollback) the devices an apply slice started, last started first.
 */
export type SliceSource = { plan: SliceDevicesInput } | { undo: { workflowId: string } };

export interface SliceInput {
  /** The devices, given by the parent (absent with `source`: the slice loads them). */
  devices?: DeviceSnapshot[];
  /** Sliced records: the slice loads its devices, keeps their records and its own audit trail, and answers with counts. */
  source?: SliceSource;
  options: DeviceRunOptions;
  /** The phase's tally before this slice: the failure gate is over the whole phase. */
  tallyBefore: FailureTally;
  paused: boolean;
  /** Its place in the phase's chain of overlapping slices sharing the budgets (slice-link.ts). */
  link: SliceLinkInput;
}

/** What a slice of sliced records answers its parent: counts only, and where its records are. */
export interface SliceCounts {
  /** Every device of the slice by state (non-best-effort ones also in `required`). */
  counts: Counts;
  /** Devices that are not best-effort, by state (what a deadline waits for). */
  required: Counts;
  /** How many it started (what compensation puts back). */
  started: number;
  /** Its own audit trail: the slice's workflow id and the last record written. */
  trail: { id: string; head: { seq: number; hash: string } | null };
  /** A rollback slice: the states its devices had in the apply slice it undid (its own counts replace them). */
  replaced?: { counts: Counts; required: Counts };
}

export interface SliceResult {
  /** Final state of each device: [id, state, reason]. Compact: a slice result crosses history. Empty with `records`. */
  /** Each device's state and reason, and the receipt its answer carried (absent in results recorded before receipts). */
  devices: Array<[string, DeviceState, string | undefined, DeviceProof?]>;
  tally: FailureTally;
  tripped: boolean;
  /** Started ids in start order; empty with `records` (the slice's `sliceRecords` query has them). */
  started: string[];
  /** Sliced records: the counts, in place of `devices` and `started`. */
  records?: SliceCounts;
}

/**
 * One slice of a large phase, as a child workflow, so no execution's history or pending activities grow
 * with the fleet. The parent forwards pause and abort through `sliceControl`. With sliced records the
 * slice also loads its own devices and is where their records live (query `sliceRecords`, its own audit
 * trail); the parent learns counts.
 */
export async function rolloutSliceWorkflow(input: SliceInput): Promise<SliceResult> {
  let paused = input.paused;
  let stopped = false;
  let auditHold: string | undefined;
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
  const loaded = input.devices ? { devices: input.devices } : await loadDevices(input.source!);
  const { devices } = loaded;
  const states = new Map<string, [DeviceState, string | undefined, DeviceProof?]>();
  let runnable = devices;
  if (input.source && 'plan' in input.source) {
    // Devices the snapshot found refused or offline start where the parent's model would start them.
    runnable = [];
    for (const d of devices) {
      const first = plannedState(d, input.options.offline);
      states.set(d.id, [first.state, first.reason]);
      if (first.state === 'pending') runnable.push(d);
    }
  } else for (const d of devices) states.set(d.id, ['pending', undefined]);
  // Sliced records: the slice's own trail (a record that cannot be written holds new starts, as the parent's does).
  let head: { seq: number; hash: string } | null = null;
  const trail = input.source
    ? new AuditTrail(wf.workflowInfo().workflowId, {
        onHead: (h) => (head = h),
        onHold: (reason) => (auditHold = reason),
      })
    : undefined;
  let started: string[] = [];
  if (input.source)
    wf.setHandler(sliceRecordsQuery, () => ({
      devices,
      states: [...states].map(([id, [state, reason, proof]]) =>
        proof ? [id, state, reason, true as const] : [id, state, reason],
      ),
      started,
    }));
  // A slice of a chain shares the phase's budget with the slices before and after it (slice-link.ts).
  const link = new SliceLink(input.link, input.options.limits);
  const result = await runDevices(
    runnable,
    input.options,
    {
      setState: (id, state, reason, proof) => states.set(id, proof ? [state, reason, proof] : [state, reason]),
      isPaused: () => paused || auditHold !== undefined,
      isStopped: () => stopped,
      budget: link.budget,
      onQueueEmpty: () => link.queueEmpty(),
      onEnded: (pool: string, counted: 'succeeded' | 'failed' | undefined) => link.ended(pool, counted),
    },
    input.tallyBefore,
  );
  started = result.started;
  await result.background;
  await link.settled(() => stopped || result.tripped);
  if (!trail)
    return {
      devices: [...states].map(([id, [state, reason, proof]]) =>
        proof ? [id, state, reason, proof] : [id, state, reason],
      ),
      tally: result.tally,
      tripped: result.tripped,
      started: result.started,
    };
  return { devices: [], tally: result.tally, tripped: result.tripped, started: [], records: await record(trail) };

  /** Every device's outcome into the slice's own trail, then the counts and the trail's head. */
  async function record(own: AuditTrail): Promise<SliceCounts> {
    const bestEffort = new Set(devices.filter((d) => d.updateClass === 'best-effort').map((d) => d.id));
    const all = [...states].map(([id, [state, reason, proof]]) => ({
      id,
      state,
      ...(reason ? { reason } : {}),
      ...(proof ? { receipt: proof.receipt, request: proof.request } : {}),
      ...(proof && input.options.phaseIndex !== undefined ? { phaseIndex: input.options.phaseIndex } : {}),
    }));
    const counts = countDevices(all);
    const required = countDevices(all.filter((d) => !bestEffort.has(d.id)));
    // A rollback: the states its devices had in the apply slice, which these replace in the parent's counts.
    const before = loaded.replaced?.map(([id, state]) => ({ id, state }));
    const replaced = before && {
      counts: countDevices(before),
      required: countDevices(before.filter((d) => !bestEffort.has(d.id))),
    };
    for (let i = 0; i < all.length; i += OUTCOME_CHUNK)
      void own.append('devices.outcome', {
        phase: input.options.phaseName,
        counts: { ...counts },
        evidence: { mode: input.options.mode, devices: all.slice(i, i + OUTCOME_CHUNK) },
      });
    await own.drained();
    return {
      counts,
      required,
      started: started.length,
      trail: { id: wf.workflowInfo().workflowId, head },
      ...(replaced ? { replaced } : {}),
    };
  }
}

/** A sliced-records slice's devices: its part of the plan, or the devices an apply slice started, last first. */
async function loadDevices(
  source: SliceSource,
): Promise<{ devices: DeviceSnapshot[]; replaced?: Array<[string, DeviceState, string | undefined, true?]> }> {
  if ('plan' in source)
    return {
      devices: await sliceDevices.executeWithOptions({ summary: `devices of slice ${source.plan.slice + 1}` }, [
        source.plan,
      ]),
    };
  const touched = await sliceTouched.executeWithOptions({ summary: `devices ${source.undo.workflowId} started` }, [
    source.undo,
  ]);
  return { devices: touched.devices.reverse(), replaced: touched.states };
}
