import { describe, expect, it } from 'vitest';
import { readAuditFile } from '../../audit/file';
import { verifyAuditChain, type AuditRecord } from '../../core/audit';
import { demoDevices, type SimDeviceSpec } from '../../sim';
import { pauseSignal, resumeSignal, type RolloutStatus } from '../../contracts/rollout';
import { recordHistory } from '../support/histories';
import { realRollouts } from '../support/real-rollouts';
import { APPLY_COMMAND, markerOf, verifiesAt, waitForStatus } from '../support/rollout-helpers';
import { startTimeSkippingEnv } from '../support/temporal';

const MIN = 60_000;

/**
 * Progress deadlines (issue 14 item 1) on the time-skipping test server, with the real activities
 * applying over SSH to the fleet simulator. Hours of gates and pauses pass in skipped time: a test only
 * advances the clock where it says so (env.sleep, or awaiting the result).
 */
describe('rollout deadlines: pause, abort, rollback, and paused time never counts', () => {
  const real = realRollouts('demo-deadlines', { startEnv: startTimeSkippingEnv });
  const { auditDir } = real;
  const setup = (rollout: Record<string, unknown>, devices: SimDeviceSpec[] = demoDevices(4)) =>
    real.rollout(rollout, devices);
  const idsIn = (s: RolloutStatus, phase: number) =>
    s.devices
      .filter((d) => d.phase === phase)
      .map((d) => d.id)
      .sort();
  const trail = (rolloutId: string): AuditRecord[] => readAuditFile(auditDir, rolloutId);
  const story = (rolloutId: string) =>
    trail(rolloutId)
      .map((r) => r.event)
      .filter((e) => !e.startsWith('devices.'));
  type PassedEvidence = {
    kind: string;
    action: string;
    limitMs: number;
    activeMs: number;
    unconfirmed: string[];
    unconfirmedCount: number;
  };

  it('pause: a phase deadline passing in a long gate pauses with the unconfirmed canary named; resume finishes and it never fires again for that phase', async () => {
    const { fleet, input } = await setup({
      phaseDeadline: '30m',
      phases: [
        { canary: '1 device', gate: '2h' },
        { bulk: 'remainder', gate: '1m' },
      ],
    });
    const handle = await real.start(input);
    const inGate = await waitForStatus(handle, (s) => s.phases[0]?.stage === 'gate');
    const [canary] = idsIn(inGate, 0);

    await real.env.sleep(31 * MIN);
    const paused = await waitForStatus(handle, (s) => s.state === 'paused');
    expect(paused.pausedReason).toBe(
      'deadline: phaseDeadline 30m of phase canary 1 device passed in active time with 1 required device(s) unconfirmed',
    );
    expect(paused.deadline).toMatchObject({
      kind: 'phaseDeadline',
      phase: 'canary 1 device',
      limitMs: 30 * MIN,
      unconfirmed: [canary],
      unconfirmedCount: 1,
      action: 'pause',
    });
    expect(paused.warnings).toContain(paused.pausedReason);
    const passed = trail(input.rolloutId).filter((r) => r.event === 'deadline.passed');
    expect(passed).toHaveLength(1);
    expect(passed[0]).toMatchObject({ by: 'wavegate', phase: 'canary 1 device', reason: paused.pausedReason });
    expect(passed[0]!.evidence).toMatchObject({
      kind: 'phaseDeadline',
      action: 'pause',
      unconfirmed: [canary],
      unconfirmedCount: 1,
    });
    expect((passed[0]!.evidence as PassedEvidence).activeMs).toBeGreaterThanOrEqual(30 * MIN);
    expect(trail(input.rolloutId).find((r) => r.event === 'rollout.paused')).toMatchObject({
      by: 'wavegate',
      reason: paused.pausedReason,
    });
    // Held: no bulk device started.
    for (const id of idsIn(paused, 1)) expect(fleet.count(id, APPLY_COMMAND)).toBe(0);

    // A signal, as the Web UI sends it (the CLI's update takes the same path through the model).
    await handle.signal(resumeSignal, { by: 'test', reason: 'canary checked by hand' });
    // The canary's gate still has 1.5 h to run: active time far past its 30 m, and it does not fire again.
    const result = await handle.result();
    await recordHistory(handle, 'deadline-pause-resume');
    expect(result.state).toBe('completed');
    expect(result.counts.applied).toBe(4);
    for (const d of fleet.devices) expect(markerOf(fleet, d.id)).toBe(2);
    expect(trail(input.rolloutId).filter((r) => r.event === 'deadline.passed')).toHaveLength(1);
    expect(story(input.rolloutId)).toEqual(
      expect.arrayContaining(['deadline.passed', 'rollout.paused', 'rollout.resumed', 'rollout.completed']),
    );
    expect(verifyAuditChain(trail(input.rolloutId))).toEqual({ ok: true, count: trail(input.rolloutId).length });
  });

  it('abort: a progress deadline passing in the bulk gate stops the rollout as an abort by wavegate; changed devices stay at the target', async () => {
    const { fleet, input } = await setup({
      progressDeadline: '1h',
      onDeadline: 'abort',
      phases: [
        { canary: '1 device', gate: '10m' },
        { bulk: 'remainder', gate: '3h' },
      ],
    });
    const handle = await real.start(input);
    const result = await handle.result();
    await recordHistory(handle, 'deadline-abort');

    expect(result.state).toBe('aborted');
    const bulk = idsIn(result, 1);
    expect(result.deadline).toMatchObject({
      kind: 'progressDeadline',
      phase: 'bulk remainder',
      limitMs: 60 * MIN,
      unconfirmedCount: 3,
      action: 'abort',
    });
    // The canary passed its health gate; the bulk devices are applied but never got through theirs.
    expect([...result.deadline!.unconfirmed].sort()).toEqual(bulk);
    for (const d of fleet.devices) {
      expect(markerOf(fleet, d.id)).toBe(2);
      expect(verifiesAt(fleet, d.id, 2)).toBe(true);
    }
    expect(result.phases.map((p) => p.stage)).toEqual(['passed', 'stopped']);
    expect(result.controls).toEqual([
      expect.objectContaining({
        control: 'abort',
        by: 'wavegate',
        reason: expect.stringMatching(/^deadline: progressDeadline 1h \(in phase bulk remainder\)/),
        accepted: true,
      }),
    ]);
    expect(story(input.rolloutId).slice(-3)).toEqual(['deadline.passed', 'rollout.aborted', 'rollout.ended']);
    const aborted = trail(input.rolloutId).find((r) => r.event === 'rollout.aborted')!;
    expect(aborted).toMatchObject({
      by: 'wavegate',
      reason: result.deadline && expect.stringMatching(/^deadline: /),
      evidence: { rollback: false },
    });
    const passed = trail(input.rolloutId).find((r) => r.event === 'deadline.passed')!;
    expect([...(passed.evidence as PassedEvidence).unconfirmed].sort()).toEqual(bulk);
    // The 3-hour gate was cut short: the rollout ended about an hour (of workflow time) after it started.
    const { startTime, closeTime } = await handle.describe();
    expect(closeTime!.getTime() - startTime.getTime()).toBeLessThan(2 * 60 * MIN);
  });

  it('rollback: a phase deadline passing while slow devices apply puts back every changed device and ends rolled-back', async () => {
    const { fleet, input } = await setup({
      onDeadline: 'rollback',
      phases: [
        { canary: '1 device', gate: '10m' },
        { bulk: 'remainder', gate: '1m', phaseDeadline: '1m' },
      ],
    });
    const handle = await real.start(input);
    const inGate = await waitForStatus(handle, (s) => s.phases[0]?.stage === 'gate');
    const [canary] = idsIn(inGate, 0);
    const bulk = idsIn(inGate, 1);
    // Every bulk command now waits 70 s before it runs: a device's apply (one remote command) takes over
    // a minute, in real time (the test server skips no time while an activity runs), so the 1-minute
    // deadline passes mid-apply.
    for (const id of bulk) await fleet.setFaults(id, { latencyMs: 70_000 });
    const ended = handle.result();
    const fired = await waitForStatus(handle, (s) => s.deadline !== undefined, 180_000);
    expect(fired.deadline).toMatchObject({
      kind: 'phaseDeadline',
      phase: 'bulk remainder',
      limitMs: MIN,
      action: 'rollback',
      unconfirmedCount: 3,
    });
    expect([...fired.deadline!.unconfirmed].sort()).toEqual(bulk);
    expect(fired.devices.filter((d) => d.state === 'applying').length).toBeGreaterThan(0);
    const started = fired.devices.filter((d) => d.phase === 1 && d.state !== 'pending').map((d) => d.id);
    for (const id of bulk) await fleet.setFaults(id, {});
    const result = await ended;
    await recordHistory(handle, 'deadline-rollback');

    expect(result.state).toBe('rolled-back');
    // Everything this rollout changed, the canary and the bulk devices started (mid-apply at the deadline included), is back at r1.
    for (const id of [canary!, ...started]) {
      expect(result.devices.find((d) => d.id === id)).toMatchObject({ state: 'rolled-back' });
      expect(markerOf(fleet, id)).toBe(1);
      expect(verifiesAt(fleet, id, 1)).toBe(true);
    }
    // A device the deadline stopped before it started was never touched.
    for (const d of result.devices.filter((x) => x.phase === 1 && !started.includes(x.id))) {
      expect(d).toMatchObject({ state: 'not-started', reason: 'phaseDeadline passed (rolled back)' });
      expect(fleet.count(d.id, APPLY_COMMAND)).toBe(0);
    }
    // The devices in flight finish their apply (as after an abort), then the compensation runs.
    expect(story(input.rolloutId).slice(-6)).toEqual([
      'phase.started',
      'deadline.passed',
      'phase.applied',
      'rollback.started',
      'rollback.completed',
      'rollout.failed',
    ]);
    expect(trail(input.rolloutId).at(-1)).toMatchObject({
      event: 'rollout.failed',
      reason: expect.stringMatching(/^deadline: phaseDeadline 1m of phase bulk remainder/),
    });
    const passed = trail(input.rolloutId).find((r) => r.event === 'deadline.passed')!;
    expect([...(passed.evidence as PassedEvidence).unconfirmed].sort()).toEqual(bulk);
    expect(passed.evidence).toMatchObject({ action: 'rollback', unconfirmedCount: 3 });
  }, 300_000);

  it('a deadline passing while an operator pauses does not fire; the clock resumes on resume', async () => {
    // Case 1: 15 active minutes, a 3-hour pause, resume, done within the 30 minutes: completed, no deadline.
    {
      const { fleet, input } = await setup(
        { progressDeadline: '30m', phaseDeadline: '30m', phases: [{ bulk: 'remainder', gate: '20m' }] },
        demoDevices(3),
      );
      const handle = await real.start(input);
      await waitForStatus(handle, (s) => s.phases[0]?.stage === 'gate');
      await real.env.sleep(15 * MIN);
      await handle.signal(pauseSignal, { by: 'test', reason: 'change freeze' });
      await waitForStatus(handle, (s) => s.state === 'paused');
      await real.env.sleep(3 * 60 * MIN);
      const held = await handle.query<RolloutStatus>('status');
      expect(held.state).toBe('paused');
      expect(held.pausedReason).toBe('paused by test: change freeze');
      expect(held.deadline).toBeUndefined();
      await handle.signal(resumeSignal, { by: 'test' });
      const result = await handle.result();
      await recordHistory(handle, 'deadline-paused-not-counted');
      expect(result.state).toBe('completed');
      expect(result.deadline).toBeUndefined();
      expect(story(input.rolloutId)).not.toContain('deadline.passed');
      for (const d of fleet.devices) expect(markerOf(fleet, d.id)).toBe(2);
      const { startTime, closeTime } = await handle.describe();
      expect(closeTime!.getTime() - startTime.getTime()).toBeGreaterThan(3 * 60 * MIN);
    }
    // Case 2: the same pause, but the gate outlasts the deadline: it passes 15 active minutes after the resume.
    {
      // The canary's gate ends during the pause (a pause holds starts and the advance, not a gate's timer);
      // the bulk gate after the resume outlasts what is left of the deadline.
      const { input } = await setup(
        {
          progressDeadline: '30m',
          onDeadline: 'abort',
          phases: [
            { canary: '1 device', gate: '20m' },
            { bulk: 'remainder', gate: '1h' },
          ],
        },
        demoDevices(3),
      );
      const handle = await real.start(input);
      await waitForStatus(handle, (s) => s.phases[0]?.stage === 'gate');
      await real.env.sleep(15 * MIN);
      await handle.signal(pauseSignal, { by: 'test' });
      await waitForStatus(handle, (s) => s.state === 'paused');
      await real.env.sleep(3 * 60 * MIN);
      expect((await handle.query<RolloutStatus>('status')).deadline).toBeUndefined();
      await handle.signal(resumeSignal, { by: 'test' });
      const result = await handle.result();
      expect(result.state).toBe('aborted');
      expect(result.deadline).toMatchObject({ kind: 'progressDeadline', phase: 'bulk remainder', action: 'abort' });
      const records = trail(input.rolloutId);
      const resumedAt = Date.parse(records.find((r) => r.event === 'rollout.resumed')!.at);
      const passed = records.find((r) => r.event === 'deadline.passed')!;
      const afterResume = Date.parse(passed.at) - resumedAt;
      expect(afterResume).toBeGreaterThanOrEqual(14 * MIN);
      expect(afterResume).toBeLessThan(17 * MIN);
      expect((passed.evidence as PassedEvidence).activeMs).toBeLessThan(32 * MIN);
    }
  });
});
