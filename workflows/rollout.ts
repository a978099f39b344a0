import * as wf from '@temporalio/workflow';
import type { AuditEventName } from '../core/audit';
import { checkControl, type ControlBase, type ControlName } from '../core/controls';
import { evaluateHealthGate, type CheckResult, type GateOutcome } from '../core/health';
import { planPhases, type Plan, type PlannedPhase } from '../core/planner';
import { countDevices, summarizeCounts, type DeviceSnapshot, type DeviceState, type DeviceStatus, type RolloutState } from '../core/rollout-state';
import { WavegatePhase, WavegateProfile, WavegateRevision, WavegateState, WavegateVerdict } from '../core/search-attributes';
import type { RolloutInput } from '../core/rollout/input';
import type * as activities from '../activities';
import { rootMessage, runDevices, type DeviceRunOptions, type DeviceRunResult } from './device-runner';
import * as msg from './messages';
import type { ControlRecord, PhaseStatus, RolloutStatus } from './messages';
import { rolloutSliceWorkflow, type SliceResult } from './slice';

export type { RolloutInput };

type Acts = ReturnType<typeof activities.createActivities>;

const { snapshotFleet } = wf.proxyActivities<Acts>({
  startToCloseTimeout: '10 minutes',
  heartbeatTimeout: '1 minute',
  retry: { maximumAttempts: 3 },
});
// The record must land: retry until it does, except when retrying cannot help.
const { appendAudit } = wf.proxyActivities<Acts>({
  startToCloseTimeout: '30 seconds',
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '30 seconds', nonRetryableErrorTypes: ['AuditConflict', 'AuditInvalid', 'AuditCorrupt'] },
});

const SNAPSHOT_PAGE = 1_000;
const DEFAULT_SLICE = 200;
const HEALTH_CHUNK = 500;

/**
 * A rollout (DESIGN §3): snapshot the membership, plan the phases, then for each phase apply the
 * revision within the pools' budgets, wait the gate, check health, and advance, pause for an operator,
 * or put back every device this rollout changed. Every transition lands in the audit trail.
 */
