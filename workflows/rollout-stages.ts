import * as wf from '@temporalio/workflow';
import type { AuditEventName } from '../core/audit';
import { DEFAULT_REVERT_WINDOW_MS } from '../core/floor';
import type { PlannedPhase } from '../core/planner';
import type { RolloutInput } from '../core/rollout/input';
import type { RolloutModel } from '../core/rollout/model';
import { endingOf, endingParts, type Ending } from '../core/rollout/ending';
import * as policy from '../core/rollout/policy';
import type { RolloutStatus } from '../core/rollout/status';
import { AuditTrail } from './audit-trail';
import { DeviceBatches, type BatchResult } from './batches';
import { wireControls } from './controls';
import { twoPersonApprovals, type TwoPersonApprovals } from './approvals';
import { EventOutbox, WEBHOOK_EVENTS_PATCH } from './events';
import { gateEvidence, runHealthGate } from './health-gate';
import { phaseRecordsFor, type PhaseRecords } from './phase-records';
import { publishIfChanged, refreshDetails } from './progress';

/** A rollout whose input names a membership entity snapshots from it (only inputs with `membership` ask). */
export const MEMBERSHIP_ENTITY = 'membership-entity';
/** New executions record the canary's devices as touched when they start, so a cancel mid-apply puts them back. */
export const CANARY_TOUCHED_AT_START = 'canary-touched-at-start';
/** New executions hold when an audit record cannot be written, instead of going on unaudited. */
export const AUDIT_FAILURE_HOLDS = 'audit-failure-holds';
/**
 * New executions do not wait for an audit record before going on: appends are pipelined in order, and
 * a failed one holds new device starts at the next decision (the trail's hold, AUDIT_FAILURE_HOLDS).
 */
export const AUDIT_PIPELINED = 'audit-pipelined';
/** New pipelined executions wait, before a phase's devices start, until every earlier record is written (a failed one holds there). */
export const AUDIT_PHASE_BARRIER = 'audit-phase-barrier';
/** A revert (`input.reverts`) names the rollout it undoes in its audit, and its floor ends at its target. */
export const REVERT_ROLLOUTS = 'revert-rollouts';
/** New executions write what happened to every device into the audit trail, not only to phases. */
export const AUDIT_DEVICE_RECORDS = 'audit-device-records';
/** New executions start no timer for a zero-length gate: the health gate follows at once. */
export const ZERO_GATE_NO_TIMER = 'zero-gate-no-timer';
/** New executions snapshot the membership only; the canary's few candidates are probed (see `probeCanary`). */
export const SNAPSHOT_MEMBERSHIP_ONLY = 'snapshot-membership-only';
/** New executions with a membership-only snapshot send `aheadAbove` with every apply: a device above the target answers `ahead` and is not-for-me. */
export const AHEAD_AT_APPLY = 'ahead-at-apply';
/**
 * New executions end every rollout in one order (core/rollout/ending.ts ENDING_ORDER): close the waiting
 * phases, name the devices never started, compensate, finish. Executions recorded before take their
 * cause's own order (`Ending.legacyOrder`).
 */
export const ONE_ENDING = 'one-ending';
/** Devices per per-device audit record: a 10,000-device phase is twenty records, not one huge one. */
const DEVICE_RECORD_CHUNK = 500;

export type AuditFieldsOf = { phase?: string | null; by?: string; reason?: string | null; evidence?: unknown };

/**
 * The stages a rollout's story is told in, shared by a rollout and a canary run: each stage changes the
 * model, writes its audit records and publishes to the Web UI, in that order. The story (rollout.ts)
 * decides which stage comes next. (A revision's `steps` are its commands; these are the rollout's stages.)
 */
export class RolloutStages {
  private readonly trail: AuditTrail;
  private readonly batches: DeviceBatches;
  /** Where the phases' device records are kept: inline, or sliced records (chosen once, workflows/phase-records/). */
  private readonly records: PhaseRecords;
  /** The two-person rule of a spec with `approval` (workflows/approvals.ts); undefined for any other. */
  readonly approvals: TwoPersonApprovals | undefined;

