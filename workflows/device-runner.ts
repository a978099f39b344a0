import * as wf from '@temporalio/workflow';
import { failureGateTripped, type FailureTally } from '../core/failure-gate';
import {
  answerPatchAsked,
  deviceOutcome,
  runStates,
  waitGivenUpReason,
  type AnswerReading,
  type ApplyAnswer,
  type DeviceOutcome,
} from '../core/rollout/device-outcome';
import type { DeviceProof, DeviceSnapshot, DeviceState } from '../core/rollout-state';
import { msUntilWindowOpens, type MaintenanceWindow } from '../core/window';
import type { SharedBudget } from '../core/rollout/shared-budget';
import type * as activities from '../activities';
import { applyRevisionActivity } from './activity-proxies';
import { DeviceQueue } from './device-queue';

/** How a batch of devices is driven: shared by the rollout workflow and its slice children. */
export interface DeviceRunOptions {
  mode: 'apply' | 'rollback';
  steps: activities.RevisionSteps;
  /** A non-provable revision can only ever reach `claimed`: its verify cannot read the fact back. */
  provable: boolean;
  /** In-flight limit per pool: max(1, floor(pool size × budget)). */
  limits: Record<string, number>;
  applyTimeoutMs: number;
  offline: 'skip' | 'wait' | 'fail';
  window?: MaintenanceWindow;
  phaseName: string;
  /** The phase's index (absent for a compensation): each apply's request names it, and so does the device's receipt. */
  phaseIndex?: number;
  /** The spec's `requireReceipts`: an answer without the device's verified receipt is not done (core/rollout/device-outcome.ts). */
  requireReceipts?: boolean;
  failurePolicy: { maxFailureRatio: number; minSample: number };
  /** New executions (patch `offline-at-apply`): an unreachable device answers `offline` instead of retrying. */
  reportOffline?: boolean;
  /** A device whose marker is above this is ahead of the rollout: it answers `ahead`, nothing runs, and it is not-for-me. */
  aheadAbove?: number;
}

export interface DeviceRunHooks {
  /** `proof`: the receipt the answer carried (none: the state is the control plane's word alone). */
  setState(id: string, state: DeviceState, reason?: string, proof?: DeviceProof): void;
  /** Pause holds new starts; in-flight devices finish. */
  isPaused(): boolean;
  /** Abort (or cancel) stops new starts. */
  isStopped(): boolean;
  /**
   * Overlapping slices (workflows/slice-link.ts): the pools' budget shared along the phase's chain of
   * slices, in place of this run's own in-flight count, with the tally of devices that ended earlier in it.
   */
  budget?: SharedBudget;
  /** Every device of this run has started (none left to start or waiting): a slice hands the budget on. */
  onQueueEmpty?(): void;
  /** A device's apply ended and freed its slot; `counted` is how it counts for the failure gate. */
  onEnded?(pool: string, counted: 'succeeded' | 'failed' | undefined): void;
}

export interface DeviceRunResult {
  tally: FailureTally;
  /** The failure gate tripped: no device started after it did. */
  tripped: boolean;
  /** Ids whose apply (or rollback) was started, in start order: what compensation must undo. */
  started: string[];
  /** Best-effort devices still running: never awaited by a gate. */
  background: Promise<void>;
}

/**
 * What a batch (inline, or over slices) answers the rollout: a run's result without its background
 * devices (`started` names none of a slice that keeps its records: the slice has them).
 */
export type BatchResult = Pick<DeviceRunResult, 'tally' | 'tripped' | 'started'>;

function applyProxy(opts: DeviceRunOptions) {
  return applyRevisionActivity({
    applyTimeoutMs: opts.applyTimeoutMs,
    waitForOffline: opts.offline === 'wait' && opts.mode === 'apply',
  });
}

/** New executions leave a device refused before any command ran out of compensation (never "rolled back"). */
export const REFUSED_DEVICES_UNTOUCHED = 'refused-devices-untouched';

/**
 * New executions of a rollout with `after` send a device whose dependency is unmet to `waiting` (its slot
 * freed) and retry it after a backoff, instead of reading the outcome as applied.
 */
