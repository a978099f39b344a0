import { checkControl, type ControlBase, type ControlContext, type ControlName } from '../controls';
import type { DeliveryLedger } from '../events';
import type { GateOutcome } from '../health';
import type { Plan, PlannedPhase } from '../planner';
import {
  countDevices,
  stepState,
  type Counts,
  type DeviceProof,
  type DeviceRecord,
  type DeviceSnapshot,
  type DeviceState,
  type DeviceStatus,
  type RolloutState,
} from '../rollout-state';
import type { RolloutSpec } from '../spec';
import { isHealthTarget } from './device-outcome';
import { honestDevice, NOT_STARTED } from './outcome';
import { plannedState, type PlanShape } from './sliced-plan';
import { NO_SLICED_PHASES, SlicedRecords, type SlicedPhases, type SliceReport, type SliceUnit } from './sliced-records';
import { unconfirmedDevices, type DeadlineKind, type DeadlineStatus } from './deadline';
import type { AbortRequest } from './policy';
import type { WatchCheck, WatchStatus } from './watch';
import type { CanaryVerdict, ControlRecord, PhaseStage, PhaseStatus, RolloutStatus } from './status';
import { PhaseTimings } from './timing';

/** A control as it arrives from a signal or an update. */
export type ControlRequest = ControlBase & { rollback?: boolean; phase?: number | string };

/** An audit record the model asks for; the workflow writes it (with seq, time and counts). */
export interface AuditIntent {
  event: 'rollout.paused' | 'rollout.resumed' | 'rollout.aborted' | 'rollout.approved';
  by?: string;
  reason: string | null;
  phase?: string;
  evidence?: unknown;
}

/** Why a rollout is paused, one reason per cause (the status shows the latest; a resume clears them all). */
export type PauseCause = 'operator' | 'failure-policy' | 'inconclusive-gate' | 'deadline' | 'reverify';

/**
 * One rollout's state: its devices, phases, controls and the devices it changed. Device states are the
 * truth; counts are computed from them. Pure and synchronous (no Temporal, no clock: callers pass the
 * time), so the workflow holds one of these and its methods are tested on their own. Every field is
 * private: the workflow reads through getters and changes the model through one method per change, so
 * each transition is written once, and each marks the model changed for the next publish
 * (workflows/progress.ts `publishIfChanged`, docs/architecture.md "The model's methods").
 */
export class RolloutModel {
  private currentState: RolloutState = 'running';
  /** The current phase's name, or the stage around the phases: `snapshot`, `rollback`, `done`. */
  private currentPhase = 'snapshot';
  /** Why it is paused, by cause, in the order the causes paused it (a Map keeps insertion order). */
  private readonly pauses = new Map<PauseCause, string>();
  private abortRequest: AbortRequest | undefined;
  private canaryVerdict: CanaryVerdict | undefined;
  private approvalWait: { index: number; name: string } | undefined;
  private lastAuditHead: { seq: number; hash: string } | undefined;
  /** Why the audit trail holds the rollout: a record could not be written and the trail is not whole. */
  private auditHoldReason: string | undefined;
  /** A revert: the completed rollout it undoes (shown in the status). */
  private revertsRollout: { rolloutId: string; runId: string } | undefined;
  /** Deliveries to the spec's webhooks (workflows/events.ts keeps it); absent without webhooks. */
  private webhookLedger: DeliveryLedger | undefined;
  private adoptedPlan: Plan | undefined;
  /** The last progress deadline that passed (workflows/deadlines.ts), with the devices it found unconfirmed. */
  private passedDeadline: DeadlineStatus | undefined;
  private readonly warningList: string[] = [];
  /** The watch after promotion, once it started (core/rollout/watch.ts). */
  private watchStatus: WatchStatus | undefined;
  /** Devices whose re-verify failed (core/rollout/reverify.ts), flipped to `failed`, in the order they flipped. */
  private readonly flipped = new Set<string>();
  /** A write since the last publish (see `takeChanged`); a new model has not been published yet. */
  private changed = true;

  /**
   * The phases whose devices it does not name: none until a sliced plan's shape is adopted (inline records),
   * then its sliced phases' counts and slices (core/rollout/sliced-records.ts).
   */
  private slicedPhases: SlicedPhases = NO_SLICED_PHASES;