export async function rolloutWorkflow(input: RolloutInput): Promise<RolloutStatus> {
  const { spec } = input;
  const info = wf.workflowInfo();
  const sliceSize = input.sliceSize ?? DEFAULT_SLICE;

  // ---- state: device states are the truth; counts are computed from them ----
  const devices = new Map<string, DeviceStatus>();
  const phases: PhaseStatus[] = [];
  const controls: ControlRecord[] = [];
  const warnings: string[] = [];
  let state: RolloutState = 'running';
  let phaseName = 'snapshot';
  let pausedReason: string | undefined;
  let abort: { rollback: boolean; reason: string; by: string } | undefined;
  let verdict: RolloutStatus['verdict'];
  let awaitingApproval: { index: number; name: string } | undefined;
  const approved = new Set<number>();
  const touched: string[] = []; // devices this rollout started changing, in order
  let snapshot: DeviceSnapshot[] = [];
  let plan: Plan | undefined;
  let activeSlice: wf.ChildWorkflowHandle<typeof rolloutSliceWorkflow> | undefined;

  const status = (): RolloutStatus => ({
    rolloutId: input.rolloutId,
    profile: spec.profile,
    fromRevision: spec.fromRevision,
    toRevision: spec.toRevision,
    state,
    phase: phaseName,
    ...(pausedReason ? { pausedReason } : {}),
    phases,
    devices: [...devices.values()],
    counts: countDevices(devices.values()),
    controls,
    warnings,
    ...(verdict ? { verdict } : {}),
    ...(auditHead ? { auditHead } : {}),
  });
  const publish = () => {
    wf.upsertSearchAttributes([
      { key: WavegateProfile, value: spec.profile },
      { key: WavegateState, value: state },
      { key: WavegatePhase, value: phaseName },
      { key: WavegateRevision, value: spec.toRevision },
      ...(verdict ? [{ key: WavegateVerdict, value: verdict }] : []),
    ]);
    wf.setCurrentDetails(progressTable(status()));
  };
  const setDevice = (id: string, next: DeviceState, reason?: string, refreshDetails = true) => {
    const phase = devices.get(id)?.phase ?? -1;
    devices.set(id, { id, state: next, phase, ...(reason ? { reason } : {}) });
    if (refreshDetails) wf.setCurrentDetails(progressTable(status()));
  };

  // ---- audit: one record per transition, sequential so the hash chain is in order ----
  let auditSeq = 0;
  let auditHead: { seq: number; hash: string } | undefined;
  let auditChain: Promise<unknown> = Promise.resolve();
  const audit = (event: AuditEventName, fields: { phase?: string | null; by?: string; reason?: string | null; evidence?: unknown } = {}) => {
    const record = {
      seq: ++auditSeq,
      at: new Date(Date.now()).toISOString(),
      rolloutId: input.rolloutId,
      runId: info.runId,
      event,
      phase: fields.phase === undefined ? (plan ? phaseName : null) : fields.phase,
      by: fields.by ?? 'wavegate',
      reason: fields.reason ?? null,
      counts: { ...countDevices(devices.values()) },
      evidence: fields.evidence ?? null,
    };
    auditChain = auditChain
      .then(() => appendAudit.executeWithOptions({ summary: `audit ${event}` }, [record]))
      .then((head) => (auditHead = head))
      .catch((err) => {
        if (wf.isCancellation(err)) throw err;
        // Keep the rollout (and the chain of later records) going, but say loudly what was not written.
        warnings.push(`audit record ${record.seq} (${event}) not written: ${rootMessage(err)}`);
      });
    return auditChain;
  };

  // ---- controls: signals (Web UI) and updates (CLI) share one check and one effect ----
  const controlContext = () => ({ state, awaitingApproval, aborting: abort !== undefined });
  const record = (control: ControlRecord['control'], c: ControlBase, accepted: boolean, note?: string) => {
    controls.push({ control, by: c.by ?? 'unknown', ...(c.reason ? { reason: c.reason } : {}), at: new Date(Date.now()).toISOString(), accepted, ...(note ? { note } : {}) });
  };
  const forwardToSlice = () => {
    if (activeSlice && phaseName !== 'rollback') void activeSlice.signal(msg.sliceControlSignal, { paused: state === 'paused', stop: abort !== undefined }).catch(() => {});
  };
  const effects: Record<ControlName, (c: ControlBase & { rollback?: boolean; phase?: number | string }) => void> = {
    pause: (c) => {
      state = 'paused';
      pausedReason = `paused by ${c.by ?? 'unknown'}${c.reason ? `: ${c.reason}` : ''}`;
      void audit('rollout.paused', { by: c.by, reason: c.reason ?? null });
    },
    resume: (c) => {
      state = 'running';
      pausedReason = undefined;
      void audit('rollout.resumed', { by: c.by, reason: c.reason ?? null });
    },
    abort: (c) => {
      abort = { rollback: c.rollback ?? true, reason: c.reason ?? 'aborted by operator', by: c.by ?? 'unknown' };
      void audit('rollout.aborted', { by: c.by, reason: c.reason ?? null, evidence: { rollback: abort.rollback } });
    },
    approve: (c) => {
      approved.add(awaitingApproval!.index);
      void audit('rollout.approved', { by: c.by, reason: c.reason ?? null, phase: awaitingApproval!.name });
    },
  };
  const applyControl = (name: ControlName, c: ControlBase & { rollback?: boolean; phase?: number | string }) => {
    effects[name](c);
    record(name, c, true);
    forwardToSlice();
    publish();
    return status();
  };
  const onSignal = (name: ControlName) => (c: ControlBase & { rollback?: boolean; phase?: number | string } = {}) => {
    const problem = checkControl(name, controlContext(), c);
    if (problem) {
      record(name, { ...c, by: c.by ?? 'signal' }, false, problem);
      return;
    }
    applyControl(name, { ...c, by: c.by ?? 'signal' });
  };
  const validator = (name: ControlName) => (c: ControlBase & { phase?: number | string }) => {
    const problem = checkControl(name, controlContext(), c ?? {});
    if (problem) throw new Error(problem);
  };
  wf.setHandler(msg.statusQuery, status);
  wf.setHandler(msg.pauseSignal, onSignal('pause'));
  wf.setHandler(msg.resumeSignal, onSignal('resume'));
  wf.setHandler(msg.abortSignal, onSignal('abort'));
  wf.setHandler(msg.approveSignal, onSignal('approve'));
  wf.setHandler(msg.pauseUpdate, (c) => applyControl('pause', c), { validator: validator('pause') });
  wf.setHandler(msg.resumeUpdate, (c) => applyControl('resume', c), { validator: validator('resume') });
  wf.setHandler(msg.abortUpdate, (c) => applyControl('abort', c), { validator: validator('abort') });
  wf.setHandler(msg.approveUpdate, (c) => applyControl('approve', c), { validator: validator('approve') });

  const isPaused = () => state === 'paused';
  const isStopped = () => abort !== undefined;
  const holdWhilePaused = () => wf.condition(() => !isPaused() || isStopped());

  // ---- device batches: inline for small phases, child workflows over slices for large ones ----
  const limits = () => Object.fromEntries((plan?.pools ?? []).map((p) => [p.pool, p.maxInFlight]));
  const runOptions = (mode: 'apply' | 'rollback', name: string): DeviceRunOptions => ({
    mode,
    steps: mode === 'apply' ? input.steps : input.rollbackSteps,
    provable: mode === 'apply' ? input.provable : true,
    limits: limits(),
    applyTimeoutMs: spec.applyTimeout,
    offline: spec.offline,
    ...(spec.window ? { window: spec.window } : {}),
    phaseName: name,
    failurePolicy: { maxFailureRatio: spec.maxFailureRatio, minSample: spec.minSample },
  });
  const applyHooks = { setState: setDevice, isPaused, isStopped };
  // Compensation is never held by a pause: it is what an operator's abort or a failed gate asked for.
  const rollbackHooks = { setState: setDevice, isPaused: () => false, isStopped: () => false };
  const background: Promise<void>[] = [];

  async function runBatch(batch: DeviceSnapshot[], mode: 'apply' | 'rollback', name: string): Promise<Pick<DeviceRunResult, 'tally' | 'tripped' | 'started'>> {
    const opts = runOptions(mode, name);
    if (batch.length <= sliceSize) {
      const result = await runDevices(batch, opts, mode === 'apply' ? applyHooks : rollbackHooks);
      background.push(result.background);
      return result;
    }
    const total = { tally: { succeeded: 0, failed: 0 }, tripped: false, started: [] as string[] };
    for (let i = 0, k = 0; i < batch.length; i += sliceSize, k++) {
      if (mode === 'apply') {
        if (isStopped() || total.tripped) break;
        await holdWhilePaused();
        if (isStopped()) break;
      }
      const slice = batch.slice(i, i + sliceSize);
      activeSlice = await wf.startChild(rolloutSliceWorkflow, {
        workflowId: `${input.rolloutId}/${info.runId.slice(0, 8)}/${mode}-${name.replace(/\s+/g, '_')}-${k}`,
        args: [{ devices: slice, options: opts, tallyBefore: total.tally, paused: mode === 'apply' && isPaused() }],
        staticSummary: `${mode} ${name}: slice ${k + 1} of ${Math.ceil(batch.length / sliceSize)} (${slice.length} devices)`,
      });
      const result: SliceResult = await activeSlice.result();
      activeSlice = undefined;
      // One details refresh for the whole slice: per device, it would rebuild the table 200 times over
      // a fleet that may hold 10,000 devices, inside one workflow task.
      for (const [id, deviceState, reason] of result.devices) setDevice(id, deviceState, reason, false);
      wf.setCurrentDetails(progressTable(status()));
      total.tally.succeeded += result.tally.succeeded;
      total.tally.failed += result.tally.failed;
      total.tripped ||= result.tripped;
      total.started.push(...result.started);
    }
    return total;
  }

  /** Every device this rollout changed goes back to fromRevision, in reverse order, within the budget. */
  async function compensate(trigger: string, by: string): Promise<void> {
    await Promise.all(background);
    const toUndo = [...touched].reverse().map((id) => snapshot.find((d) => d.id === id)!);
    phaseName = 'rollback';
    publish();
    await audit('rollback.started', { phase: 'rollback', by, reason: trigger, evidence: { devices: toUndo.length } });
    await runBatch(toUndo, 'rollback', 'rollback');
    const failed = toUndo.filter((d) => devices.get(d.id)?.state === 'rollback-failed').map((d) => d.id);
    await audit('rollback.completed', { phase: 'rollback', by, reason: trigger, evidence: { rolledBack: toUndo.length - failed.length, rollbackFailed: failed } });
  }

  /** Devices that never started are recorded as skipped with the reason, so none is left without a state. */
  const skipUnstarted = (reason: string) => {
    for (const d of devices.values()) if (d.state === 'pending') setDevice(d.id, 'skipped', reason, false);
    wf.setCurrentDetails(progressTable(status()));
  };

  const finish = async (final: RolloutState, event: AuditEventName, reason?: string) => {
    state = final;
    phaseName = 'done';
    pausedReason = undefined;
    await audit(event, { phase: null, reason: reason ?? null });
    await auditChain;
    publish();
    return status();
  };

  /** The failure policy: roll back when `rollback.on` names this trigger, else pause for an operator. */
  async function onFailure(trigger: 'healthGate-fail' | 'failure-gate', evidence: string): Promise<'rolled-back' | 'continue' | 'aborted'> {
    const policy = spec.rollback.on;
    if (policy === 'both' || policy === trigger) {
      await compensate(`${trigger}: ${evidence}`, 'wavegate');
      skipUnstarted(`not started: rolled back after ${trigger}`);
      return 'rolled-back';
    }
    state = 'paused';
    pausedReason = `${trigger}: ${evidence} — resume to continue, or abort`;
    await audit('rollout.paused', { reason: pausedReason });
    publish();
    await holdWhilePaused();
    return isStopped() ? 'aborted' : 'continue';
  }

  const healthCheck = wf.proxyActivities<Acts>({
    startToCloseTimeout: spec.healthTimeout + 30_000,
    heartbeatTimeout: '30 seconds',
    // A check that cannot answer is inconclusive by itself; retrying it only hides the evidence.
    retry: { maximumAttempts: 2 },
  }).runHealthCheck;

  async function runHealthGate(phase: PlannedPhase): Promise<{ outcome: GateOutcome; results: CheckResult[] }> {
    const changed = snapshot.filter((d) => d.updateClass !== 'best-effort' && ['applied', 'claimed'].includes(devices.get(d.id)?.state ?? ''));
    const results: CheckResult[] = [];
    for (const check of phase.healthGate) {
      for (let i = 0; i < Math.max(changed.length, 1); i += HEALTH_CHUNK) {
        const chunk = changed.slice(i, i + HEALTH_CHUNK);
        try {
          results.push(
            await healthCheck.executeWithOptions({ summary: `health gate after ${phase.name}: ${check}` }, [
              { check, devices: chunk, runtimes: input.profile.runtimes, ...(input.profile.metrics ? { metrics: input.profile.metrics } : {}), timeoutMs: spec.healthTimeout },
            ]),
          );
        } catch (err) {
          if (wf.isCancellation(err)) throw err;
          // A probe that could not run is a fact we could not read: inconclusive, never a pass.
          results.push({ check, outcome: 'inconclusive', evidence: `probe failed: ${rootMessage(err)}`.slice(0, 300), durationMs: 0 });
        }
      }
    }
    return evaluateHealthGate(results);
  }

  /** The nightly canary: the first phase, its gate and health gate; the outcome is the verdict. */
  async function runCanary(phase: PlannedPhase | undefined): Promise<RolloutStatus> {
    for (const ps of phases.slice(1)) ps.stage = 'stopped';
    skipUnstartedBeyond(phase?.index ?? -1, 'not in the canary phase');
    if (!phase) {
      verdict = 'nothing-to-test';
      await audit('canary.verdict', { phase: null, reason: 'no device needs the revision', evidence: { verdict } });
      return finish('completed', 'rollout.completed', 'canary: nothing to test');
    }
    const ps = phases[phase.index]!;
    phaseName = phase.name;
    ps.stage = 'applying';
    publish();
    await audit('phase.started', { evidence: { devices: phase.devices.length, gate: phase.gate, canary: true } });
    const batch = phase.devices.filter((id) => devices.get(id)?.state === 'pending').map((id) => snapshot.find((d) => d.id === id)!);
    const result = await runBatch(batch, 'apply', phase.name);
    touched.push(...result.started);
    await audit('phase.applied', { evidence: { tally: result.tally } });
    let evidence: string[];
    if (result.tally.failed > 0 || result.tally.succeeded === 0) {
      verdict = 'fail';
      evidence = [`${result.tally.failed} of ${result.tally.failed + result.tally.succeeded} canary devices failed to apply`];
    } else {
      ps.stage = 'gate';
      publish();
      if (phase.gate !== 'manual') await wf.condition(isStopped, phase.gate, { summary: `gate after ${phase.name}` });
      const gate = await runHealthGate(phase);
      verdict = gate.outcome;
      evidence = gate.results.map((r) => `${r.check}: ${r.outcome} — ${r.evidence}`);
    }
    ps.gateOutcome = verdict;
    ps.evidence = evidence;
    ps.stage = verdict === 'pass' ? 'passed' : verdict === 'fail' ? 'failed' : 'inconclusive';
    await audit('canary.verdict', { reason: verdict, evidence: { verdict, evidence, kept: input.canary!.keep } });
    publish();
    if (!input.canary!.keep) await compensate(`canary verdict ${verdict}: put the canary back`, 'wavegate');
    return finish('completed', 'rollout.completed', `canary verdict: ${verdict}`);
  }

  const skipUnstartedBeyond = (index: number, reason: string) => {
    for (const d of devices.values()) if (d.state === 'pending' && d.phase !== index) setDevice(d.id, 'skipped', reason, false);
    wf.setCurrentDetails(progressTable(status()));
  };

  const main = async (): Promise<RolloutStatus> => {
    publish();
    await audit('rollout.started', { phase: null, by: input.startedBy, evidence: { from: spec.fromRevision, to: spec.toRevision, phases: spec.phases.length } });

    // 1. Snapshot the membership in scope, page by page (a 10,000-device fleet is not one payload).
    for (let offset = 0; ; offset += SNAPSHOT_PAGE) {
      const page = await snapshotFleet.executeWithOptions({ summary: `snapshot ${spec.profile} fleet from #${offset}` }, [
        { inventoryPath: input.inventoryPath, profile: spec.profile, scope: input.profile.scope, offset, limit: SNAPSHOT_PAGE },
      ]);
      snapshot.push(...page.devices);
      if (offset + SNAPSHOT_PAGE >= page.total) break;
    }

    // 2. Plan: deterministic from the rollout id.
    plan = planPhases({
      rolloutId: input.rolloutId,
      spec,
      devices: snapshot.map((d) => ({ id: d.id, pool: d.pool, class: d.class, os: d.os, updateClass: d.updateClass, current: d.current, reachable: d.reachable })),
      pools: Object.fromEntries(Object.entries(input.poolBudgets).map(([pool, budget]) => [pool, { disruptionBudget: budget }])),
      risk: input.risk,
    });
    warnings.push(...plan.warnings);
    for (const { id, reason } of plan.notForMe) devices.set(id, { id, state: 'skipped', phase: -1, reason: `not-for-me: ${reason}` });
    for (const id of plan.alreadyApplied) devices.set(id, { id, state: 'applied', phase: -1, reason: 'already at target' });
    const byId = new Map(snapshot.map((d) => [d.id, d]));
    for (const phase of plan.phases) {
      phases.push({ index: phase.index, name: phase.name, devices: phase.devices.length, gate: phase.gate, stage: 'pending' });
      for (const id of phase.devices) {
        const d = byId.get(id)!;
        if (!d.reachable && spec.offline !== 'wait') {
          const offline = spec.offline === 'fail' ? 'failed' : 'skipped';
          devices.set(id, { id, state: offline, phase: phase.index, reason: `offline at snapshot: ${d.error ?? 'unreachable'}` });
        } else devices.set(id, { id, state: 'pending', phase: phase.index });
      }
    }
    publish();

    if (input.canary) return runCanary(plan.phases[0]);

    // 3-5. Each phase: apply, failure gate, gate timer, health gate.
    for (const phase of plan.phases) {
      const ps = phases[phase.index]!;
      await holdWhilePaused();
      if (isStopped()) break;
      phaseName = phase.name;
      ps.stage = 'applying';
      publish();
      await audit('phase.started', { evidence: { devices: phase.devices.length, gate: phase.gate } });
      const batch = phase.devices.filter((id) => devices.get(id)?.state === 'pending').map((id) => byId.get(id)!);
      touched.push(...batch.map((d) => d.id));
      const offlineFailed = phase.devices.filter((id) => devices.get(id)?.state === 'failed').length;
      const result = await runBatch(batch, 'apply', phase.name);
      // Devices the batch never started (abort, tripped gate) were not changed: keep compensation exact.
      const startedSet = new Set(result.started);
      for (const id of batch.map((d) => d.id)) if (!startedSet.has(id)) touched.splice(touched.indexOf(id), 1);
      await audit('phase.applied', { evidence: { tally: result.tally } });
      if (isStopped()) {
        ps.stage = 'stopped';
        break;
      }

      // 4. Failure gate over the phase.
      const tally = { succeeded: result.tally.succeeded, failed: result.tally.failed + offlineFailed };
      if (result.tripped || (offlineFailed > 0 && tally.failed / (tally.succeeded + tally.failed) > spec.maxFailureRatio)) {
        ps.stage = 'failed';
        const evidence = `${tally.failed} of ${tally.succeeded + tally.failed} devices failed in ${phase.name} (max ratio ${spec.maxFailureRatio})`;
        await audit('gate.failed', { reason: 'failure-gate', evidence: { tally } });
        const verdict = await onFailure('failure-gate', evidence);
        if (verdict === 'rolled-back') return finish('rolled-back', 'rollout.failed', `failure gate: ${evidence}`);
        if (verdict === 'aborted') break;
      }

      // 5. Gate: timer (abort interrupts it; pause holds the advance) or manual approval, then health.
      // After an inconclusive gate and a resume, health is checked again at once: the time has passed.
      for (let recheck = false; ; recheck = true) {
        if (!recheck && phase.gate === 'manual') {
          ps.stage = 'awaiting-approval';
          awaitingApproval = { index: phase.index, name: phase.name };
          publish();
          await wf.condition(() => approved.has(phase.index) || isStopped());
          awaitingApproval = undefined;
        } else if (!recheck) {
          ps.stage = 'gate';
          publish();
          await wf.condition(isStopped, phase.gate, { summary: `gate after ${phase.name}` });
        }
        await holdWhilePaused();
        if (isStopped()) break;
        const gate = await runHealthGate(phase);
        ps.gateOutcome = gate.outcome;
        ps.evidence = gate.results.map((r) => `${r.check}: ${r.outcome} — ${r.evidence}`);
        if (gate.outcome === 'pass') {
          ps.stage = 'passed';
          await audit('gate.passed', { evidence: gate.results });
          break;
        }
        if (gate.outcome === 'fail' || spec.onInconclusive === 'fail') {
          ps.stage = 'failed';
          await audit(gate.outcome === 'fail' ? 'gate.failed' : 'gate.inconclusive', { evidence: gate.results });
          const verdict = await onFailure('healthGate-fail', ps.evidence.join('; '));
          if (verdict === 'rolled-back') return finish('rolled-back', 'rollout.failed', `health gate failed after ${phase.name}`);
          break; // continue (operator resumed) or aborted (handled below)
        }
        // Inconclusive never advances: pause for an operator, then check again after resume.
        ps.stage = 'inconclusive';
        await audit('gate.inconclusive', { evidence: gate.results });
        state = 'paused';
        pausedReason = `health gate inconclusive after ${phase.name}: ${ps.evidence.join('; ')}`;
        await audit('rollout.paused', { reason: pausedReason });
        publish();
        await holdWhilePaused();
        if (isStopped()) break;
      }
      if (isStopped()) break;
    }

    if (abort) {
      const { rollback, reason, by } = abort;
      for (const ps of phases) if (ps.stage === 'pending' || ps.stage === 'awaiting-approval' || ps.stage === 'gate') ps.stage = 'stopped';
      skipUnstarted(`not started: aborted by ${by}`);
      if (rollback) await compensate(`abort: ${reason}`, by);
      return finish('aborted', 'rollout.aborted', reason);
    }
    await Promise.all(background);
    return finish('completed', 'rollout.completed');
  };

  try {
    return await main();
  } catch (err) {
    if (wf.isCancellation(err)) {
      // A cancel (e.g. from the Web UI) still puts every changed device back before the workflow closes.
      await wf.CancellationScope.nonCancellable(async () => {
        record('cancel', { by: 'temporal-cancel' }, true);
        pausedReason = undefined;
        awaitingApproval = undefined;
        for (const ps of phases) if (ps.stage === 'pending' || ps.stage === 'awaiting-approval' || ps.stage === 'gate' || ps.stage === 'applying') ps.stage = 'stopped';
        skipUnstarted('not started: rollout cancelled');
        await compensate('cancelled', 'temporal-cancel');
        state = 'cancelled';
        phaseName = 'done';
        await audit('rollout.cancelled', { phase: null, by: 'temporal-cancel' });
        await auditChain;
        publish();
      });
    } else {
      await wf.CancellationScope.nonCancellable(async () => {
        state = 'failed';
        await audit('rollout.failed', { phase: null, reason: rootMessage(err) }).catch(() => {});
        publish();
      });
    }
    throw err;
  }
}

/** The live progress table shown in the Web UI's current details (markdown). */
function progressTable(s: RolloutStatus): string {
  const phaseRows = s.phases.map((p) => `| ${p.index} | ${p.name} | ${p.devices} | ${p.stage}${p.gateOutcome ? ` (${p.gateOutcome})` : ''} |`);
  const active = s.devices.filter((d) => d.state !== 'pending').slice(-30);
  const rows = active.map((d) => `| ${d.id} | ${d.state} | ${d.reason ?? ''} |`);
  return [
    `**${s.profile}** r${s.fromRevision} → r${s.toRevision}: **${s.state}**, phase *${s.phase}*${s.pausedReason ? ` — ${s.pausedReason}` : ''}`,
    '',
    summarizeCounts(s.counts),
    '',
    '| # | phase | devices | stage |',
    '|---|---|---|---|',
    ...phaseRows,
    '',
    '| device | state | note |',
    '|---|---|---|',
    ...rows,
  ].join('\n');
}