export const PROFILE_ORDERING = 'profile-ordering';

/**
 * New executions leave a device whose verify first found the revision in place out of compensation (and
 * so out of a revert): nothing ran there, so there is nothing of this rollout's to put back.
 */
export const IN_PLACE_UNTOUCHED = 'in-place-untouched';

/** The type of the first ApplicationFailure in a failure chain, if any. */
function failureType(err: unknown): string | undefined {
  for (
    let current = err as { cause?: unknown; type?: unknown } | undefined;
    current;
    current = current.cause as typeof current
  ) {
    if (typeof current.type === 'string' && current.type) return current.type;
  }
  return undefined;
}

/** The innermost message of a failure chain (ActivityFailure → ApplicationFailure → ...). */
export function rootMessage(err: unknown): string {
  let current = err as { cause?: unknown; message?: string } | undefined;
  while (current?.cause) current = current.cause as typeof current;
  return current?.message ?? String(err);
}

/** The receipt an answer carried: on a result, or in a failure's details (activities/apply.ts). */
function carriedProof(carrier: { receipt?: unknown; request?: unknown } | undefined): DeviceProof | undefined {
  return typeof carrier?.receipt === 'string' && typeof carrier.request === 'string'
    ? { receipt: carrier.receipt, request: carrier.request }
    : undefined;
}

/** The details of the first ApplicationFailure in a failure chain that has any. */
function failureDetails(err: unknown): unknown[] | undefined {
  for (
    let current = err as { cause?: unknown; details?: unknown } | undefined;
    current;
    current = current.cause as typeof current
  )
    if (Array.isArray(current.details) && current.details.length) return current.details;
  return undefined;
}

/** What an apply answered, as core/rollout/device-outcome.ts reads it. */
function answered(result: activities.ApplyResult): ApplyAnswer {
  return {
    kind: 'answered',
    outcome: result.outcome,
    // Proven only with what the trail needs to check it again: the receipt and the request it answers.
    ...(carriedProof(result) ? { proven: true } : {}),
    ...(result.receiptProblem !== undefined ? { receiptProblem: result.receiptProblem } : {}),
    ...(result.detail !== undefined ? { detail: result.detail } : {}),
    ...(result.unmet ? { unmet: result.unmet } : {}),
  };
}

/** An apply that failed (not cancelled): its failure's type and innermost message. */
function failedAnswer(err: unknown): ApplyAnswer {
  const type = failureType(err);
  return { kind: 'failed', ...(type ? { failureType: type } : {}), message: rootMessage(err) };
}

/**
 * Start devices in order while their pool's budget has room (pause holds, abort or a tripped failure
 * gate stops new starts), each one verify-first → apply → verify → marker. Required devices are awaited;
 * best-effort ones run in the background and never count toward the failure gate. A device that does
 * not yet verify a profile the rollout waits for (`after`) frees its slot, waits (state `waiting`) and is
 * tried again after a backoff, while the others go on. What each answer means is decided in
 * core/rollout/device-outcome.ts; the bookkeeping is a DeviceQueue's, each device's run a DeviceRun's.
 */
export async function runDevices(
  devices: DeviceSnapshot[],
  opts: DeviceRunOptions,
  hooks: DeviceRunHooks,
  tallyBefore: FailureTally = { succeeded: 0, failed: 0 },
): Promise<DeviceRunResult> {
  const run = new DeviceRun(devices, opts, hooks, tallyBefore);
  const { queue } = run;
  while (queue.hasPending()) {
    await wf.condition(() => run.halted() || (!hooks.isPaused() && queue.canStartOne()));
    if (run.halted()) break;
    if (opts.window) {
      const wait = msUntilWindowOpens(Date.now(), opts.window);
      if (wait > 0) {
        await wf.sleep(wait, { summary: `wait for maintenance window (${opts.phaseName})` });
        continue; // re-check pause, abort and budget after sleeping
      }
    }
    run.start(queue.takeNext());
  }
  run.loopEnded();
  // The loop, the waits and each device's attempts keep the promise turns they had as one closure: coroutines
  // resumed in one activation emit their commands in the order those turns give.
  await run.requiredEnded();
  return run.result();
}