  private readonly devices = new Map<string, DeviceStatus>();
  private readonly phases: PhaseStatus[] = [];
  /** Receipts of answers not yet recorded in the trail (recordOf lets each go once written). */
  private readonly proofs = new Map<string, DeviceProof>();
  private readonly controls: ControlRecord[] = [];
  private readonly approved = new Set<number>();
  /** Phases whose first device started applying: a phase's deadline runs from then (core/rollout/deadline.ts). */
  private readonly startedPhases = new Set<number>();
  /** Each phase's timing, for the estimate of its end (core/eta.ts): kept only once the workflow gives a clock. */
  private readonly timings = new PhaseTimings();
  /** Devices this rollout started changing, in order (a Set: O(1) to add and forget at 10,000 devices). */
  private readonly touched = new Set<string>();
  private readonly snapshot = new Map<string, DeviceSnapshot>();
  /** The snapshot as read, page by page: what the planner judges (it warns of an id seen twice). */
  private readonly snapshotAsRead: DeviceSnapshot[] = [];

  constructor(
    private readonly spec: Pick<RolloutSpec, 'profile' | 'fromRevision' | 'toRevision' | 'offline'> & {
      rolloutId: string;
    },
  ) {}

  /** The workflow's clock (its deterministic Date.now): phases' timings are kept from then on (core/rollout/timing.ts). */
  useClock(now: () => number): void {
    this.timings.useClock(now);
  }

  // ---- reading ----
  status(): RolloutStatus {
    return {
      rolloutId: this.spec.rolloutId,
      profile: this.spec.profile,
      fromRevision: this.spec.fromRevision,
      toRevision: this.spec.toRevision,
      // Held by the audit trail, a running rollout is paused in every way that matters: say so.
      state: this.auditHoldReason && this.currentState === 'running' ? 'paused' : this.currentState,
      phase: this.currentPhase,
      ...(this.auditHoldReason
        ? { pausedReason: `audit trail not whole: ${this.auditHoldReason}` }
        : this.pausedReason
          ? { pausedReason: this.pausedReason }
          : {}),
      phases: this.phases.map((p) => {
        const timing = this.timings.of(p.index);
        return timing ? { ...p, timing } : p;
      }),
      devices: [...this.devices.values()],
      counts: this.counts(),
      controls: this.controls,
      warnings: this.warningList,
      changedDevices: this.changedDevices(),
      ...(this.canaryVerdict ? { verdict: this.canaryVerdict } : {}),
      ...(this.lastAuditHead ? { auditHead: this.lastAuditHead } : {}),
      ...(this.revertsRollout ? { reverts: this.revertsRollout } : {}),
      ...(this.passedDeadline ? { deadline: this.passedDeadline } : {}),
      ...(this.webhookLedger ? { webhooks: this.webhookLedger.status() } : {}),
      ...this.slicedPhases.inStatus(),
      ...(this.watchStatus ? { watch: { ...this.watchStatus, alerts: [...this.watchStatus.alerts] } } : {}),
    };
  }
  get state(): RolloutState {
    return this.currentState;
  }
  /** The current phase's name, or the stage around the phases: `snapshot`, `rollback`, `done`. */
  get phaseName(): string {
    return this.currentPhase;
  }
  /** The latest pause's reason (what the status shows), while paused. */
  get pausedReason(): string | undefined {
    let last: string | undefined;
    for (const reason of this.pauses.values()) last = reason;
    return last;
  }
  /** The causes pausing the rollout now, oldest first. */
  pauseCauses(): PauseCause[] {
    return [...this.pauses.keys()];
  }
  /** The accepted abort (an operator's, or a deadline's): the story ends the rollout with it. */
  get abort(): AbortRequest | undefined {
    return this.abortRequest;
  }
  get verdict(): CanaryVerdict | undefined {
    return this.canaryVerdict;
  }
  get awaitingApproval(): { index: number; name: string } | undefined {
    return this.approvalWait;
  }
  /** Why the audit trail holds the rollout, while it does. */
  get auditHold(): string | undefined {
    return this.auditHoldReason;
  }
  get reverts(): { rolloutId: string; runId: string } | undefined {
    return this.revertsRollout;
  }
  get plan(): Plan | undefined {
    return this.adoptedPlan;
  }
  get warnings(): readonly string[] {
    return this.warningList;
  }
  /**
   * Whether anything was written since the last call (which clears it): the publisher upserts the
   * search attributes only then, once per step however many writes the step made.
   */
  takeChanged(): boolean {
    const changed = this.changed;
    this.changed = false;
    return changed;
  }
  counts(): Counts {
    const counts = countDevices(this.devices.values());
    const sliced = this.slicedPhases.counts();
    for (const key of Object.keys(counts) as Array<keyof Counts>) counts[key] += sliced[key];
    return counts;
  }
  /** New device starts and the advance wait: for an operator's pause, or for the audit trail to be whole. */
  /** Devices this rollout started changing (a batch's devices not yet started do not count). */
  changedDevices(): number {
    let n = 0;
    for (const id of this.touched) if (this.devices.get(id)?.state !== 'pending') n += 1;
    return n + this.slicedPhases.changedDevices();
  }
  get paused(): boolean {
    return this.currentState === 'paused' || this.auditHoldReason !== undefined;
  }
  get stopped(): boolean {
    return this.abortRequest !== undefined;
  }
  phase(index: number): Readonly<PhaseStatus> {
    return this.phases[index]!;
  }
  /**
   * A device's state as the workflow's steps decide on it: not-for-me and not-started read `skipped`, as
   * they did when recorded histories made their commands from it (stepState). What a person reads, the
   * status, has the state itself.
   */
  deviceState(id: string): DeviceState | undefined {
    const d = this.devices.get(id);
    return d && stepState(d.state);
  }

