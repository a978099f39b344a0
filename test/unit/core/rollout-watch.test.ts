import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { boardOutcome } from '../../../core/board';
import { checkControl } from '../../../core/controls';
import { parseHealthCheck, runsOnDevices, type CheckResult } from '../../../core/health';
import { RolloutModel } from '../../../core/rollout/model';
import { rolloutOutcome } from '../../../core/rollout/outcome';
import { flipReason, reverifyFailed, unverifiedHoldReason } from '../../../core/rollout/reverify';
import { revertSpec } from '../../../core/rollout/revert';
import type { RolloutStatus } from '../../../core/rollout/status';
import {
  describeWatch,
  devicesNamed,
  watchEvery,
  watchFailureReason,
  watchStarted,
  watchStep,
  watchWaits,
} from '../../../core/rollout/watch';
import { countDevices } from '../../../core/rollout-state';
import { parseRolloutSpec } from '../../../core/spec';
import { runCli } from '../../support/cli';

const MIN = 60_000;
const body = (extra: Record<string, unknown>) => ({
  rollout: { profile: 'demo', fromRevision: 1, toRevision: 2, phases: [{ bulk: 'remainder' }], ...extra },
});

describe('the watch spec field', () => {
  it('parses for, every, the checks and onFail; absent means no watch', () => {
    const spec = parseRolloutSpec(
      body({ watch: { for: '30m', every: '3m', healthGate: ['error-rate < 0.01'], onFail: 'revert' } }),
      'spec.yaml',
    );
    expect(spec.watch).toEqual({ for: 30 * MIN, every: 3 * MIN, healthGate: ['error-rate < 0.01'], onFail: 'revert' });
    expect('watch' in parseRolloutSpec(body({}), 'spec.yaml')).toBe(false);
    // A watch as long as the revert window reverts inside it; onFail alert needs no window at all.
    expect(() =>
      parseRolloutSpec(
        body({ revertWindow: '1h', watch: { for: '1h', healthGate: ['devices-online'], onFail: 'revert' } }),
        's',
      ),
    ).not.toThrow();
    expect(() =>
      parseRolloutSpec(
        body({ revertWindow: 0, watch: { for: '2h', healthGate: ['devices-online'], onFail: 'alert' } }),
        's',
      ),
    ).not.toThrow();
  });

  it('a revert of a watched rollout does not watch (a failed watch would put devices back up)', () => {
    const spec = parseRolloutSpec(
      body({ watch: { for: '30m', healthGate: ['devices-online'], onFail: 'revert' } }),
      'spec.yaml',
    );
    expect('watch' in revertSpec(spec, false)).toBe(false);
  });
});

describe('watch timing', () => {
  it('every defaults to a tenth of for, at least a minute, never more than for', () => {
    expect(watchEvery({ for: 30 * MIN })).toBe(3 * MIN);
    expect(watchEvery({ for: 5 * MIN })).toBe(MIN);
    expect(watchEvery({ for: 30_000 })).toBe(30_000);
    expect(watchEvery({ for: 30 * MIN, every: 7 * MIN })).toBe(7 * MIN);
  });

  it('the last check falls exactly at for', () => {
    expect(watchWaits({ for: 30 * MIN })).toEqual(Array(10).fill(3 * MIN));
    expect(watchWaits({ for: 10 * MIN, every: 3 * MIN })).toEqual([3 * MIN, 3 * MIN, 3 * MIN, MIN]);
    expect(watchWaits({ for: MIN, every: MIN })).toEqual([MIN]);
  });
});

