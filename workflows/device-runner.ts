import * as wf from '@temporalio/workflow';
import { dependencyBackoffMs, waitingReason, type Dependency } from '../core/dependencies';
import { failureGateTripped, type FailureTally } from '../core/failure-gate';
import { ownValue } from '../core/own-keys';
import { NOT_FOR_ME } from '../core/rollout/outcome';
import { IN_PLACE_REASON } from '../core/rollout/revert';
import type { DeviceSnapshot, DeviceState } from '../core/rollout-state';
import { msUntilWindowOpens, type MaintenanceWindow } from '../core/window';
import type { SharedBudget } from '../core/rollout/shared-budget';
import type * as activities from '../activities';

type Acts = ReturnType<typeof activities.createActivities>;

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
  failurePolicy: { maxFailureRatio: number; minSample: number };
  /** New executions (patch `offline-at-apply`): an unreachable device answers `offline` instead of retrying. */
  reportOffline?: boolean;
  /** A device whose marker is above this is ahead of the rollout: it answers `ahead`, nothing runs, and it is not-for-me. */
  aheadAbove?: number;
}

export interface DeviceRunHooks {
  setState(id: string, state: DeviceState, reason?: string): void;
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

function applyProxy(opts: DeviceRunOptions) {
  const waitForOffline = opts.offline === 'wait' && opts.mode === 'apply';
  return wf.proxyActivities<Acts>({
    // `applyTimeout` bounds a device's whole apply, retries included; a device that is offline under
    // `offline: wait` is retried until it runs out.
    startToCloseTimeout: opts.applyTimeoutMs,
    scheduleToCloseTimeout: opts.applyTimeoutMs,
    // A worker that dies mid-apply is noticed after this long and the device's apply is retried on
    // another worker, which reattaches to the apply still running (or finished) under the device's
    // apply lock instead of starting another. The apply heartbeats every second whatever it is doing,
    // after a quiet first 2 s (activities/quiet-heartbeat.ts), so 6 s is four missed beats.
    heartbeatTimeout: '6 seconds',
    // Only the device saying no (and refusals: host key, login, envelope, a lock held by another
    // rollout) is terminal, as non-retryable failures; a lost connection or worker retries until
    // `applyTimeout` runs out, so worker deaths never use up a device's attempts.
    retry: waitForOffline
      ? { initialInterval: '5 seconds', backoffCoefficient: 2, maximumInterval: '1 minute' }
      : { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '30 seconds' },
  }).applyRevision;
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

/** Failures that happen before any command of ours runs on the device (the worker or the device said no first). */
const REFUSED_BEFORE_RUNNING: ReadonlySet<string> = new Set(['EnvelopeRejected', 'ApplyLockHeld', 'Transport.host-key', 'Transport.auth', 'Transport.config']);

/** The type of the first ApplicationFailure in a failure chain, if any. */
function failureType(err: unknown): string | undefined {
  for (let current = err as { cause?: unknown; type?: unknown } | undefined; current; current = current.cause as typeof current) {
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

/**
 * Start devices in order while their pool's budget has room (pause holds, abort or a tripped failure
 * gate stops new starts), each one verify-first → apply → verify → marker. Required devices are awaited;
 * best-effort ones run in the background and never count toward the failure gate. A device that does
 * not yet verify a profile the rollout waits for (`after`) frees its slot, waits (state `waiting`) and is
 * tried again after a backoff, while the others go on.
 */
export async function runDevices(devices: DeviceSnapshot[], opts: DeviceRunOptions, hooks: DeviceRunHooks, tallyBefore: FailureTally = { succeeded: 0, failed: 0 }): Promise<DeviceRunResult> {
  const apply = applyProxy(opts);
  const inFlight = new Map<string, number>();
  const queue = [...devices];
  const tally: FailureTally = { succeeded: 0, failed: 0 };
  const started: string[] = [];
  const untouched = new Set<string>();
  /** IN_PLACE_UNTOUCHED, asked at the first device found in place. */
  let inPlaceUntouched: boolean | undefined;
  const required: Promise<void>[] = [];
  const background: Promise<void>[] = [];
  let tripped = false;
  const verb = opts.mode === 'apply' ? 'apply' : 'rollback';
  const [busy, ok, bad]: DeviceState[] = opts.mode === 'apply' ? ['applying', opts.provable ? 'applied' : 'claimed', 'failed'] : ['rolling-back', 'rolled-back', 'rollback-failed'];

  const { budget } = hooks;
  const room = budget ? (d: DeviceSnapshot) => budget.room(d.pool) : (d: DeviceSnapshot) => (inFlight.get(d.pool) ?? 0) < (ownValue(opts.limits, d.pool) ?? 1);
  /** The phase's tally as this run sees it: earlier runs (tallyBefore, or the chain's), then its own. */
  const phaseTally = (): FailureTally => {
    const earlier = budget?.earlierTally() ?? { succeeded: 0, failed: 0 };
    return { succeeded: tallyBefore.succeeded + earlier.succeeded + tally.succeeded, failed: tallyBefore.failed + earlier.failed + tally.failed };
  };
  // In a chain of slices, devices of earlier slices end while this one runs: their failures trip the gate here too.
  const trippedUpChain = () => budget !== undefined && opts.mode === 'apply' && failureGateTripped(phaseTally(), opts.failurePolicy, false);
  const halted = () => hooks.isStopped() || tripped || (trippedUpChain() && (tripped = true));
  // Devices between a dependency wait and their retry: they may start again, so the run is not drained.
  let waitingNow = 0;
  let loopDone = false;
  let drainedSaid = false;
  const maybeDrained = () => {
    if (drainedSaid || !loopDone || queue.length > 0 || waitingNow > 0 || halted()) return;
    drainedSaid = true;
    hooks.onQueueEmpty?.();
  };

  /** One apply activity; the dependencies it found unmet (nothing ran on the device then), if any. */
  const attempt = async (device: DeviceSnapshot): Promise<{ unmet: Dependency[]; detail?: string } | undefined> => {
    const bestEffort = device.updateClass === 'best-effort';
    inFlight.set(device.pool, (inFlight.get(device.pool) ?? 0) + 1);
    budget?.started(device.pool);
    let counted: 'succeeded' | 'failed' | undefined;
    started.push(device.id);
    hooks.setState(device.id, busy);
    let waiting: { unmet: Dependency[]; detail?: string } | undefined;
    try {
      const result = await apply.executeWithOptions({ summary: `${verb} r${opts.steps.revision} → ${device.id} (${opts.phaseName})` }, [
        { device, steps: opts.steps, commandTimeoutMs: opts.applyTimeoutMs, ...(opts.reportOffline ? { reportOffline: true } : {}), ...(opts.aheadAbove !== undefined ? { aheadAbove: opts.aheadAbove } : {}) },
      ]);
      if (result.outcome === 'offline' && opts.reportOffline) {
        // Unreachable at first contact: nothing ran on it, so it is not changed; the offline policy says
        // whether it is skipped (not counted) or failed (counted).
        started.splice(started.lastIndexOf(device.id), 1);
        const failed = opts.offline === 'fail';
        hooks.setState(device.id, failed ? bad : 'skipped', `offline at apply: ${result.detail ?? 'unreachable'}`);
        if (failed && !bestEffort) {
          tally.failed += 1;
          counted = 'failed';
        }
      } else if (result.outcome === 'ahead' && opts.aheadAbove !== undefined) {
        // Ahead of the rollout (its marker above the target): nothing ran, it is not changed and not
        // counted, as the plan's not-for-me "ahead" rule said when the snapshot read every marker.
        started.splice(started.lastIndexOf(device.id), 1);
        hooks.setState(device.id, 'skipped', `${NOT_FOR_ME} ahead: ${result.detail ?? 'the device is above the target'}`);
      } else if (result.outcome === 'dependency-unmet' && opts.steps.after?.length && wf.patched(PROFILE_ORDERING)) {
        // Nothing ran on the device: it is not changed and not counted, and its slot is free for others.
        started.splice(started.lastIndexOf(device.id), 1);
        waiting = { unmet: result.unmet?.length ? result.unmet : opts.steps.after, ...(result.detail ? { detail: result.detail } : {}) };
        return waiting;
      } else {
        hooks.setState(device.id, ok, result.outcome === 'already-applied' ? IN_PLACE_REASON : undefined);
        if (result.outcome === 'already-applied' && opts.mode === 'apply' && (inPlaceUntouched ??= wf.patched(IN_PLACE_UNTOUCHED))) untouched.add(device.id);
        if (!bestEffort) {
          tally.succeeded += 1;
          counted = 'succeeded';
        }
      }
    } catch (err) {
      if (wf.isCancellation(err)) {
        hooks.setState(device.id, bad, `${verb} cancelled mid-flight`);
        throw err;
      }
      hooks.setState(device.id, bad, `${bestEffort ? 'best-effort, not counted: ' : ''}${rootMessage(err)}`);
      if (!bestEffort) {
        tally.failed += 1;
        counted = 'failed';
      }
      // Refused before anything ran on it: the device was not changed, so there is nothing to put back.
      if (opts.mode === 'apply' && REFUSED_BEFORE_RUNNING.has(failureType(err) ?? '') && wf.patched(REFUSED_DEVICES_UNTOUCHED)) untouched.add(device.id);
    } finally {
      inFlight.set(device.pool, inFlight.get(device.pool)! - 1);
      budget?.ended(device.pool);
      hooks.onEnded?.(device.pool, counted);
    }
    if (!bestEffort && opts.mode === 'apply') {
      if (failureGateTripped(phaseTally(), opts.failurePolicy, false)) tripped = true;
    }
    return waiting;
  };

  /**
   * Whether a waiting device may try again: after its backoff, once its pool has room, the rollout is not
   * paused and the maintenance window is open. A stop (abort, cancel, a tripped failure gate) ends the
   * wait: the device never started, so it goes back to pending for the rollout's own skip.
   */
  const retryAfterWait = async (device: DeviceSnapshot, reason: string, waits: number): Promise<boolean> => {
    hooks.setState(device.id, 'waiting', reason);
    const giveUp = () => hooks.setState(device.id, 'pending', `not started: was ${reason}`);
    try {
      if (await wf.condition(halted, dependencyBackoffMs(waits))) return (giveUp(), false);
      for (;;) {
        await wf.condition(() => halted() || (!hooks.isPaused() && room(device)));
        if (halted()) return (giveUp(), false);
        const closed = opts.window ? msUntilWindowOpens(Date.now(), opts.window) : 0;
        if (closed <= 0) return true;
        if (await wf.condition(halted, closed)) return (giveUp(), false);
      }
    } catch (err) {
      if (wf.isCancellation(err)) giveUp();
      throw err;
    }
  };

  const runOne = async (device: DeviceSnapshot) => {
    try {
      for (let waits = 1; ; waits++) {
        const waiting = await attempt(device);
        if (!waiting) return;
        const reason = `${waitingReason(waiting.unmet)}${waiting.detail ? ` (${waiting.detail})` : ''}`;
        waitingNow += 1;
        let again: boolean;
        try {
          again = await retryAfterWait(device, reason, waits);
        } finally {
          // Synchronously before the retry's attempt takes its slot: no drained check can run in between.
          waitingNow -= 1;
        }
        if (!again) return;
      }
    } finally {
      maybeDrained();
    }
  };

  while (queue.length > 0) {
    await wf.condition(() => halted() || (!hooks.isPaused() && queue.some(room)));
    if (halted()) break;
    if (opts.window) {
      const wait = msUntilWindowOpens(Date.now(), opts.window);
      if (wait > 0) {
        await wf.sleep(wait, { summary: `wait for maintenance window (${opts.phaseName})` });
        continue; // re-check pause, abort and budget after sleeping
      }
    }
    const device = queue.splice(queue.findIndex(room), 1)[0]!;
    const run = runOne(device);
    (device.updateClass === 'best-effort' ? background : required).push(run);
  }
  loopDone = true;
  maybeDrained();
  await Promise.all(required);
  return {
    tally,
    tripped: tripped || (opts.mode === 'apply' && failureGateTripped(phaseTally(), opts.failurePolicy, true)),
    started: untouched.size ? started.filter((id) => !untouched.has(id)) : started,
    background: Promise.all(background).then(() => undefined),
  };
}