  // ---- snapshot and plan ----
  addSnapshot(page: DeviceSnapshot[]): void {
    this.changed = true;
    this.snapshotAsRead.push(...page);
    // The first entry of an id wins, as in the planner: the inventory may change between pages.
    for (const d of page) if (!this.snapshot.has(d.id)) this.snapshot.set(d.id, d);
  }
  /** What was learned of some devices after the snapshot (the canary's probe): it replaces what was read. */
  updateSnapshot(found: readonly DeviceSnapshot[]): void {
    this.changed = true;
    const byId = new Map(found.map((d) => [d.id, d]));
    for (const d of found) if (this.snapshot.has(d.id)) this.snapshot.set(d.id, d);
    for (let i = 0; i < this.snapshotAsRead.length; i++) {
      const next = byId.get(this.snapshotAsRead[i]!.id);
      if (next) this.snapshotAsRead[i] = next;
    }
  }
  /** The snapshot entry of a device. */
  snapshotOf(id: string): DeviceSnapshot | undefined {
    return this.snapshot.get(id);
  }
  /** Every device read at snapshot time, in the order read (duplicates included, for the planner). */
  snapshotDevices(): DeviceSnapshot[] {
    return this.snapshotAsRead;
  }
  /**
   * Every device in scope gets a state: not-for-me (with the planner's reason: left-behind, a node-down
   * verdict's own text, ahead) and already-applied at once, offline by the spec's policy, and a device that refused us at snapshot (host key, login, config)
   * failed with its kind named — never quietly skipped as offline.
   */
  adoptPlan(plan: Plan): void {
    this.changed = true;
    this.adoptedPlan = plan;
    this.timings.plan(plan, (id) => this.snapshot.get(id)?.pool, plan.phases.map(phaseSize));
    this.warningList.push(...plan.warnings);
    for (const { id, reason } of plan.notForMe) this.devices.set(id, { id, state: 'not-for-me', phase: -1, reason });
    for (const id of plan.alreadyApplied)
      this.devices.set(id, { id, state: 'applied', phase: -1, reason: 'already at target' });
    for (const phase of plan.phases) {
      this.phases.push({
        index: phase.index,
        name: phase.name,
        devices: phaseSize(phase),
        gate: phase.gate,
        stage: 'pending',
      });
      for (const id of phase.devices) {
        const { state, reason } = plannedState(this.snapshot.get(id)!, this.spec.offline);
        this.devices.set(id, { id, state, phase: phase.index, ...(reason ? { reason } : {}) });
      }
    }
  }
  /**
   * Sliced records: the plan's shape (core/rollout/sliced-plan.ts). The inline phases' devices get their
   * records as adoptPlan gives them; a sliced phase only its counts, its devices pending until a slice
   * reports them; the plan-settled devices (already there, not-for-me) are counts.
   */
  adoptShape(shape: PlanShape): void {
    this.addSnapshot(shape.inline);
    this.slicedPhases = new SlicedRecords(shape);
    this.adoptPlan({
      rolloutId: this.spec.rolloutId,
      seed: shape.seed,
      toRevision: this.spec.toRevision,
      snapshotSize: shape.snapshotSize,
      ...(shape.canaryClass !== undefined ? { canaryClass: shape.canaryClass } : {}),
      phases: shape.phases,
      alreadyApplied: [],
      notForMe: [],
      pools: shape.pools,
      warnings: shape.warnings,
    });
  }
  /** The phases whose devices the model does not name: none with inline records (see `slicedPhases`). */
  get sliced(): SlicedPhases {
    return this.slicedPhases;
  }
  /** A slice of sliced records started / ended (its counts replace its devices' pending ones). */
  sliceStarted(unit: Omit<SliceUnit, 'counts' | 'required' | 'started'>): void {
    this.changed = true;
    this.slicedPhases.started(unit);
    this.timings.sliceStarted(unit.workflowId, unit.phase, unit.mode);
  }
  sliceEnded(workflowId: string, report: SliceReport): void {
    this.changed = true;
    this.slicedPhases.ended(workflowId, report);
    this.timings.sliceEnded(workflowId, report.started);
  }
  /**
   * Sliced phases' devices no slice ran: not-started from now on (how many, by phase). Asked only by sliced
   * records (workflows/phase-records/sliced.ts): inline records have no such phase and write nothing here.
   */
  closeUnstartedSlices(reason: string, exceptPhase?: number): Array<{ phase: number; devices: number }> {
    this.changed = true;
    return this.slicedPhases.closeUnstarted(reason, exceptPhase);
  }
  /** The devices a deadline waits for that are not confirmed: the named ones, and the sliced phases' by count. */
  unconfirmed(
    passedPhases: ReadonlySet<number>,
    phase?: number,
  ): { ids: string[]; count: number; byState: Partial<Record<DeviceState, number>> } {
    const named = unconfirmedDevices(this.requiredDevices(), passedPhases, phase);
    const sliced = this.slicedPhases.unconfirmed(passedPhases, phase);
    const byState = { ...named.byState };
    for (const [state, n] of Object.entries(sliced.byState) as Array<[DeviceState, number]>)
      byState[state] = (byState[state] ?? 0) + n;
    return { ids: named.ids, count: named.count + sliced.count, byState };
  }