describe('what a check leads to', () => {
  const revert = { onInconclusive: 'pause' as const, watch: { onFail: 'revert' as const } };
  const alert = { onInconclusive: 'pause' as const, watch: { onFail: 'alert' as const } };
  it('a pass goes on; a fail reverts or alerts by onFail', () => {
    expect(watchStep('pass', revert)).toEqual({ next: 'continue', event: 'watch.passed' });
    expect(watchStep('fail', revert)).toEqual({ next: 'revert', event: 'watch.failed' });
    expect(watchStep('fail', alert)).toEqual({ next: 'alert', event: 'watch.failed' });
  });
  it('inconclusive goes on (recorded) unless onInconclusive is fail', () => {
    expect(watchStep('inconclusive', revert)).toEqual({ next: 'continue', event: 'watch.inconclusive' });
    expect(watchStep('inconclusive', { ...revert, onInconclusive: 'fail' })).toEqual({
      next: 'revert',
      event: 'watch.failed',
    });
  });

  it('the reason names the check, the values read and the devices', () => {
    const results: CheckResult[] = [
      { check: 'devices-online', outcome: 'pass', evidence: '3 of 3 online', durationMs: 5 },
      {
        check: 'error-rate < 0.01',
        outcome: 'fail',
        evidence: 'max 0.5 on d-02',
        failedDevices: ['d-02', 'd-03'],
        durationMs: 5,
      },
    ];
    const devices = devicesNamed(results);
    expect(devices).toEqual(['d-02', 'd-03']);
    const reason = watchFailureReason({ n: 2, atMs: 6 * MIN, outcome: 'fail', evidence: [], devices }, 10, results);
    expect(reason).toBe(
      'watch check 2 of 10 at +6m failed: error-rate < 0.01: fail — max 0.5 on d-02 (devices: d-02, d-03)',
    );
  });
});

describe('a watching rollout', () => {
  const spec = parseRolloutSpec(
    body({ watch: { for: '30m', healthGate: ['devices-online'], onFail: 'alert' } }),
    'spec.yaml',
  );
  const watching = () => {
    const model = new RolloutModel({ rolloutId: 'rollout:demo:1', ...spec });
    model.startWatch(watchStarted(spec.watch!));
    return model;
  };

  it('is `watching` in phase `watch`; it can be aborted, not paused, resumed or approved', () => {
    const model = watching();
    const s = model.status();
    expect([s.state, s.phase, s.watch?.outcome, s.watch?.planned]).toEqual(['watching', 'watch', 'watching', 10]);
    expect(model.refusal('abort')).toBeNull();
    expect(model.refusal('pause')).toBe('rollout is watching; only a running rollout can be paused');
    expect(model.refusal('resume')).toMatch(/^rollout is watching/);
    expect(model.refusal('approve')).toMatch(/^rollout is watching/);
    expect(checkControl('abort', { state: 'watching', aborting: false })).toBeNull();
  });

  it('an alert is kept in the status and as a warning; the board lists the rollout as watching', () => {
    const model = watching();
    model.recordWatchCheck({ n: 1, atMs: 3 * MIN, outcome: 'fail', evidence: [], devices: ['d-1'] }, 'check 1 failed');
    const s = model.status();
    expect(s.watch).toMatchObject({ checks: 1, alerts: ['check 1 failed'], outcome: 'watching' });
    expect(s.warnings).toContain('check 1 failed');
    expect(boardOutcome('RUNNING', 'watching')).toBe('watching');
    expect(describeWatch(s.watch!)).toBe(
      'watching: 1 of 10 checks done (every 3m for 30m, onFail alert); 1 alert(s): check 1 failed',
    );
  });

  it('the exit code: a watch that passed is 0; one that alerted or reverted is 1 and says why', () => {
    const done = (state: RolloutStatus['state'], outcome: 'passed' | 'alerted' | 'reverted'): RolloutStatus => {
      const w = { ...watchStarted(spec.watch!), checks: 10, outcome, alerts: outcome === 'alerted' ? ['a'] : [] };
      const devices = [{ id: 'd-1', state: 'applied' as const, phase: 0 }];
      return {
        ...watching().status(),
        state,
        devices,
        counts: countDevices(devices),
        watch: outcome === 'reverted' ? { ...w, reason: 'watch check 1 of 10 at +3m failed: x' } : w,
      };
    };
    expect(rolloutOutcome(done('completed', 'passed')).code).toBe(0);
    expect(rolloutOutcome(done('completed', 'alerted'))).toEqual({
      code: 1,
      summary: 'completed, but watch alerted: 1 of 10 checks failed (every 3m for 30m, onFail alert); last: a',
    });
    expect(rolloutOutcome(done('rolled-back', 'reverted'))).toEqual({
      code: 1,
      summary: 'rollout rolled-back: watch failed, reverted: watch check 1 of 10 at +3m failed: x',
    });
  });
});