  constructor(
    private readonly input: RolloutInput,
    private readonly model: RolloutModel,
  ) {
    const changed = (ack = false) => {
      const told = this.batches.forwardControls(ack);
      publishIfChanged(model);
      return told;
    };
    wf.deprecatePatch(AUDIT_FAILURE_HOLDS);
    wf.deprecatePatch(AUDIT_PIPELINED);
    this.trail = new AuditTrail(input.rolloutId, {
      onHead: (head) => model.recordAuditHead(head),
      onHold: (reason) => {
        model.holdForAudit(reason);
        changed();
      },
    });
    this.batches = new DeviceBatches(input, model);
    this.records = phaseRecordsFor({ input, model, batches: this.batches, audit: (event, f) => this.audit(event, f) });
    wf.deprecatePatch(AUDIT_DEVICE_RECORDS);
    this.approvals = twoPersonApprovals(input, model, (event, fields) => this.audit(event, fields), changed);
    wireControls(
      model,
      (event, fields) => this.audit(event, fields),
      changed,
      (c) => this.trail.requestOverride(c),
      this.approvals,
    );
  }

  /** One audit record: the current phase (once planned) and the counts at this moment. */
  audit(event: AuditEventName, f: AuditFieldsOf = {}): Promise<unknown> {
    const { model } = this;
    const fields = {
      phase: f.phase === undefined ? (model.plan ? model.phaseName : null) : f.phase,
      by: f.by,
      reason: f.reason,
      counts: { ...model.counts() },
      evidence: f.evidence,
    };
    const written = this.trail.append(event, fields);
    // The same transition as a webhook event (workflows/events.ts), made at the first record; only the end waits for delivery.
    const { webhooks } = this.input.spec;
    if (this.outbox === undefined) {
      if (webhooks?.length) wf.deprecatePatch(WEBHOOK_EVENTS_PATCH);
      this.outbox = webhooks?.length ? new EventOutbox(this.input, model, webhooks) : false;
    }
    const delivered = this.outbox ? this.outbox.transition(event, fields, model.state) : undefined;
    // Written in the background, in order; the end (`end`) waits for the trail to drain.
    written.catch(() => {});
    return delivered ?? Promise.resolve();
  }
  /** The webhook outbox: undefined until the first record, false for a spec without webhooks. */
  private outbox: EventOutbox | false | undefined;
  holdWhilePaused(): Promise<void> {
    return wf.condition(() => !this.model.paused || this.model.stopped);
  }
  /** The model's pause/abort state changed outside a control (a deadline): tell a running slice and the Web UI. */
  controlsChanged(): void {
    void this.batches.forwardControls();
    publishIfChanged(this.model);
  }
  skipPending(reason: string, exceptPhase?: number): void {
    const skipped = this.model.skipPending(reason, exceptPhase);
    refreshDetails(this.model, true);
    for (const chunk of chunks(skipped)) void this.audit('devices.skipped', { reason, evidence: { devices: chunk } });
    this.records.skipUnstarted(reason, exceptPhase);
  }

  /** One record per chunk of devices: each one's state (and why) after a batch, or at plan time. */
  async recordDevices(mode: 'plan' | 'apply' | 'rollback', ids: readonly string[]): Promise<void> {
    for (const chunk of chunks(ids)) {
      await this.audit('devices.outcome', {
        evidence: {
          mode,
          devices: this.model.recordOf(chunk, mode),
        },
      });
    }
  }

  /** The devices whose state the plan already settled: failed or skipped at snapshot, not-for-me, already there. */
  recordPlan(): Promise<void> {
    const named = this.recordDevices(
      'plan',
      this.model.settledAtPlan().map((d) => d.id),
    );
    return this.records.recordPlan(named);
  }

  /**
   * The membership in scope, fixed for the rollout (its pages, or none with sliced records: PhaseRecords).
   * Not `async`: the records' snapshot is the promise the story waits on, as when it was this method's body.
   */
  snapshot(): Promise<void> {
    const { spec } = this.input;
    // New executions contact no device here: each one's revision and reachability are learned by its
    // own apply (verify-first answers already-applied; an unreachable one answers offline).
    wf.deprecatePatch(SNAPSHOT_MEMBERSHIP_ONLY);
    // With no marker read here, a device ahead of the rollout is learned by its apply (nothing runs there).
    // A revert comes down from its fromRevision: a device at that revision is a candidate, not ahead.
    wf.deprecatePatch(AHEAD_AT_APPLY);
    this.batches.aheadAbove = this.input.reverts ? Math.max(spec.fromRevision, spec.toRevision) : spec.toRevision;
    // The CLI's stored membership, read through the client on whichever worker runs the snapshot; older
    // inputs (and --inventory-on-worker) name a file on the worker's disk.
    if (this.input.membership) wf.deprecatePatch(MEMBERSHIP_ENTITY);
    return this.records.snapshot();
  }

  /**
   * The plan, deterministic from the rollout id and the membership, its canary's devices probed until
   * every one was (PhaseRecords.plan). Not `async`, as `snapshot`.
   */
  plan(): Promise<{ readonly phases: readonly PlannedPhase[] }> {
    return this.records.plan();
  }