  /** The phase's devices still waiting to start, in plan order. */
  pendingIn(phase: PlannedPhase): DeviceSnapshot[] {
    return phase.devices.filter((id) => this.devices.get(id)?.state === 'pending').map((id) => this.snapshot.get(id)!);
  }
  /** Devices of the phase already failed before it started (offline at snapshot under `offline: fail`). */
  failedBeforeStart(phase: PlannedPhase): number {
    return phase.devices.filter((id) => this.devices.get(id)?.state === 'failed').length;
  }
  /** Devices the health gate measures: changed by this rollout and not best-effort, in snapshot order. */
  healthTargets(): DeviceSnapshot[] {
    return [...this.snapshot.values()].filter((d) => isHealthTarget(d, this.devices.get(d.id)?.state));
  }

  // ---- devices ----
  setDevice(id: string, next: DeviceState, reason?: string, proof?: DeviceProof): void {
    this.changed = true;
    // A device's receipt is kept until its outcome is recorded (recordOf): each new answer replaces it.
    if (proof) this.proofs.set(id, proof);
    else this.proofs.delete(id);
    const phase = this.devices.get(id)?.phase ?? -1;
    if (next === 'applying' || next === 'applied' || next === 'claimed' || next === 'failed')
      this.startedPhases.add(phase);
    this.timings.device(id, phase, next);
    // The apply that finds a device ahead says not-for-me in the reason of a `skipped` (workflows/device-runner.ts, slices).
    this.devices.set(
      id,
      honestDevice({
        id,
        state: next,
        phase,
        ...(reason ? { reason } : {}),
        ...(proof ? { proven: true as const } : {}),
      }),
    );
  }
  /**
   * Devices that never started are recorded as not-started with the reason (what stopped the rollout,
   * `not started:` dropped: the state says it), so none is left without a state and none reads as
   * skipped for being offline. Returns their ids (the `devices.skipped` record names them).
   */
  skipPending(reason: string, exceptPhase?: number): string[] {
    const skipped: string[] = [];
    const why = reason.startsWith(NOT_STARTED) ? reason.slice(NOT_STARTED.length).trim() : reason;
    for (const d of this.devices.values()) {
      if (d.state === 'pending' && d.phase !== exceptPhase) {
        this.setDevice(d.id, 'not-started', why);
        skipped.push(d.id);
      }
    }
    return skipped;
  }
  /** Whether a device of the phase has started applying (a sliced phase learns it when its first slice ends). */
  phaseStarted(index: number): boolean {
    return this.startedPhases.has(index) || this.slicedPhases.phaseStarted(index);
  }
  /** Devices a deadline waits for: planned into a phase and not best-effort (they never hold a gate). */
  *requiredDevices(): Iterable<DeviceStatus> {
    for (const d of this.devices.values())
      if (d.phase >= 0 && this.snapshot.get(d.id)?.updateClass !== 'best-effort') yield d;
  }
  /** The current state (and reason) of each listed device, for the per-device audit records. */
  outcomesOf(ids: readonly string[]): DeviceStatus[] {
    return ids.map((id) => this.devices.get(id) ?? { id, state: 'pending', phase: -1 });
  }
  /**
   * Each listed device's `devices.outcome` entry: its state and reason, and the receipt its answer carried with the
   * request it answers (core/rollout-state.ts DeviceProof). A receipt goes into the trail once, then is let go.
   */
  recordOf(ids: readonly string[], mode: 'plan' | 'apply' | 'rollback'): DeviceRecord[] {
    return this.outcomesOf(ids).map((d) => {
      const proof = this.proofs.get(d.id);
      this.proofs.delete(d.id);
      return {
        id: d.id,
        state: d.state,
        ...(d.reason ? { reason: d.reason } : {}),
        ...(proof ? { receipt: proof.receipt, request: proof.request } : {}),
        // The phase an apply's request named (a compensation names none).
        ...(proof && mode === 'apply' ? { phaseIndex: d.phase } : {}),
      };
    });
  }
  /** Devices that did not get to start at plan time (failed or skipped at snapshot, not-for-me, already there). */
  settledAtPlan(): DeviceStatus[] {
    return [...this.devices.values()].filter((d) => d.state !== 'pending');
  }
  /** About to start these: compensation must undo them if the rollout stops while they run. */
  markTouched(ids: Iterable<string>): void {
    this.changed = true;
    for (const id of ids) this.touched.add(id);
  }
  /** Of a batch, the devices that never started were not changed: keep compensation exact. */
  forgetUnstarted(batch: readonly DeviceSnapshot[], started: readonly string[]): void {
    this.changed = true;
    const startedSet = new Set(started);
    for (const d of batch) if (!startedSet.has(d.id)) this.touched.delete(d.id);
  }
  /** Every device this rollout changed, last changed first: the order compensation puts them back in. */
  toUndo(): DeviceSnapshot[] {
    return [...this.touched].reverse().map((id) => this.snapshot.get(id)!);
  }
  rollbackFailedOf(devices: readonly DeviceSnapshot[]): string[] {
    return devices.filter((d) => this.devices.get(d.id)?.state === 'rollback-failed').map((d) => d.id);
  }

