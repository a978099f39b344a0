import { copyFileSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { readAuditFile } from '../../audit/file';
import { verifyAuditChain } from '../../core/audit';
import { demoDevices, type Fleet } from '../../sim';
import { rolloutInputFor } from '../support/harness';
import { recordHistory } from '../support/histories';
import { realRollouts } from '../support/real-rollouts';
import { APPLY_COMMAND, markerOf, VERIFY_R2, verifiesAt, waitForStatus } from '../support/rollout-helpers';
import { startWebhookReceiver } from '../support/webhook-receiver';
import { abortUpdate, pauseUpdate, resumeUpdate } from '../../contracts/rollout';
import { WorkflowUpdateFailedError } from '@temporalio/client';
import { rejection } from '../support/refusal';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { startTimeSkippingEnv } from '../support/temporal';

/** The webhook secret's variable for the watch's alert test (a worker reads it from its environment). */
const WATCH_SECRET_ENV = 'WAVEGATE_WEBHOOK_SECRET_WATCH';

describe('rollout workflow on the time-skipping test server', () => {
  const real = realRollouts('timeskip', {
    startEnv: startTimeSkippingEnv,
    // The watch's alert goes to a webhook on loopback: the worker's policy (its environment) allows it.
    prepare() {
      process.env[WATCH_SECRET_ENV] = 'watch-test-secret';
      process.env.WAVEGATE_WEBHOOK_ALLOW_HOSTS = '127.0.0.1';
    },
    cleanup() {
      delete process.env[WATCH_SECRET_ENV];
      delete process.env.WAVEGATE_WEBHOOK_ALLOW_HOSTS;
    },
  });
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

  // ---- the watch after promotion (issue 46 item 2): `watching` after the last phase, then its outcome ----

  /** Two phases with no gate timer (so the test sees `watching` before skipped time), then the watch. */
  const watched = (watch: Record<string, unknown>, extra: Record<string, unknown> = {}) => ({
    phases: [
      { canary: '1 device', gate: 0 },
      { bulk: 'remainder', gate: 0 },
    ],
    watch,
    ...extra,
  });
  const timersOf = async (handle: { fetchHistory(): Promise<{ events?: unknown[] | null }> }) =>
    (
      (await handle.fetchHistory()).events as Array<{
        timerStartedEventAttributes?: { startToFireTimeout?: { seconds?: unknown } };
      }>
    )
      .filter((e) => e.timerStartedEventAttributes)
      .map((e) => Number(e.timerStartedEventAttributes!.startToFireTimeout!.seconds));

  it('a re-verify (verify) that fails flips the device to failed at that check, and the later phase does not start until it verifies again', async () => {
    const { fleet: f, input } = await real.rollout(
      {
        phases: [
          { canary: '1 device', gate: '1m', healthGate: ['verify'] },
          { bulk: 'remainder', gate: 0 },
        ],
        // A failed gate pauses for an operator (rather than rolling back) so the later phase's hold shows.
        rollback: { on: 'failure-gate' },
      },
      demoDevices(3),
    );
    const handle = await real.start(input);
    const atGate = await waitForStatus(handle, (s) => s.phases[0]?.stage === 'gate');
    const canary = atGate.devices.find((d) => d.phase === 0)!.id;
    // After its confirmed apply, the canary loses what it confirmed: its verify fails from now on.
    const motd = join(f.device(canary).sandbox, 'etc/motd');
    rmSync(motd);
    await real.env.sleep('2m');
    const failedGate = await waitForStatus(handle, (s) => s.state === 'paused');
    expect(failedGate.devices.find((d) => d.id === canary)).toMatchObject({
      state: 'failed',
      reason: expect.stringMatching(
        /^re-verify failed at the health gate after canary 1 device: unhealthy: edge-0\d\/verify exit \d/,
      ),
    });
    expect(failedGate.phases[0]).toMatchObject({ stage: 'failed', gateOutcome: 'fail' });
    // Resumed without a fix: the later phase refuses to start while the canary is flipped.
    await handle.executeUpdate(resumeUpdate, { args: [{ by: 'test', reason: 'go on' }] });
    const held = await waitForStatus(handle, (s) => s.state === 'paused' && /^re-verify:/.test(s.pausedReason ?? ''));
    expect(held.pausedReason).toBe(
      `re-verify: ${canary} no longer verifies the target revision; bulk remainder does not start while a device that failed its re-verify is in this rollout — fix it and resume (it is verified again), or abort`,
    );
    expect(held.devices.filter((d) => d.phase === 1).map((d) => d.state)).toEqual(['pending', 'pending']);
    // Fixed and resumed: it verifies again, is applied again, and the later phase runs.
    copyFileSync(join(PROJECT_ROOT, 'profiles/demo/payload/motd-r2'), motd);
    await handle.executeUpdate(resumeUpdate, { args: [{ by: 'test', reason: 'fixed' }] });
    const result = await handle.result();
    await recordHistory(handle, 'reverify-flips-holds-phase');
    expect(result.state).toBe('completed');
    expect(result.devices.find((d) => d.id === canary)).toMatchObject({
      state: 'applied',
      reason: 'verified again before bulk remainder',
    });
    expect(result.counts.applied).toBe(3);
    const audit = readAuditFile(auditDir, input.rolloutId).filter((r) => r.reason?.startsWith('re-verify'));
    expect(audit.map((r) => `${r.event} ${r.reason}`)).toEqual([
      'gate.failed re-verify before bulk remainder',
      `rollout.paused ${held.pausedReason}`,
      'gate.passed re-verify before bulk remainder',
    ]);
  });

  it('a watch that passes: watching (phase watch) after the last phase, ten checks every 3m over 30m, then completed', async () => {
    const { fleet: f, input } = await real.rollout(
      watched({ for: '30m', healthGate: ['all-runtimes-healthy', 'error-rate < 0.01'], onFail: 'revert' }),
      demoDevices(3),
    );
    const handle = await real.start(input);
    const watching = await waitForStatus(handle, (s) => s.state === 'watching');
    expect([watching.phase, watching.watch?.outcome, watching.watch?.planned]).toEqual(['watch', 'watching', 10]);
    expect(watching.phases.map((p) => p.stage)).toEqual(['passed', 'passed']);
    const result = await handle.result();
    await recordHistory(handle, 'watch-after-promotion-passed');
    expect(result.state).toBe('completed');
    expect(result.watch).toMatchObject({ outcome: 'passed', checks: 10, forMs: 30 * 60_000, everyMs: 180_000 });
    for (const d of f.devices) expect(markerOf(f, d.id)).toBe(2);
    expect(await timersOf(handle)).toEqual(Array(10).fill(180));
    const audit = readAuditFile(auditDir, input.rolloutId).map((r) => r.event);
    expect(audit.filter((e) => e.startsWith('watch.'))).toEqual([
      'watch.started',
      ...Array(10).fill('watch.passed'),
      'watch.completed',
    ]);
    // The floor's record and the completion come after the watch.
    expect(audit.slice(-3)).toEqual(['watch.completed', 'floor.confirmed', 'rollout.completed']);
  });

  it('a watch that fails under onFail revert: exactly the devices the rollout changed go back, in its revert window, and the reason names the check, the value and the device', async () => {
    const devices = demoDevices(4);
    const { fleet: f, input } = await real.rollout(
      watched({ for: '30m', every: '5m', healthGate: ['error-rate < 0.01'], onFail: 'revert' }, { revertWindow: '1h' }),
      devices,
    );
    // edge-04 already holds r2: its apply finds it in place, so this rollout did not change it.
    const d4 = await f.ensureSandbox('edge-04');
    mkdirSync(join(d4, 'etc'), { recursive: true });
    mkdirSync(join(d4, '.wavegate/profiles/demo'), { recursive: true });
    copyFileSync(join(PROJECT_ROOT, 'profiles/demo/payload/motd-r2'), join(d4, 'etc/motd'));
    writeFileSync(join(d4, '.wavegate/profiles/demo/revision'), '2\n');
    const handle = await real.start(input);
    await waitForStatus(handle, (s) => s.state === 'watching');
    await f.setFaults('edge-02', { errorRate: 0.5 });
    const result = await handle.result();
    await recordHistory(handle, 'watch-after-promotion-reverted');
    expect(result.state).toBe('rolled-back');
    expect(result.watch).toMatchObject({ outcome: 'reverted', checks: 1 });
    expect(result.watch!.reason).toMatch(
      /^watch check 1 of 6 at \+5m failed: error-rate < 0.01: fail — .*0\.5.*\(devices: edge-02\)$/,
    );
    // The three devices it changed are back at r1; the one it found in place is left at r2.
    for (const id of ['edge-01', 'edge-02', 'edge-03']) {
      expect(markerOf(f, id)).toBe(1);
      expect(verifiesAt(f, id, 1)).toBe(true);
    }
    expect(markerOf(f, 'edge-04')).toBe(2);
    expect(verifiesAt(f, 'edge-04', 2)).toBe(true);
    expect(result.devices.find((d) => d.id === 'edge-04')).toMatchObject({ state: 'applied' });
    const rolledBack = result.devices.filter((d) => d.state === 'rolled-back').map((d) => d.id);
    expect(rolledBack.sort()).toEqual(['edge-01', 'edge-02', 'edge-03']);
    const audit = readAuditFile(auditDir, input.rolloutId);
    expect(verifyAuditChain(audit).ok).toBe(true);
    expect(audit.map((r) => r.event).slice(-6)).toEqual([
      'watch.started',
      'watch.failed',
      'rollback.started',
      'devices.outcome',
      'rollback.completed',
      'rollout.failed',
    ]);
    const failed = audit.find((r) => r.event === 'watch.failed')!;
    expect(failed.evidence).toMatchObject({ check: 1, onFail: 'revert', devices: ['edge-02'] });
    expect(audit.at(-1)!.reason).toBe(`watch failed: ${result.watch!.reason}`);
    // No floor was confirmed: the rollout ended rolled back, and no timer past the failed check ran.
    expect(audit.some((r) => r.event === 'floor.confirmed')).toBe(false);
    expect(await timersOf(handle)).toEqual([300]);
  });

  it('a watching rollout refuses pause (naming its state) and accepts abort, which ends the watch and puts back what it changed', async () => {
    const { fleet: f, input } = await real.rollout(
      watched({ for: '1h', every: '10m', healthGate: ['devices-online'], onFail: 'alert' }),
      demoDevices(2),
    );
    const handle = await real.start(input);
    await waitForStatus(handle, (s) => s.state === 'watching');
    const pause = await rejection(
      handle.executeUpdate(pauseUpdate, { args: [{ by: 'test' }] }),
      WorkflowUpdateFailedError,
    );
    expect(pause.cause?.message).toBe('rollout is watching; only a running rollout can be paused');
    await handle.executeUpdate(abortUpdate, { args: [{ by: 'test', reason: 'pulling the release' }] });
    const result = await handle.result();
    expect(result.state).toBe('aborted');
    expect(result.watch).toMatchObject({ outcome: 'stopped', checks: 0 });
    expect(result.counts['rolled-back']).toBe(2);
    for (const d of f.devices) expect(markerOf(f, d.id)).toBe(1);
  });

  it('a watch that fails under onFail alert: nothing is put back, the failure is recorded and sent to the webhook, the watch goes on and the rollout completes with the alert', async () => {
    const hook = await startWebhookReceiver();
    try {
      const { fleet: f, input } = await real.rollout(
        watched(
          { for: '10m', every: '5m', healthGate: ['error-rate < 0.01'], onFail: 'alert' },
          { webhooks: [{ url: hook.url, secretEnv: WATCH_SECRET_ENV, events: ['watch.*', 'rollout.*'] }] },
        ),
        demoDevices(2),
      );
      const handle = await real.start(input);
      await waitForStatus(handle, (s) => s.state === 'watching');
      await f.setFaults('edge-01', { errorRate: 0.5 });
      const result = await handle.result();
      expect(result.state).toBe('completed');
      expect(result.watch).toMatchObject({ outcome: 'alerted', checks: 2 });
      expect(result.watch!.alerts).toHaveLength(2);
      expect(result.warnings.some((w) => w.startsWith('watch check 1 of 2 at +5m failed'))).toBe(true);
      for (const d of f.devices) expect(markerOf(f, d.id)).toBe(2);
      expect(result.counts['rolled-back']).toBe(0);
      const events = hook.acknowledged().map((r) => r.event);
      expect(events).toEqual([
        'rollout.started',
        'watch.started',
        'watch.failed',
        'watch.failed',
        'watch.completed',
        'rollout.completed',
      ]);
      const alert = JSON.parse(hook.acknowledged().find((r) => r.event === 'watch.failed')!.body);
      expect(alert.reason).toMatch(/error-rate < 0.01: fail .*\(devices: edge-01\)$/);
      expect(alert.evidence).toMatchObject({ onFail: 'alert', devices: ['edge-01'] });
    } finally {
      await hook.close();
    }
  });
});