  /** The model adopts the plan `plan` made. */
  adoptPlan(): void {
    this.records.adopt();
  }

  /**
   * The one way a rollout ends, whatever ended it (core/rollout/ending.ts decides the parts): close the
   * phases still waiting, name the devices never started, put back what this rollout changed, then the
   * final state, the last record and the status. Executions recorded before ONE_ENDING replay their
   * cause's own order.
   */
  async end(ending: Ending): Promise<RolloutStatus> {
    const { model } = this;
    for (const part of endingParts(ending, wf.patched(ONE_ENDING))) {
      if (part === 'close') model.closePhases(ending.closes!);
      else if (part === 'skip') this.skipPending(ending.skips!.reason);
      else if (part === 'compensate') await this.compensate(ending.compensation!.trigger, ending.compensation!.by);
    }
    if (ending.failed) {
      // The trail may be what failed: its record is tried, never waited on to fail again (see Ending.failed).
      model.fail();
      await this.audit(ending.event, { phase: null, reason: ending.reason }).catch(() => {});
    } else {
      model.finish(ending.state);
      await this.audit(ending.event, { phase: null, reason: ending.reason, ...(ending.by ? { by: ending.by } : {}) });
      await this.trail.drained();
    }
    publishIfChanged(model);
    return model.status();
  }

  /**
   * The completion's floor record (FLOOR_AT_APPLY): every device this rollout changed raised its floor in
   * its own apply (a device whose floor could not be written failed there), so the record only names
   * what the floor now says and on how many devices.
   */
  async recordFloor(): Promise<void> {
    const { model, input } = this;
    const { spec } = input;
    const confirmed = model
      .toUndo()
      .filter((d) => ['applied', 'claimed'].includes(model.deviceState(d.id) ?? '')).length;
    if (confirmed === 0) return;
    const revert = input.reverts !== undefined;
    const revertWindowMs = revert ? 0 : (spec.revertWindow ?? DEFAULT_REVERT_WINDOW_MS);
    await this.audit('floor.confirmed', {
      evidence: {
        revision: spec.toRevision,
        from: revert ? spec.toRevision : spec.fromRevision,
        revertWindowMs,
        confirmed,
        failed: [],
        raised: 'at each apply',
      },
    });
  }

  /** Wait for best-effort devices still running (they never hold a gate, but the rollout's end waits). */
  settled(): Promise<unknown> {
    return this.batches.settled();
  }

  /** Every device this rollout changed goes back to fromRevision, last changed first, within the budget. */
  async compensate(trigger: string, by: string): Promise<void> {
    const { model } = this;
    await this.batches.settled();
    const toUndo = model.toUndo();
    // Sliced records: the apply slices that started devices are put back first (PhaseRecords.slicesToUndo).
    const slices = this.records.slicesToUndo();
    const slicedDevices = slices?.devices ?? 0;
    model.enterRollback();
    publishIfChanged(model);
    await this.audit('rollback.started', {
      phase: 'rollback',
      by,
      reason: trigger,
      evidence: { devices: toUndo.length + slicedDevices },
    });
    let slicedFailed = 0;
    if (slices) {
      const before = model.counts()['rollback-failed'];
      await slices.run();
      slicedFailed = model.counts()['rollback-failed'] - before;
    }
    await this.batches.run(toUndo, 'rollback', 'rollback');
    await this.recordDevices(
      'rollback',
      toUndo.map((d) => d.id),
    );
    const failed = model.rollbackFailedOf(toUndo);
    await this.audit('rollback.completed', {
      phase: 'rollback',
      by,
      reason: trigger,
      evidence: {
        rolledBack: toUndo.length + slicedDevices - failed.length - slicedFailed,
        rollbackFailed: failed,
        ...(slices ? { slicedRollbackFailed: slicedFailed } : {}),
      },
    });
  }

  /**
   * The failure policy: the rollback's ending (the story ends the rollout with it), or a pause until an
   * operator resumes ('continue') or aborts.
   */
  async onFailure(
    trigger: policy.FailureTrigger,
    evidence: string,
    phase: PlannedPhase,
  ): Promise<Ending | 'continue' | 'aborted'> {
    const { model } = this;
    if (policy.failureResponse(trigger, this.input.spec.rollback.on) === 'rollback')
      return endingOf({ kind: 'failure-rollback', trigger, evidence, phaseName: phase.name });
    model.pauseFor('failure-policy', policy.failurePauseReason(trigger, evidence));
    await this.audit('rollout.paused', { reason: model.pausedReason });
    publishIfChanged(model);
    await this.holdWhilePaused();
    return model.stopped ? 'aborted' : 'continue';
  }