describe('wavegate plan with a watch longer than the revert window', () => {
  it('exits 2 naming the field and the value, nothing planned', async () => {
    const corpus = 'test/corpus';
    const run = await runCli([
      'plan',
      '-f',
      join(corpus, 'specs/watch-for-above-revert-window.yaml'),
      '--inventory',
      join(corpus, 'valid/inventory.yaml'),
      '--profiles-dir',
      join(corpus, 'no-profiles'),
    ]);
    expect(run.code, run.stderr).toBe(2);
    expect(run.stderr).toContain('rollout.watch.for: is 2h, longer than the revertWindow of 1h');
    expect(run.stderr).toContain('(got "2h")');
    expect(run.stdout).toBe('');
  });
});

describe('the re-verify (core/rollout/reverify.ts)', () => {
  const result = (check: string, outcome: CheckResult['outcome'], failedDevices?: string[]): CheckResult => ({
    check,
    outcome,
    evidence: `${check} ${outcome}`,
    durationMs: 1,
    ...(failedDevices ? { failedDevices } : {}),
  });

  it('is the health check `verify`, run on devices from the signed envelope', () => {
    expect(parseHealthCheck('verify')).toEqual({ ok: true, check: { kind: 'verify' } });
    expect(runsOnDevices({ kind: 'verify' })).toBe(true);
  });

  it('names the devices only a failed verify named, never another check, nor an unread device', () => {
    expect(
      reverifyFailed([
        result('verify', 'fail', ['d-2', 'd-3']),
        result('error-rate < 0.01', 'fail', ['d-1']),
        result('verify', 'fail', ['d-2']),
      ]),
    ).toEqual(['d-2', 'd-3']);
    expect(reverifyFailed([result('verify', 'inconclusive', ['d-1'])])).toEqual([]);
    expect(flipReason('the health gate after canary', [result('verify', 'fail', ['d-2'])])).toBe(
      're-verify failed at the health gate after canary: verify fail',
    );
  });

  it('a flipped device is failed until it verifies again; only a device at the target flips', () => {
    const spec = parseRolloutSpec(body({}), 'spec.yaml');
    const model = new RolloutModel({ rolloutId: 'rollout:demo:1', ...spec });
    const snap = (id: string) => ({
      id,
      host: 'h',
      port: 22,
      user: 'u',
      pool: 'p',
      class: 'server',
      current: 1,
      reachable: true,
      updateClass: 'required' as const,
      os: 'linux',
    });
    model.addSnapshot([snap('d-1'), snap('d-2')]);
    model.adoptPlan({
      rolloutId: 'rollout:demo:1',
      seed: 's',
      toRevision: 2,
      snapshotSize: 2,
      phases: [{ index: 0, name: 'bulk', devices: ['d-1', 'd-2'], gate: 0, healthGate: ['verify'] }],
      alreadyApplied: [],
      notForMe: [],
      pools: [],
      warnings: [],
    } as unknown as Parameters<RolloutModel['adoptPlan']>[0]);
    model.setDevice('d-1', 'applied');
    expect(model.flipUnverified(['d-1', 'd-2'], 're-verify failed at x: gone')).toEqual(['d-1']);
    expect(model.status().devices.find((d) => d.id === 'd-1')).toMatchObject({
      state: 'failed',
      reason: 're-verify failed at x: gone',
    });
    expect(model.unverified().map((d) => d.id)).toEqual(['d-1']);
    expect(model.status().devices.find((d) => d.id === 'd-2')!.state).toBe('pending');
    expect(unverifiedHoldReason('bulk', ['d-1'])).toMatch(
      /^re-verify: d-1 no longer verifies the target revision; bulk does not start/,
    );
    model.unflip(['d-1'], 'verified again before bulk');
    expect(model.unverified()).toEqual([]);
    expect(model.status().devices.find((d) => d.id === 'd-1')).toMatchObject({
      state: 'applied',
      reason: 'verified again before bulk',
    });
  });
});
