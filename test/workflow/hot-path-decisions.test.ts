import { describe, expect, it } from 'vitest';
import { executionTreeShapes, HISTORY_EVENT_LIMIT, PENDING_LIMIT } from '../support/history-bounds';
import { abortUpdate, pauseUpdate, resumeUpdate, type RolloutStatus } from '../../contracts/rollout';
import { recordHistory } from '../support/histories';
import { mockDevices, type Scenario } from '../support/mock-activities';
import { waitForStatus } from '../support/rollout-helpers';
import { mockedRolloutWorker } from '../support/mocked-worker';

/**
 * Issue 12's hot path with mocked activities on a real Temporal server (beside the real-SSH tests in
 * hot-path.test.ts): a membership-only snapshot with only the canary's candidates probed, offline
 * learned at apply, no timer for a zero gate, audit appends that do not hold up the story yet hold it
 * at the first failure.
 */
describe('hot path decisions with mocked activities', () => {
  const worker = mockedRolloutWorker('hot-path', { defaults: { gate: '0s' } });
  const start = worker.start.bind(worker);
  const phases2 = [{ canary: '1 device' }, { bulk: 'remainder' }];
  const deviceRecords = (s: Scenario, mode: string) =>
    s.audit
      .filter((r) => r.event === 'devices.outcome' && (r.evidence as { mode: string }).mode === mode)
      .flatMap((r) => (r.evidence as { devices: Array<{ id: string; state: string; reason?: string }> }).devices);

  it('the snapshot contacts no device; only the canary candidates are probed, and the canary is a device that needs the change', async () => {
    // 15 of 20 devices already run the target: a canary drawn blind would most likely be one of them.
    const devices = mockDevices(20, (i) => (i < 15 ? { current: 2 } : {}));
    const { s, h } = await start({ phases: phases2 }, { devices });
    const result = await h.result();
    await recordHistory(h, 'hot-path-canary-probe');
    expect(result.state).toBe('completed');
    const canary = result.devices.filter((d) => d.phase === 0);
    expect(canary).toHaveLength(1);
    expect(devices.find((d) => d.id === canary[0]!.id)!.current).toBe(1);
    expect(s.log).toContain(`apply:${canary[0]!.id}`);
    // A handful probed (each round at least one more, at most eight rounds), never the whole fleet.
    expect(s.probed!.length).toBeGreaterThan(0);
    expect(s.probed!.length).toBeLessThanOrEqual(8);
    expect(new Set(s.probed).size).toBe(s.probed!.length);
    // The rest learn where they stand at their own apply: verify-first answers already in place.
    const laterAtTarget = result.devices.filter(
      (d) => d.phase === 1 && devices.find((x) => x.id === d.id)!.current === 2,
    );
    expect(laterAtTarget.length).toBeGreaterThan(0);
    for (const d of laterAtTarget)
      expect(d).toMatchObject({ state: 'applied', reason: 'already in place (verify only)' });
    expect(result.counts.applied).toBe(20);
  });

  it('a zero gate starts no timer, and audit appends do not hold up the next step', async () => {
    const { h } = await start({ phases: phases2 }, { devices: mockDevices(4) });
    expect((await h.result()).state).toBe('completed');
    const events = (await h.fetchHistory()).events ?? [];
    expect(events.filter((e) => e.timerStartedEventAttributes)).toHaveLength(0);
    // The canary's apply is scheduled before the phase.started record (the second) has been written.
    const appends = events.filter((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'appendAudit');
    const phaseStarted = appends[1]!;
    const written = events.find(
      (e) =>
        e.activityTaskCompletedEventAttributes &&
        Number(e.activityTaskCompletedEventAttributes.scheduledEventId) === Number(phaseStarted.eventId),
    )!;
    const firstApply = events.find(
      (e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'applyRevision',
    )!;
    expect(Number(firstApply.eventId)).toBeLessThan(Number(written.eventId));
    await recordHistory(h, 'hot-path-zero-gate-pipelined-audit');
  });

  it('a failed pipelined append holds new device starts at the next decision, and nothing is lost once the trail is whole', async () => {
    // Record 2 is the canary phase's phase.started: the canary may already be running when it fails.
    const { s, h } = await start({ phases: phases2 }, { devices: mockDevices(6), auditFailFrom: 2 });
    const held = await waitForStatus(h, (st) => st.pausedReason?.startsWith('audit trail not whole') ?? false);
    expect(held.pausedReason).toMatch(/record 2 \(phase.started\) not written/);
    await new Promise((r) => setTimeout(r, 2_000));
    const during = s.log.filter((l) => l.startsWith('apply:')).length;
    expect(during).toBeLessThanOrEqual(1); // at most the canary, started before the failure was known
    expect((await h.query<RolloutStatus>('status')).state).toBe('paused');
    await new Promise((r) => setTimeout(r, 1_000));
    expect(s.log.filter((l) => l.startsWith('apply:'))).toHaveLength(during);
    s.auditRepaired = true;
    const result = await h.result();
    await recordHistory(h, 'hot-path-audit-phase-barrier');
    expect(result.state).toBe('completed');
    expect(s.audit.map((r) => r.seq)).toEqual(s.audit.map((_, i) => i + 1));
    expect(s.audit.map((r) => r.event).filter((e) => !e.startsWith('devices.'))).toEqual([
      'rollout.started',
      'phase.started',
      'phase.applied',
      'gate.passed',
      'phase.started',
      'phase.applied',
      'gate.passed',
      'floor.confirmed',
      'rollout.completed',
    ]);
  });

  it('offline learned at apply: skipped and not counted under offline: skip, failed and counted under offline: fail', async () => {
    const devices = () =>
      mockDevices(5, (i) => (i === 2 ? { reachable: false, error: 'dev-03: cannot connect (ECONNREFUSED)' } : {}));
    const skip = await start({ phases: [{ bulk: 'remainder' }], maxFailureRatio: 0 }, { devices: devices() });
    const skipped = await skip.h.result();
    await recordHistory(skip.h, 'hot-path-offline-at-apply-skip');
    expect(skipped.state).toBe('completed'); // maxFailureRatio 0: a counted failure would have tripped it
    expect(skipped.devices.find((d) => d.id === 'dev-03')).toMatchObject({
      state: 'skipped',
      reason: expect.stringMatching(/^offline at apply: dev-03: cannot connect/),
    });
    expect(skip.s.log).toContain('offline:dev-03');
    expect(skip.s.log).not.toContain('apply:dev-03');
    expect(deviceRecords(skip.s, 'apply').find((d) => d.id === 'dev-03')).toMatchObject({
      state: 'skipped',
      reason: expect.stringMatching(/^offline at apply/),
    });
    expect(skipped.changedDevices).toBe(4);

    const fail = await start(
      { phases: [{ bulk: 'remainder' }], offline: 'fail', maxFailureRatio: 0.5 },
      { devices: devices() },
    );
    const failed = await fail.h.result();
    expect(failed.devices.find((d) => d.id === 'dev-03')).toMatchObject({
      state: 'failed',
      reason: expect.stringMatching(/^offline at apply/),
    });
    expect(failed.counts).toMatchObject({ applied: 4, failed: 1 });
    expect(failed.changedDevices).toBe(4);

    const tripped = await start(
      { phases: [{ bulk: 'remainder' }], offline: 'fail', maxFailureRatio: 0, rollback: { on: 'failure-gate' } },
      { devices: devices() },
    );
    const trippedResult = await tripped.h.result();
    expect(trippedResult.state).toBe('rolled-back');
    // Nothing ran on the offline device: it is not put back.
    expect(tripped.s.log).not.toContain('rollback:dev-03');
  });
});

describe('overlapping slices with mocked activities: the chain shares one budget and obeys pause, abort and the failure gate', () => {
  const worker = mockedRolloutWorker('hot-path-slices', { defaults: { gate: '0s', phases: [{ bulk: 'remainder' }] } });
  const { mocks } = worker;
  const start = worker.start.bind(worker);
  const until = async (what: string, done: () => boolean, timeoutMs = 60_000) => {
    const deadline = Date.now() + timeoutMs;
    while (!done()) {
      if (Date.now() > deadline) throw new Error(`never: ${what}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  };

  it('in flight fills the budget across slices: 12 at once over four slices of 3', async () => {
    const devices = mockDevices(12);
    const { s, input, h } = await start(
      {},
      { devices, holdApply: new Set(devices.map((d) => d.id)) },
      { sliceSize: 3, poolBudgets: { default: 1 } },
    );
    await until('12 applies in flight', () => (s.began?.length ?? 0) === 12);
    for (const d of devices) mocks.release(input.rolloutId, d.id);
    const result = await h.result();
    expect(result.state).toBe('completed');
    expect(result.counts.applied).toBe(12);
  });

  it('pause holds every new start across the chain; resume carries on to the end', async () => {
    const devices = mockDevices(12);
    // 3 in flight (12 × 0.25), slices of 2: the budget is always spread over two or more slices.
    const { s, input, h } = await start(
      {},
      { devices, holdApply: new Set(devices.map((d) => d.id)) },
      { sliceSize: 2, poolBudgets: { default: 0.25 } },
    );
    await until('3 applies in flight', () => (s.began?.length ?? 0) === 3);
    expect((await h.executeUpdate(pauseUpdate, { args: [{ by: 'carol' }] })).state).toBe('paused');
    // The pause reaches the slices by signal: give it a moment, then free every slot.
    await new Promise((r) => setTimeout(r, 1_000));
    const atPause = s.began!.length;
    for (const d of devices) mocks.release(input.rolloutId, d.id);
    await new Promise((r) => setTimeout(r, 2_500));
    expect(s.began).toHaveLength(atPause); // slots free in every slice, yet nothing started while paused
    expect((await h.query<RolloutStatus>('status')).state).toBe('paused');
    await h.executeUpdate(resumeUpdate, { args: [{ by: 'carol' }] });
    const result = await h.result();
    expect(result.state).toBe('completed');
    expect(result.counts.applied).toBe(12);
    expect(new Set(s.began)).toEqual(new Set(devices.map((d) => d.id)));
  });

  it('abort stops the chain: no slice starts a device after it, the changed ones go back', async () => {
    const devices = mockDevices(12);
    const { s, input, h } = await start(
      {},
      { devices, holdApply: new Set(devices.map((d) => d.id)) },
      { sliceSize: 2, poolBudgets: { default: 0.25 } },
    );
    await until('3 applies in flight', () => (s.began?.length ?? 0) === 3);
    await h.executeUpdate(abortUpdate, { args: [{ by: 'dana', rollback: true }] });
    await new Promise((r) => setTimeout(r, 1_000));
    const atAbort = s.began!.length;
    for (const d of devices) mocks.release(input.rolloutId, d.id);
    const result = await h.result();
    expect(result.state).toBe('aborted');
    expect(s.began).toHaveLength(atAbort);
    const started = s.log.filter((l) => l.startsWith('apply:')).map((l) => l.slice('apply:'.length));
    expect(
      s.log
        .filter((l) => l.startsWith('rollback:'))
        .map((l) => l.slice('rollback:'.length))
        .sort(),
    ).toEqual([...started].sort());
    expect(result.counts['not-started']).toBe(12 - atAbort);
  });

  it('histories stay bounded: 2,000 devices, 500 in flight, slices of 200 (each slice hears at most one release per freed slot)', async () => {
    const devices = mockDevices(2_000, (i) => ({ id: `dev-${String(i + 1).padStart(4, '0')}` }));
    const { h, input } = await start({}, { devices }, { sliceSize: 200, poolBudgets: { default: 0.25 } });
    const result = await h.result();
    expect(result.counts.applied).toBe(2_000);
    const shapes = await executionTreeShapes(worker.env.client, input.rolloutId);
    console.log(
      shapes
        .map(
          (x) =>
            `${x.workflowId}: ${x.events} events, max ${x.maxPendingActivities} pending activities, max ${x.maxPendingChildren} pending children`,
        )
        .join('\n'),
    );
    expect(shapes).toHaveLength(1 + 10);
    for (const shape of shapes) {
      expect(shape.events, shape.workflowId).toBeLessThan(HISTORY_EVENT_LIMIT);
      expect(shape.maxPendingActivities, shape.workflowId).toBeLessThanOrEqual(PENDING_LIMIT);
      expect(shape.maxPendingChildren, shape.workflowId).toBeLessThanOrEqual(PENDING_LIMIT);
    }
  }, 300_000);

  it('a failure gate tripped in one slice stops every later start of the phase', async () => {
    const devices = mockDevices(12);
    // One at a time (12 × 0.05 → 1), slices of 2; every apply fails; the gate judges after 2 (minSample).
    const { s, h } = await start(
      { maxFailureRatio: 0.2, minSample: 2, rollback: { on: 'failure-gate' } },
      { devices, failApply: new Set(devices.map((d) => d.id)) },
      { sliceSize: 2, poolBudgets: { default: 0.05 } },
    );
    const result = await h.result();
    expect(result.state).toBe('rolled-back');
    // The second failure trips the gate; the next slice hears it with the freed slot and starts nothing.
    expect(s.began).toHaveLength(2);
    expect(result.counts['not-started']).toBe(10);
    await recordHistory(h, 'hot-path-overlapping-slices-failure-gate');
  });
});
