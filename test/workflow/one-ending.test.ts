import { WorkflowFailedError } from '@temporalio/client';
import { describe, expect, it } from 'vitest';
import { abortUpdate } from '../../contracts/rollout';
import { recordHistory } from '../support/histories';
import { mockDevices, type Scenario } from '../support/mock-activities';
import { mockedRolloutWorker } from '../support/mocked-worker';
import { waitForStatus } from '../support/rollout-helpers';
import { startTimeSkippingEnv } from '../support/temporal';

/**
 * One ending (core/rollout/ending.ts, patch `one-ending`): an abort with rollback, a deadline rollback,
 * a failure-policy rollback and a cancel all end in the same order (close the waiting phases, name the
 * devices never started, compensate, the last record), so operators read the same trail whatever
 * stopped the rollout. Mocked activities on the time-skipping server: the deadline passes in skipped time.
 */
describe('one ending: every cause ends a rollout in one order', () => {
  const worker = mockedRolloutWorker('one-ending', { startEnv: startTimeSkippingEnv });
  const twoPhases = [{ canary: '1 device', gate: 'manual' }, { bulk: 'remainder' }];
  const events = (s: Scenario) => s.audit.map((r) => r.event);
  /** The trail from the ending's first record on, the last record (which names the cause) read as `end`. */
  const endingOfTrail = (s: Scenario) => {
    const all = events(s);
    const from = all.indexOf('devices.skipped');
    return [...all.slice(from, -1), 'end'];
  };
  const ONE_ORDER = ['devices.skipped', 'rollback.started', 'devices.outcome', 'rollback.completed', 'end'];

  it('an abort with rollback and a deadline rollback leave identically ordered trails', async () => {
    // Abort: the operator stops the rollout while it waits for approval of the canary.
    const abort = await worker.start({ phases: twoPhases }, { devices: mockDevices(3) });
    await waitForStatus(abort.h, (st) => st.phases[0]?.stage === 'awaiting-approval');
    await abort.h.executeUpdate(abortUpdate, { args: [{ by: 'frank', reason: 'wrong window' }] });
    const aborted = await abort.h.result();
    await recordHistory(abort.h, 'one-ending-abort-rollback');

    // Deadline: the same rollout, nobody approves, the progress deadline passes (in skipped time).
    const deadline = await worker.start(
      { phases: twoPhases, progressDeadline: '30m', onDeadline: 'rollback' },
      { devices: mockDevices(3) },
    );
    const rolledBack = await deadline.h.result();
    await recordHistory(deadline.h, 'one-ending-deadline-rollback');

    expect(aborted.state).toBe('aborted');
    expect(rolledBack.state).toBe('rolled-back');
    expect(endingOfTrail(abort.s)).toEqual(ONE_ORDER);
    expect(endingOfTrail(deadline.s)).toEqual(ONE_ORDER);
    expect(events(abort.s).at(-1)).toBe('rollout.ended');
    expect(events(deadline.s).at(-1)).toBe('rollout.failed');
    // The same stages closed, the same devices not started (each with its cause's reason).
    for (const result of [aborted, rolledBack]) {
      expect(result.phases.map((p) => p.stage)).toEqual(['stopped', 'stopped']);
      expect(result.counts).toMatchObject({ 'rolled-back': 1, 'not-started': 2 });
    }
    const skipReason = (s: Scenario) => s.audit.find((r) => r.event === 'devices.skipped')!.reason;
    expect(skipReason(abort.s)).toBe('not started: aborted by frank');
    expect(skipReason(deadline.s)).toBe('not started: progressDeadline passed (rolled back)');
  });

  it('a failure-policy rollback closes the later phases and ends in the same order', async () => {
    const devices = mockDevices(3);
    const { s, h } = await worker.start(
      { phases: twoPhases, rollback: { on: 'failure-gate' } },
      { devices, failApply: new Set([devices[0]!.id, devices[1]!.id, devices[2]!.id]) },
    );
    const result = await h.result();
    await recordHistory(h, 'one-ending-failure-gate-rollback');
    expect(result.state).toBe('rolled-back');
    // Before the one ending the bulk phase stayed `pending` after a rollback; now it is closed like an abort closes it.
    expect(result.phases.map((p) => p.stage)).toEqual(['failed', 'stopped']);
    expect(endingOfTrail(s)).toEqual(ONE_ORDER);
    expect(s.audit.at(-1)).toMatchObject({
      event: 'rollout.failed',
      reason: expect.stringMatching(/^failure gate: 1 of 1 devices failed in canary/),
    });
  });

  it('a cancel ends in the same order', async () => {
    const { s, h } = await worker.start({ phases: twoPhases }, { devices: mockDevices(3) });
    await waitForStatus(h, (st) => st.phases[0]?.stage === 'awaiting-approval');
    await h.cancel();
    await expect(h.result()).rejects.toBeInstanceOf(WorkflowFailedError);
    await recordHistory(h, 'one-ending-cancel');
    expect(endingOfTrail(s)).toEqual(ONE_ORDER);
    expect(s.audit.at(-1)).toMatchObject({ event: 'rollout.cancelled', by: 'temporal-cancel' });
  });
});