  // ---- phases ----
  enterPhase(index: number, stage: PhaseStage = 'applying'): void {
    this.changed = true;
    this.currentPhase = this.phases[index]!.name;
    this.phases[index]!.stage = stage;
    this.timings.stage(index, stage);
  }
  setStage(index: number, stage: PhaseStage): void {
    this.changed = true;
    this.phases[index]!.stage = stage;
    this.timings.stage(index, stage);
  }
  recordGate(index: number, outcome: GateOutcome, evidence: string[], stage: PhaseStage): void {
    this.changed = true;
    const ps = this.phases[index]!;
    ps.gateOutcome = outcome;
    ps.evidence = evidence;
    ps.stage = stage;
    this.timings.stage(index, stage);
  }
  /** Close the phases still waiting (an abort, a cancel, a canary run's later phases). */
  closePhases(stages: ReadonlySet<PhaseStage> | 'all-after-first'): void {
    this.changed = true;
    this.phases.forEach((ps, i) => {
      if (stages === 'all-after-first' ? i > 0 : stages.has(ps.stage)) {
        ps.stage = 'stopped';
        this.timings.stage(i, 'stopped');
      }
    });
  }
  awaitApproval(index: number): void {
    this.changed = true;
    this.phases[index]!.stage = 'awaiting-approval';
    this.timings.stage(index, 'awaiting-approval');
    this.approvalWait = { index, name: this.phases[index]!.name };
  }
  isApproved(index: number): boolean {
    return this.approved.has(index);
  }
  approvalDone(): void {
    this.changed = true;
    this.approvalWait = undefined;
  }