/**
 * One run of devices (runDevices): its queue, its tally as the failure gate reads it, and each device's
 * attempts, waits and retries.
 */
class DeviceRun {
  readonly queue: DeviceQueue;
  private readonly apply: ReturnType<typeof applyProxy>;
  private readonly reading: AnswerReading;
  /** The state a device is in while its apply (or rollback) runs. */
  private readonly busy: DeviceState;
  private readonly verb: 'apply' | 'rollback';
  private readonly required: Promise<void>[] = [];
  private readonly background: Promise<void>[] = [];
  private tripped = false;
  /** Every device has been taken from the queue (or the run halted). */
  private loopDone = false;
  private drainedSaid = false;

  constructor(
    devices: DeviceSnapshot[],
    private readonly opts: DeviceRunOptions,
    private readonly hooks: DeviceRunHooks,
    private readonly tallyBefore: FailureTally,
  ) {
    this.apply = applyProxy(opts);
    this.queue = new DeviceQueue(devices, opts.limits, hooks.budget);
    this.reading = {
      mode: opts.mode,
      provable: opts.provable,
      offline: opts.offline,
      reportOffline: opts.reportOffline === true,
      aheadAtApply: opts.aheadAbove !== undefined,
      ...(opts.steps.after ? { after: opts.steps.after } : {}),
      ...(opts.requireReceipts ? { requireReceipts: true } : {}),
    };
    this.verb = opts.mode === 'apply' ? 'apply' : 'rollback';
    this.busy = runStates(opts).busy;
  }

  /** The phase's tally as this run sees it: earlier runs (tallyBefore, or the chain's), then its own. */
  private phaseTally(): FailureTally {
    const earlier = this.hooks.budget?.earlierTally() ?? { succeeded: 0, failed: 0 };
    return {
      succeeded: this.tallyBefore.succeeded + earlier.succeeded + this.queue.tally.succeeded,
      failed: this.tallyBefore.failed + earlier.failed + this.queue.tally.failed,
    };
  }

  /** In a chain of slices, devices of earlier slices end while this one runs: their failures trip the gate here too. */
  private trippedUpChain(): boolean {
    return (
      this.hooks.budget !== undefined &&
      this.opts.mode === 'apply' &&
      failureGateTripped(this.phaseTally(), this.opts.failurePolicy, false)
    );
  }

  /** No new device starts: stopped, or the failure gate tripped (here or up the chain). */
  halted(): boolean {
    if (this.hooks.isStopped() || this.tripped) return true;
    if (this.trippedUpChain()) this.tripped = true;
    return this.tripped;
  }

  /** Once every device has started and none is left to start or waiting: the hook, once (a slice hands the budget on). */
  private maybeDrained(): void {
    if (this.drainedSaid || !this.loopDone || !this.queue.drained() || this.halted()) return;
    this.drainedSaid = true;
    this.hooks.onQueueEmpty?.();
  }

  /** A device taken from the queue starts: awaited at the end if required, in the background if best-effort. */
  start(device: DeviceSnapshot): void {
    const run = this.runOne(device);
    (device.updateClass === 'best-effort' ? this.background : this.required).push(run);
  }

  loopEnded(): void {
    this.loopDone = true;
    this.maybeDrained();
  }

  requiredEnded(): Promise<unknown> {
    return Promise.all(this.required);
  }

  result(): DeviceRunResult {
    const { opts } = this;
    return {
      tally: this.queue.tally,
      tripped:
        this.tripped || (opts.mode === 'apply' && failureGateTripped(this.phaseTally(), opts.failurePolicy, true)),
      started: this.queue.started(),
      background: Promise.all(this.background).then(() => undefined),
    };
  }

  /** One device's attempts: again after each dependency wait, until it ends or the wait is given up. */
  private async runOne(device: DeviceSnapshot): Promise<void> {
    try {
      for (let attemptNo = 1; ; attemptNo++) {
        const outcome = await this.attempt(device, attemptNo);
        if (outcome.retryAfterMs === undefined) return;
        this.queue.waitBegins();
        let again: boolean;
        try {
          again = await this.retryAfterWait(device, outcome.reason ?? '', outcome.retryAfterMs);
        } finally {
          // Synchronously before the retry's attempt takes its slot: no drained check can run in between.
          this.queue.waitEnds();
        }
        if (!again) return;
      }
    } finally {
      this.maybeDrained();
    }
  }