  /** One phase's apply, the same for a rollout and a canary run. */
  async applyPhase(phase: PlannedPhase, canary: boolean): Promise<BatchResult & { offlineFailed: number }> {
    const { model } = this;
    // Pipelined records are not waited for one by one, but every record of the phases before this one is
    // written before its devices start: a record that failed holds the rollout here, however slow the
    // sink was to say so (AUDIT_PHASE_BARRIER).
    wf.deprecatePatch(AUDIT_PHASE_BARRIER);
    await this.trail.drained();
    model.enterPhase(phase.index);
    publishIfChanged(model);
    await this.audit('phase.started', {
      evidence: {
        devices: model.phase(phase.index).devices,
        gate: phase.gate,
        ...(canary ? { canary: true } : {}),
      },
    });
    // Sliced records: a phase larger than a slice runs in slices that keep its devices' records.
    const inSlices = this.records.applyInSlices(phase);
    if (inSlices) {
      const result = await inSlices;
      await this.audit('phase.applied', { evidence: { tally: result.tally } });
      return { ...result, offlineFailed: 0 };
    }
    const batch = model.pendingIn(phase);
    const offlineFailed = model.failedBeforeStart(phase);
    // Touched before the batch runs, so a stop while it runs puts back what it started.
    if (canary) wf.deprecatePatch(CANARY_TOUCHED_AT_START);
    model.markTouched(batch.map((d) => d.id));
    const result = await this.batches.run(batch, 'apply', phase.name, phase.index);
    model.forgetUnstarted(batch, result.started);
    // Devices found offline at their apply never started, but their outcome (skipped or failed) is recorded too.
    const startedSet = new Set(result.started);
    const offline = this.batches.offlineAtApply
      ? batch
          .filter((d) => !startedSet.has(d.id) && ['skipped', 'failed'].includes(model.deviceState(d.id) ?? ''))
          .map((d) => d.id)
      : [];
    await this.recordDevices('apply', offline.length ? [...result.started, ...offline] : result.started);
    await this.audit('phase.applied', { evidence: { tally: result.tally } });
    return { ...result, offlineFailed };
  }

  /** The gate's wait: a timer an abort interrupts (manual gates are approvals, see gateThenHealth). */
  async gateTimer(phase: PlannedPhase): Promise<void> {
    this.model.setStage(phase.index, 'gate');
    publishIfChanged(this.model);
    if (phase.gate === 'manual') return;
    // A zero gate is no wait: a timer would only cost a round trip.
    if (phase.gate === 0) {
      wf.deprecatePatch(ZERO_GATE_NO_TIMER);
      return;
    }
    await wf.condition(() => this.model.stopped, phase.gate, { summary: `gate after ${phase.name}` });
  }

  /** The gate (timer, or manual approval) then the health gate; inconclusive holds and re-checks; a failure may end in a rollback. */
  async gateThenHealth(phase: PlannedPhase): Promise<Ending | 'done'> {
    const { model } = this;
    if (phase.gate === 'manual') {
      model.awaitApproval(phase.index);
      publishIfChanged(model);
      await wf.condition(() => model.isApproved(phase.index) || model.stopped);
      model.approvalDone();
    } else await this.gateTimer(phase);
    for (;;) {
      await this.holdWhilePaused();
      if (model.stopped) return 'done';
      const gate = await runHealthGate(this.input, model, phase);
      const evidence = gateEvidence(gate);
      const decision = policy.healthGateDecision(gate.outcome, this.input.spec.onInconclusive);
      model.recordGate(phase.index, gate.outcome, evidence, decision.stage);
      await this.audit(decision.event, { evidence: gate.results });
      if (decision.next === 'advance') return 'done';
      if (decision.next === 'fail') {
        const next = await this.onFailure('healthGate-fail', evidence.join('; '), phase);
        return typeof next === 'object' ? next : 'done';
      }
      // Hold: after a resume the gate's time has passed, so health is checked again at once.
      model.pauseFor('inconclusive-gate', `health gate inconclusive after ${phase.name}: ${evidence.join('; ')}`);
      await this.audit('rollout.paused', { reason: model.pausedReason });
      publishIfChanged(model);
    }
  }
}

function chunks<T>(items: readonly T[]): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += DEVICE_RECORD_CHUNK) out.push(items.slice(i, i + DEVICE_RECORD_CHUNK));
  return out;
}