  // ---- the rollout's own state ----
  /** Pause for a cause; the same cause pausing again replaces its reason (and is the latest). */
  pauseFor(cause: PauseCause, reason: string): void {
    this.changed = true;
    this.currentState = 'paused';
    this.pauses.delete(cause);
    this.pauses.set(cause, reason);
  }
  /** The rollout's state moves on (a resume, the end): every cause's pause ends with it, as one resume always lifted any pause. */
  private moveTo(state: RolloutState): void {
    this.changed = true;
    this.currentState = state;
    this.pauses.clear();
  }
  enterRollback(): void {
    this.changed = true;
    this.currentPhase = 'rollback';
  }
  finish(state: RolloutState): void {
    this.moveTo(state);
    this.currentPhase = 'done';
  }
  /** An unexpected error: the rollout failed where it was (the status keeps the phase it failed in). */
  fail(): void {
    this.changed = true;
    this.currentState = 'failed';
  }
  /** A deadline under `onDeadline: rollback`: stops the story as an abort does; the story ends it rolled back. */
  requestDeadlineRollback(deadline: DeadlineKind, reason: string): void {
    this.changed = true;
    this.abortRequest = { rollback: true, reason, by: 'wavegate', deadline };
  }
  /** A progress deadline passed: shown in the status, and as a warning. */
  recordDeadline(passed: DeadlineStatus, reason: string): void {
    this.changed = true;
    this.passedDeadline = passed;
    this.warningList.push(reason);
  }
  /** Every phase passed: the rollout is `watching` its changed devices (the phase shows `watch`). */
  startWatch(watch: WatchStatus): void {
    this.moveTo('watching');
    this.currentPhase = 'watch';
    this.watchStatus = watch;
  }
  /** One check of the watch, and (under `onFail: alert`) the alert it raised. */
  recordWatchCheck(check: WatchCheck, alert?: string): void {
    this.changed = true;
    const w = this.watchStatus!;
    w.checks = check.n;
    w.last = check;
    if (alert) {
      w.alerts.push(alert);
      this.warningList.push(alert);
    }
  }
  /** The watch ended: passed, alerted, reverted (with the failed check's reason) or stopped. */
  endWatch(outcome: Exclude<WatchStatus['outcome'], 'watching'>, reason?: string): void {
    this.changed = true;
    const w = this.watchStatus!;
    w.outcome = outcome;
    if (reason) w.reason = reason;
  }
  get watch(): Readonly<WatchStatus> | undefined {
    return this.watchStatus;
  }
  /**
   * A re-verify failed on these devices: each one at the target (applied or claimed) flips to `failed` with
   * why. Still this rollout's change: compensation puts it back like any other device it changed.
   */
  flipUnverified(ids: readonly string[], reason: string): string[] {
    const flipped: string[] = [];
    for (const id of ids) {
      const state = this.devices.get(id)?.state;
      if (state !== 'applied' && state !== 'claimed') continue;
      this.setDevice(id, 'failed', reason);
      this.flipped.add(id);
      flipped.push(id);
    }
    return flipped;
  }
  /** Devices verified again after a failed re-verify: back to `applied`, saying so. */
  unflip(ids: readonly string[], reason: string): void {
    for (const id of ids) {
      if (!this.flipped.delete(id)) continue;
      if (this.devices.get(id)?.state === 'failed') this.setDevice(id, 'applied', reason);
    }
  }
  /** The devices flipped by a failed re-verify and not verified again since. */
  unverified(): DeviceSnapshot[] {
    return [...this.flipped]
      .filter((id) => this.devices.get(id)?.state === 'failed')
      .map((id) => this.snapshot.get(id)!);
  }
  /** A nightly canary run's verdict. */
  recordVerdict(verdict: CanaryVerdict): void {
    this.changed = true;
    this.canaryVerdict = verdict;
  }
  /** A revert names the completed rollout it undoes. */
  recordReverts(reverts: { rolloutId: string; runId: string } | undefined): void {
    this.changed = true;
    this.revertsRollout = reverts;
  }
  /** The last audit record written (its seq and hash). */
  recordAuditHead(head: { seq: number; hash: string }): void {
    this.changed = true;
    this.lastAuditHead = head;
  }
  /** The audit trail holds the rollout (with why), or holds it no more (undefined). */
  holdForAudit(reason: string | undefined): void {
    this.changed = true;
    this.auditHoldReason = reason;
  }
  /** The webhook deliveries' ledger, shown in the status (workflows/events.ts keeps it). */
  attachWebhooks(ledger: DeliveryLedger): void {
    this.changed = true;
    this.webhookLedger = ledger;
  }
  /** Something an operator should know that changed nothing else (a record not written, a floor not raised). */
  warn(warning: string): void {
    this.changed = true;
    this.warningList.push(warning);
  }