  /** One apply activity, and what its answer means, applied: the device's state, its slot, its count. */
  private async attempt(device: DeviceSnapshot, attemptNo: number): Promise<DeviceOutcome> {
    const { opts } = this;
    this.queue.begin(device);
    this.hooks.setState(device.id, this.busy);
    let answer: ApplyAnswer;
    let cancellation: unknown;
    let proof: DeviceProof | undefined;
    try {
      const result = await this.apply.executeWithOptions(
        { summary: `${this.verb} r${opts.steps.revision} → ${device.id} (${opts.phaseName})` },
        [
          {
            device,
            steps: opts.steps,
            commandTimeoutMs: opts.applyTimeoutMs,
            ...(opts.reportOffline ? { reportOffline: true } : {}),
            ...(opts.aheadAbove !== undefined ? { aheadAbove: opts.aheadAbove } : {}),
            ...(opts.phaseIndex !== undefined ? { phase: opts.phaseIndex } : {}),
          },
        ],
      );
      answer = answered(result);
      proof = carriedProof(result);
    } catch (err) {
      if (wf.isCancellation(err)) {
        cancellation = err;
        answer = { kind: 'cancelled' };
      } else {
        answer = failedAnswer(err);
        proof = carriedProof(failureDetails(err)?.[0] as { receipt?: unknown } | undefined);
      }
    }
    const outcome = this.settle(device, answer, attemptNo, proof);
    if (outcome.cancelled) throw cancellation;
    if (outcome.readsGate && failureGateTripped(this.phaseTally(), opts.failurePolicy, false)) this.tripped = true;
    return outcome;
  }

  /** What the answer means for the device (its state, its slot, how it counts), applied at once. */
  private settle(device: DeviceSnapshot, answer: ApplyAnswer, attemptNo: number, proof?: DeviceProof): DeviceOutcome {
    // Each retired patch's deprecated marker where the runner asked it (the SDK records it once per execution).
    const asked = answerPatchAsked(answer, this.reading);
    if (asked === 'refusedUntouched') wf.deprecatePatch(REFUSED_DEVICES_UNTOUCHED);
    else if (asked === 'profileOrdering') wf.deprecatePatch(PROFILE_ORDERING);
    else if (asked === 'inPlaceUntouched') wf.deprecatePatch(IN_PLACE_UNTOUCHED);
    const outcome = deviceOutcome(
      answer,
      { bestEffort: device.updateClass === 'best-effort', attempt: attemptNo },
      this.reading,
    );
    this.hooks.setState(device.id, outcome.state, outcome.reason, proof);
    this.queue.settle(device, outcome);
    this.hooks.onEnded?.(device.pool, outcome.counted);
    return outcome;
  }

  /**
   * Whether a waiting device may try again: after its backoff, once its pool has room, the rollout is not
   * paused and the maintenance window is open. A stop (abort, cancel, a tripped failure gate) ends the
   * wait: the device never started, so it goes back to pending for the rollout's own skip.
   */
  private async retryAfterWait(device: DeviceSnapshot, waitingFor: string, backoffMs: number): Promise<boolean> {
    const { opts, hooks, queue } = this;
    const halted = () => this.halted();
    const giveUp = () => {
      hooks.setState(device.id, 'pending', waitGivenUpReason(waitingFor));
      return false;
    };
    try {
      if (await wf.condition(halted, backoffMs)) return giveUp();
      for (;;) {
        await wf.condition(() => halted() || (!hooks.isPaused() && queue.room(device)));
        if (halted()) return giveUp();
        const closed = opts.window ? msUntilWindowOpens(Date.now(), opts.window) : 0;
        if (closed <= 0) return true;
        if (await wf.condition(halted, closed)) return giveUp();
      }
    } catch (err) {
      if (wf.isCancellation(err)) giveUp();
      throw err;
    }
  }
}
