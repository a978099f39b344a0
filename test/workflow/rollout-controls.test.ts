import { WorkflowFailedError, WorkflowUpdateFailedError } from '@temporalio/client';
import { describe, expect, it } from 'vitest';
import { readAuditFile } from '../../audit/file';
import { verifyAuditChain } from '../../core/audit';
import { demoDevices, type SimDeviceSpec } from '../../sim';
import {
  abortUpdate,
  approveUpdate,
  pauseSignal,
  pauseUpdate,
  resumeUpdate,
  type RolloutStatus,
} from '../../contracts/rollout';
import { recordHistory } from '../support/histories';
import { realRollouts } from '../support/real-rollouts';
import { rejection } from '../support/refusal';
import { APPLY_COMMAND, markerOf, verifiesAt, waitForStatus } from '../support/rollout-helpers';

/**
 * The rollout workflow's control and failure paths on a real Temporal dev server, with the real
 * activities applying over SSH to the fleet simulator. Each test gets its own fleet and audit dir.
 */
describe('rollout workflow: gates, failures, compensation and controls', () => {
  const real = realRollouts('demo-controls');
  const { auditDir } = real;
  const setup = (
    rollout: Record<string, unknown>,
    devices: SimDeviceSpec[] = demoDevices(12),
    budgets?: Record<string, number>,
  ) => real.rollout(rollout, devices, budgets);

  const byPhase = (s: RolloutStatus, phase: number) => s.devices.filter((d) => d.phase === phase).map((d) => d.id);
  /** The phase-level story of the trail (per-device records, checked where they matter, filtered out). */
  const events = (rolloutId: string) =>
    readAuditFile(auditDir, rolloutId)
      .map((r) => r.event)
      .filter((e) => !e.startsWith('devices.'));

  it('canary health-gate failure: only the canary is rolled back, the rollout ends rolled-back', async () => {
    const { fleet, input } = await setup({
      gate: '1s',
      phases: [{ canary: '1 device', healthGate: ['all-runtimes-healthy'] }, { bulk: '25%' }, { bulk: 'remainder' }],
    });
    for (const d of fleet.devices) await fleet.setFaults(d.id, { unhealthyRuntimes: ['motd'] });
    const handle = await real.start(input);
    const result = await handle.result();
    await recordHistory(handle, 'canary-health-fail');

    expect(result.state).toBe('rolled-back');
    const [canary] = byPhase(result, 0);
    expect(result.devices.find((d) => d.id === canary)).toMatchObject({ state: 'rolled-back' });
    // The canary is back on revision 1, proven by revision 1's own verify, not only by the marker.
    expect(markerOf(fleet, canary!)).toBe(1);
    expect(verifiesAt(fleet, canary!, 1)).toBe(true);
    expect(verifiesAt(fleet, canary!, 2)).toBe(false);
    // Nobody else was touched: no apply ran, every other device is recorded as not started.
    for (const d of fleet.devices.filter((x) => x.id !== canary)) {
      expect(fleet.count(d.id, APPLY_COMMAND)).toBe(0);
      expect(result.devices.find((x) => x.id === d.id)!.state).toBe('not-started');
    }
    expect(result.phases[0]).toMatchObject({ stage: 'failed', gateOutcome: 'fail' });
    expect(result.phases[0]!.evidence!.join(' ')).toContain(canary!);
    expect(events(input.rolloutId)).toEqual([
      'rollout.started',
      'phase.started',
      'phase.applied',
      'gate.failed',
      'rollback.started',
      'rollback.completed',
      'rollout.failed',
    ]);
  });

  it('bulk failure gate: every device changed by the rollout goes back to fromRevision', async () => {
    const { fleet, input } = await setup({
      maxFailureRatio: 0.1,
      minSample: 3,
      phases: [
        { canary: '1 device', gate: 'manual' },
        { bulk: 'remainder', gate: '1s' },
      ],
      rollback: { on: 'failure-gate' },
    });
    const handle = await real.start(input);
    const waiting = await waitForStatus(handle, (s) => s.phases[0]?.stage === 'awaiting-approval');
    const [canary] = byPhase(waiting, 0);
    expect(markerOf(fleet, canary!)).toBe(2);
    // From now on revision 2's verify fails everywhere (apply "succeeds" but the fact is not there).
    for (const d of fleet.devices) await fleet.setFaults(d.id, { failCommand: "grep -qx 'wavegate demo revision 2" });
    await handle.executeUpdate(approveUpdate, { args: [{ by: 'test', reason: 'canary looks fine' }] });
    const result = await handle.result();
    await recordHistory(handle, 'bulk-failure-gate');

    expect(result.state).toBe('rolled-back');
    const touched = result.devices.filter((d) => d.state === 'rolled-back').map((d) => d.id);
    expect(touched).toContain(canary);
    expect(touched.length).toBeGreaterThanOrEqual(1 + 3); // the canary and at least the minimum sample
    for (const id of touched) {
      expect(markerOf(fleet, id)).toBe(1);
      expect(verifiesAt(fleet, id, 1)).toBe(true);
    }
    // Devices the tripped gate never started are recorded as not started and were never applied.
    const skipped = result.devices.filter((d) => d.state === 'not-started');
    expect(skipped.length + touched.length).toBe(12);
    for (const d of skipped) expect(fleet.count(d.id, APPLY_COMMAND)).toBe(0);
    expect(result.controls).toEqual([expect.objectContaining({ control: 'approve', by: 'test', accepted: true })]);
    const audit = readAuditFile(auditDir, input.rolloutId);
    expect(verifyAuditChain(audit)).toEqual({ ok: true, count: audit.length });
    expect(audit.map((r) => r.event)).toContain('rollout.approved');
    expect(audit.find((r) => r.event === 'gate.failed')).toMatchObject({ reason: 'failure-gate' });
  });

  it('an inconclusive gate (metrics source times out) pauses and never advances; resume after recovery completes', async () => {
    const { fleet, input } = await setup({
      gate: '1s',
      healthTimeout: '2s',
      phases: [{ canary: '1 device', healthGate: ['error-rate < 0.01'] }, { bulk: 'remainder' }],
    });
    for (const d of fleet.devices) await fleet.setFaults(d.id, { errorRateHangs: true });
    const handle = await real.start(input);
    const paused = await waitForStatus(handle, (s) => s.state === 'paused');
    expect(paused.phases[0]).toMatchObject({ stage: 'inconclusive', gateOutcome: 'inconclusive' });
    expect(paused.pausedReason).toMatch(/inconclusive/);
    // Held: no bulk device starts while the gate is inconclusive.
    await new Promise((r) => setTimeout(r, 3_000));
    const bulk = byPhase(paused, 1);
    for (const id of bulk) expect(fleet.count(id, APPLY_COMMAND)).toBe(0);
    expect((await handle.query<RolloutStatus>('status')).state).toBe('paused');

    for (const d of fleet.devices) await fleet.setFaults(d.id, {});
    const resumed = await handle.executeUpdate(resumeUpdate, { args: [{ by: 'test', reason: 'metrics back' }] });
    expect(resumed.state).toBe('running');
    const result = await handle.result();
    await recordHistory(handle, 'inconclusive-resume');
    expect(result.state).toBe('completed');
    expect(result.counts.applied).toBe(12);
    expect(events(input.rolloutId)).toEqual(
      expect.arrayContaining([
        'gate.inconclusive',
        'rollout.paused',
        'rollout.resumed',
        'gate.passed',
        'rollout.completed',
      ]),
    );
  });

  it('pause mid-phase: no device starts after the pause is acknowledged; resume continues to completion', async () => {
    // One device in flight per pool and slow commands, so the phase takes a while.
    const { fleet, input } = await setup({ gate: '1s', phases: [{ bulk: 'remainder' }] }, demoDevices(8), {
      'pool-a': 0.01,
      'pool-b': 0.01,
    });
    for (const d of fleet.devices) await fleet.setFaults(d.id, { latencyMs: 150 });
    const handle = await real.start(input);
    await waitForStatus(handle, (s) => s.counts.applied >= 2);
    const ack = await handle.executeUpdate(pauseUpdate, { args: [{ by: 'test', reason: 'look at the graphs' }] });
    expect(ack.state).toBe('paused');
    const startedAtAck = new Set(ack.devices.filter((d) => d.state !== 'pending').map((d) => d.id));
    await waitForStatus(handle, (s) => s.counts.applying === 0);
    await new Promise((r) => setTimeout(r, 2_000));
    const held = await handle.query<RolloutStatus>('status');
    expect(held.state).toBe('paused');
    for (const d of fleet.devices) {
      // Not even a verify-first ran on a device not started at the ack (the snapshot contacts no device).
      if (!startedAtAck.has(d.id)) expect(fleet.commands(d.id).map((c) => c.command)).toEqual([]);
    }
    expect(held.devices.filter((d) => d.state === 'pending').length).toBe(8 - startedAtAck.size);

    // A second pause is an invalid transition: refused at once, naming the current state.
    const refused = await rejection(
      handle.executeUpdate(pauseUpdate, { args: [{ by: 'test' }] }),
      WorkflowUpdateFailedError,
    );
    expect(refused).toBeInstanceOf(WorkflowUpdateFailedError);
    expect(String((refused as { cause?: Error }).cause?.message)).toContain('rollout is paused');

    await handle.executeUpdate(resumeUpdate, { args: [{ by: 'test' }] });
    const result = await handle.result();
    await recordHistory(handle, 'pause-resume');
    expect(result.state).toBe('completed');
    expect(result.counts.applied).toBe(8);
    for (const d of fleet.devices) expect(fleet.count(d.id, APPLY_COMMAND)).toBe(1);
    expect(result.controls.map((c) => [c.control, c.accepted])).toEqual([
      ['pause', true],
      ['resume', true],
    ]);
  });

  it('abort without rollback leaves the changed devices as they are; abort with rollback puts them back', async () => {
    for (const rollback of [false, true]) {
      const { fleet, input } = await setup({ phases: [{ canary: '1 device', gate: 'manual' }, { bulk: 'remainder' }] });
      const handle = await real.start(input);
      const waiting = await waitForStatus(handle, (s) => s.phases[0]?.stage === 'awaiting-approval');
      const [canary] = byPhase(waiting, 0);
      await handle.executeUpdate(abortUpdate, { args: [{ by: 'test', reason: 'wrong revision', rollback }] });
      const result = await handle.result();
      await recordHistory(handle, `abort-rollback-${rollback}`);
      expect(result.state).toBe('aborted');
      expect(markerOf(fleet, canary!)).toBe(rollback ? 1 : 2);
      expect(verifiesAt(fleet, canary!, rollback ? 1 : 2)).toBe(true);
      expect(result.devices.find((d) => d.id === canary)!.state).toBe(rollback ? 'rolled-back' : 'applied');
      for (const id of byPhase(result, 1)) {
        expect(result.devices.find((d) => d.id === id)).toMatchObject({
          state: 'not-started',
          reason: 'aborted by test',
        });
        expect(fleet.count(id, APPLY_COMMAND)).toBe(0);
      }
      // Aborting an aborted rollout is refused: it is final.
      const again = await rejection(handle.executeUpdate(abortUpdate, { args: [{ by: 'test' }] }), Error);
      expect(again).toBeInstanceOf(Error);
    }
  });

  it('cancel (as from the Web UI) runs the compensation, then the workflow closes as cancelled', async () => {
    const { fleet, input } = await setup({ phases: [{ canary: '1 device', gate: 'manual' }, { bulk: 'remainder' }] });
    const handle = await real.start(input);
    const waiting = await waitForStatus(handle, (s) => s.phases[0]?.stage === 'awaiting-approval');
    const [canary] = byPhase(waiting, 0);
    expect(markerOf(fleet, canary!)).toBe(2);
    await handle.cancel();
    const err = await rejection(handle.result(), WorkflowFailedError);
    await recordHistory(handle, 'cancel-compensates');
    expect(err).toBeInstanceOf(WorkflowFailedError);
    expect((await handle.describe()).status.name).toBe('CANCELLED');
    expect(markerOf(fleet, canary!)).toBe(1);
    expect(verifiesAt(fleet, canary!, 1)).toBe(true);
    const trail = events(input.rolloutId);
    expect(trail.slice(-3)).toEqual(['rollback.started', 'rollback.completed', 'rollout.cancelled']);
  });

  it('canary mode: a cancel while the canary is applying puts the canary back on the fleet revision', async () => {
    const { fleet, input } = await setup(
      { gate: '1s', phases: [{ canary: '1 device' }, { bulk: 'remainder' }] },
      demoDevices(4),
    );
    for (const d of fleet.devices) await fleet.setFaults(d.id, { latencyMs: 1_500 });
    const handle = await real.start({ ...input, canary: { keep: true } });
    const applying = await waitForStatus(handle, (s) => s.counts.applying === 1);
    const canary = applying.devices.find((d) => d.state === 'applying')!.id;
    await handle.cancel();
    const err = await rejection(handle.result(), WorkflowFailedError);
    expect(err).toBeInstanceOf(WorkflowFailedError);
    expect((await handle.describe()).status.name).toBe('CANCELLED');
    const trail = events(input.rolloutId);
    expect(trail.slice(-3)).toEqual(['rollback.started', 'rollback.completed', 'rollout.cancelled']);
    const final = await handle.query<RolloutStatus>('status');
    // With its reason, so a failure says why the compensation failed.
    const back = final.devices.find((d) => d.id === canary)!;
    expect(back.state, back.reason).toBe('rolled-back');
    // The fact, read back with the fleet revision's own verify, and still so once nothing runs any more.
    await new Promise((r) => setTimeout(r, 4_000));
    expect(markerOf(fleet, canary)).toBe(1);
    expect(verifiesAt(fleet, canary, 1)).toBe(true);
    for (const d of fleet.devices) if (d.id !== canary) expect(fleet.count(d.id, APPLY_COMMAND)).toBe(0);
  });

  it('a device that refuses us at its apply (changed host key) fails with the reason named and trips the failure gate, never skipped as offline', async () => {
    const { fleet, input } = await setup(
      { gate: '1s', maxFailureRatio: 0.1, phases: [{ bulk: 'remainder' }] },
      demoDevices(6),
    );
    fleet.rotateHostKey('edge-03');
    const handle = await real.start(input);
    const paused = await waitForStatus(handle, (s) => s.state === 'paused');
    // The snapshot contacts no device: the apply meets the changed key, before any command runs.
    expect(paused.devices.find((d) => d.id === 'edge-03')).toMatchObject({
      state: 'failed',
      reason: expect.stringMatching(/^edge-03: host key .* does not match the pinned /),
    });
    // Learned while the phase runs: the gate may trip once its minimum sample (the spec's default
    // minSample, 3) is in, before all six are; devices still in flight then may add to the count.
    expect(paused.pausedReason).toMatch(/^failure-gate: 1 of [3-6] devices failed/);
    expect(fleet.count('edge-03', APPLY_COMMAND)).toBe(0);
    await handle.executeUpdate(abortUpdate, { args: [{ by: 'test', rollback: false }] });
    expect((await handle.result()).state).toBe('aborted');
    expect(events(input.rolloutId)).toContain('gate.failed');
    // The trail names what happened to that device, with the kind.
    const applied = readAuditFile(auditDir, input.rolloutId).filter(
      (r) => r.event === 'devices.outcome' && (r.evidence as { mode: string }).mode === 'apply',
    );
    expect(
      applied
        .flatMap((r) => (r.evidence as { devices: Array<{ id: string }> }).devices)
        .find((d) => d.id === 'edge-03'),
    ).toEqual({
      id: 'edge-03',
      state: 'failed',
      reason: expect.stringMatching(/host key .* does not match the pinned/),
    });
  });

  it('offline devices are skipped and reported, a best-effort failure is not counted, left-behind is never contacted', async () => {
    const devices = demoDevices(8);
    devices[1]!.updateClass = 'best-effort';
    devices[2]!.updateClass = 'left-behind';
    const { fleet, input } = await setup({ gate: '1s', maxFailureRatio: 0, phases: [{ bulk: 'remainder' }] }, devices);
    await fleet.setFaults('edge-01', { offline: true });
    await fleet.setFaults('edge-02', { failCommand: 'install -m 0644' });
    const handle = await real.start(input);
    const result = await handle.result();
    await recordHistory(handle, 'offline-besteffort-leftbehind');

    expect(result.state).toBe('completed'); // maxFailureRatio 0: a counted failure would have tripped it
    expect(result.devices.find((d) => d.id === 'edge-01')).toMatchObject({
      state: 'skipped',
      reason: expect.stringMatching(/^offline at apply: edge-01: cannot connect/),
    });
    expect(result.devices.find((d) => d.id === 'edge-02')).toMatchObject({
      state: 'failed',
      reason: expect.stringMatching(/^best-effort, not counted: edge-02: apply exited 1/),
    });
    expect(result.devices.find((d) => d.id === 'edge-03')).toMatchObject({
      state: 'not-for-me',
      reason: expect.stringMatching(/^left-behind/),
    });
    expect(fleet.commands('edge-03')).toEqual([]);
    expect(result.counts).toMatchObject({ applied: 5, failed: 1, skipped: 1, 'not-for-me': 1, total: 8 });
  });

  it('applyTimeout bounds a hung device, retries included; offline: fail records an unreachable device as failed', async () => {
    const { fleet, input } = await setup(
      { gate: '1s', applyTimeout: '3s', offline: 'fail', maxFailureRatio: 0.5, phases: [{ bulk: 'remainder' }] },
      demoDevices(6),
    );
    await fleet.setFaults('edge-01', { hangCommand: 'install -m 0644' });
    await fleet.setFaults('edge-02', { offline: true });
    const handle = await real.start(input);
    const result = await handle.result();
    expect(result.state).toBe('completed'); // 2 of 6 failed: under the 0.5 ratio
    expect(result.devices.find((d) => d.id === 'edge-01')).toMatchObject({
      state: 'failed',
      reason: expect.stringMatching(/timed? ?out/i),
    });
    expect(result.devices.find((d) => d.id === 'edge-02')).toMatchObject({
      state: 'failed',
      reason: expect.stringMatching(/^offline at apply/),
    });
    expect(result.counts).toMatchObject({ applied: 4, failed: 2 });
    // The hung apply was never run to completion, and the other devices were not held up by it.
    expect(
      fleet
        .commands('edge-01')
        .filter((c) => APPLY_COMMAND.test(c.command))
        .every((c) => c.exitCode === null),
    ).toBe(true);
  });

  it('a Web UI style signal without a name is recorded as from "signal"; an invalid signal is ignored and recorded', async () => {
    const { input } = await setup({ phases: [{ canary: '1 device', gate: 'manual' }, { bulk: 'remainder' }] });
    const handle = await real.start(input);
    await waitForStatus(handle, (s) => s.phases[0]?.stage === 'awaiting-approval');
    await handle.signal(pauseSignal, {});
    await handle.signal(pauseSignal, { by: 'web-ui', reason: 'twice' });
    const s = await waitForStatus(handle, (x) => x.controls.length === 2);
    expect(s.state).toBe('paused');
    expect(s.controls[0]).toMatchObject({ control: 'pause', by: 'signal', accepted: true });
    expect(s.controls[1]).toMatchObject({
      control: 'pause',
      by: 'web-ui',
      accepted: false,
      note: expect.stringContaining('rollout is paused'),
    });
    await handle.executeUpdate(abortUpdate, { args: [{ by: 'test', rollback: true }] });
    expect((await handle.result()).state).toBe('aborted');
  });
});
