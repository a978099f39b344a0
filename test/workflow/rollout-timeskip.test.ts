import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { readAuditFile } from '../../audit/file';
import { verifyAuditChain } from '../../core/audit';
import { demoDevices, type Fleet } from '../../sim';
import { rolloutInputFor } from '../support/harness';
import { recordHistory } from '../support/histories';
import { realRollouts } from '../support/real-rollouts';
import { APPLY_COMMAND, markerOf, VERIFY_R2 } from '../support/rollout-helpers';
import { startTimeSkippingEnv } from '../support/temporal';

describe('rollout workflow on the time-skipping test server', () => {
  const real = realRollouts('timeskip', { startEnv: startTimeSkippingEnv });
  const { auditDir } = real;
  let dir: string;
  let fleet: Fleet;
  let inventoryPath: string;

  beforeAll(async () => {
    ({ dir, fleet, inventoryPath } = await real.fleet(demoDevices(12)));
  });

  it('happy path through 3 phases with 10-minute gates and health gates; the audit holds one verified record per transition', async () => {
    const input = rolloutInputFor(
      dir,
      {
        gate: '10m',
        phases: [
          { canary: '1 device', healthGate: ['all-runtimes-healthy', 'error-rate < 0.01'] },
          { bulk: '25%', healthGate: ['devices-online'] },
          { bulk: 'remainder', healthGate: ['all-runtimes-healthy'] },
        ],
      },
      inventoryPath,
      'rollout:demo-timeskip',
    );
    const handle = await real.start(input);
    const result = await handle.result();
    await recordHistory(handle, 'happy-path-timeskip');

    expect(result.state).toBe('completed');
    expect(result.phases.map((p) => [p.devices, p.stage, p.gateOutcome])).toEqual([
      [1, 'passed', 'pass'],
      [3, 'passed', 'pass'],
      [8, 'passed', 'pass'],
    ]);
    for (const d of fleet.devices) {
      expect(markerOf(fleet, d.id)).toBe(2);
      // One remote command per device (verify first, apply, verify, marker), which applied once.
      expect(fleet.count(d.id, APPLY_COMMAND)).toBe(1);
      expect(fleet.count(d.id, VERIFY_R2)).toBe(1);
      expect(readFileSync(join(d.sandbox, '.wavegate/profiles/demo/last-apply/released'), 'utf8')).toBe(
        'apply of r2 done: verified, marker written\n',
      );
    }
    // Three 10-minute gates passed in workflow time, skipped by the test server.
    const { startTime, closeTime } = await handle.describe();
    expect(closeTime!.getTime() - startTime.getTime()).toBeGreaterThanOrEqual(30 * 60_000);
    const history = await handle.fetchHistory();
    const timers = history
      .events!.filter((e) => e.timerStartedEventAttributes)
      .map((e) => Number(e.timerStartedEventAttributes!.startToFireTimeout!.seconds));
    expect(timers).toEqual([600, 600, 600]);

    const audit = readAuditFile(auditDir, input.rolloutId);
    expect(verifyAuditChain(audit)).toEqual({ ok: true, count: 15 });
    expect(audit.map((r) => `${r.event}${r.phase ? ` @${r.phase}` : ''}`)).toEqual([
      'rollout.started',
      'phase.started @canary 1 device',
      'devices.outcome @canary 1 device',
      'phase.applied @canary 1 device',
      'gate.passed @canary 1 device',
      'phase.started @bulk 25%',
      'devices.outcome @bulk 25%',
      'phase.applied @bulk 25%',
      'gate.passed @bulk 25%',
      'phase.started @bulk remainder',
      'devices.outcome @bulk remainder',
      'phase.applied @bulk remainder',
      'gate.passed @bulk remainder',
      'floor.confirmed @bulk remainder',
      'rollout.completed',
    ]);
    // What happened to each device is in the trail: all twelve applied, each once.
    const outcomes = audit
      .filter((r) => r.event === 'devices.outcome')
      .flatMap((r) => (r.evidence as { devices: Array<{ id: string; state: string }> }).devices);
    expect(outcomes.map((d) => d.id).sort()).toEqual(fleet.devices.map((d) => d.id).sort());
    expect(new Set(outcomes.map((d) => d.state))).toEqual(new Set(['applied']));
    expect(audit.at(-1)!.counts).toMatchObject({ applied: 12, total: 12 });
  });

  it('no device starts outside the maintenance window: the workflow sleeps until it opens', async () => {
    fleet.resetCounters();
    // Devices are back on r1 so there is something to apply.
    for (const d of fleet.devices) writeFileSync(join(d.sandbox, '.wavegate/profiles/demo/revision'), '1\n');
    const now = new Date();
    const hhmm = (d: Date) =>
      `${String(d.getUTCHours()).padStart(2, '0')}:${String(d.getUTCMinutes()).padStart(2, '0')}`;
    const opens = new Date(now.getTime() + 3 * 3_600_000);
    const closes = new Date(now.getTime() + 5 * 3_600_000);
    const input = rolloutInputFor(
      dir,
      {
        gate: '1m',
        window: {
          days: ['mon', 'tue', 'wed', 'thu', 'fri', 'sat', 'sun'],
          start: hhmm(opens),
          end: hhmm(closes),
          timezone: 'UTC',
        },
        phases: [{ bulk: 'remainder' }],
      },
      inventoryPath,
      'rollout:demo-window',
    );
    const handle = await real.start(input);
    const result = await handle.result();
    expect(result.state).toBe('completed');
    const history = await handle.fetchHistory();
    const firstApply = history.events!.find(
      (e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'applyRevision',
    )!;
    const windowTimer = history.events!.find(
      (e) => e.timerStartedEventAttributes && Number(e.timerStartedEventAttributes.startToFireTimeout!.seconds) > 3_600,
    )!;
    expect(windowTimer).toBeDefined();
    // The first apply was scheduled only after the window opened (workflow time).
    const scheduledAt = Number(firstApply.eventTime!.seconds) * 1000;
    expect(scheduledAt).toBeGreaterThanOrEqual(opens.getTime() - 60_000);
    expect(Number(windowTimer.eventId)).toBeLessThan(Number(firstApply.eventId));
    // The content was still in place (only the markers were reset): verify-first, no apply.
    for (const d of fleet.devices) {
      expect(fleet.count(d.id, VERIFY_R2)).toBe(1); // one remote command, which stopped after verify first
      expect(readFileSync(join(d.sandbox, '.wavegate/profiles/demo/last-apply/released'), 'utf8')).toBe(
        'r2 already in place (verify only)\n',
      );
      expect(markerOf(fleet, d.id)).toBe(2);
    }
    expect(result.devices.every((d) => d.reason === 'already in place (verify only)')).toBe(true);
  });
});