  // ---- controls: signals (Web UI) and updates (CLI) share one check and one effect ----
  controlContext(): ControlContext {
    return {
      state: this.currentState,
      awaitingApproval: this.approvalWait,
      aborting: this.abortRequest !== undefined,
      ...(this.auditHoldReason ? { auditHold: this.auditHoldReason } : {}),
    };
  }
  /** Null when the control is allowed now, else why not (naming the current state). */
  refusal(name: ControlName, c: ControlRequest = {}): string | null {
    return checkControl(name, this.controlContext(), c);
  }
  /**
   * Carry out an accepted control; returns the audit record it calls for (none for an audit override:
   * the trail itself writes that record, as the first of a new segment).
   */
  applyControl(name: ControlName, c: ControlRequest): AuditIntent | undefined {
    const by = c.by;
    const reason = c.reason ?? null;
    switch (name) {
      case 'pause':
        this.pauseFor('operator', `paused by ${c.by ?? 'unknown'}${c.reason ? `: ${c.reason}` : ''}`);
        return { event: 'rollout.paused', by, reason };
      case 'resume':
        this.moveTo('running');
        return { event: 'rollout.resumed', by, reason };
      case 'abort':
        this.changed = true;
        this.abortRequest = {
          rollback: c.rollback ?? true,
          reason: c.reason ?? 'aborted by operator',
          by: c.by ?? 'unknown',
        };
        return { event: 'rollout.aborted', by, reason, evidence: { rollback: this.abortRequest.rollback } };
      case 'approve':
        this.changed = true;
        this.approved.add(this.approvalWait!.index);
        return { event: 'rollout.approved', by, reason, phase: this.approvalWait!.name };
      case 'override-audit':
        return undefined;
    }
  }
  recordControl(control: ControlRecord['control'], c: ControlBase, accepted: boolean, at: string, note?: string): void {
    this.changed = true;
    this.controls.push({
      control,
      by: c.by ?? 'unknown',
      ...(c.reason ? { reason: c.reason } : {}),
      at,
      accepted,
      ...(note ? { note } : {}),
    });
  }
  /** A cancel: no pause or approval is pending any more. */
  clearWaits(): void {
    this.changed = true;
    this.pauses.clear();
    this.approvalWait = undefined;
  }
}

/**
 * How many devices a planned phase has: a sliced phase of a sliced plan's shape names none of them
 * (core/rollout/sliced-plan.ts). Read once, at adoption: after it, `phase(index).devices` says it.
 */
function phaseSize(phase: PlannedPhase | (PlannedPhase & { size: number })): number {
  return 'size' in phase ? phase.size : phase.devices.length;
}
