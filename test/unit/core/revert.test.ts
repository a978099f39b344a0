import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse, stringify } from 'yaml';
import { describe, expect, it } from 'vitest';
import { floorRefusal, revertUntilOf } from '../../../core/floor';
import { planPhases } from '../../../core/planner';
import { parseRevision } from '../../../core/revision';
import { plannerInputOf } from '../../../core/rollout/plan';
import {
  changedDevices,
  fastRevertPhase,
  revertSpec,
  revertStateRefusal,
  revertWindowRefusal,
  rollForwardCommands,
  type FinishedRollout,
} from '../../../core/rollout/revert';
import { parseRolloutSpec } from '../../../core/spec';
import { revertRolloutInput } from '../../../intake/revert';
import { rolloutInputFromFiles } from '../../../intake/prepare';
import { PROJECT_ROOT } from '../../../intake/package-layout';
import { scratchDir } from '../../support/harness';
import { refusal } from '../../support/refusal';

const HOUR = 3_600_000;
const CLOSED = Date.UTC(2026, 0, 10, 12, 0, 0);
const spec = parseRolloutSpec(
  {
    rollout: {
      profile: 'demo',
      fromRevision: 1,
      toRevision: 2,
      revertWindow: '1h',
      phases: [
        { canary: '1 device', gate: '5m', healthGate: ['all-runtimes-healthy', 'error-rate < 0.01'] },
        { bulk: '50%', gate: '10m', healthGate: ['all-runtimes-healthy'] },
        { bulk: 'remainder', gate: 'manual', healthGate: ['check: motd-present'] },
      ],
    },
  },
  'spec.yaml',
);
const completed: FinishedRollout = {
  rolloutId: 'rollout:demo',
  runId: 'run-1',
  execution: 'COMPLETED',
  state: 'completed',
  closedAt: CLOSED,
  spec,
  changed: ['a', 'b'],
};

describe('revert: which devices a rollout changed', () => {
  it('takes the applied and claimed devices of its phases, not the ones already there, skipped, failed or put back', () => {
    const devices = [
      { id: 'a', state: 'applied' as const, phase: 0 },
      { id: 'b', state: 'claimed' as const, phase: 1 },
      { id: 'already', state: 'applied' as const, phase: -1, reason: 'already at target' },
      { id: 'offline', state: 'skipped' as const, phase: 1, reason: 'offline at snapshot' },
      { id: 'nfm', state: 'skipped' as const, phase: -1, reason: 'not-for-me: left-behind' },
      { id: 'broke', state: 'failed' as const, phase: 1 },
      { id: 'back', state: 'rolled-back' as const, phase: 0 },
    ];
    expect(changedDevices({ devices })).toEqual(['a', 'b']);
  });
});

describe('revert: which rollouts may be reverted', () => {
  it('a completed rollout that changed devices may', () => {
    expect(revertStateRefusal(completed)).toBeNull();
  });
  it('refuses a running or paused one naming its state, and says to abort it instead', () => {
    expect(revertStateRefusal({ ...completed, execution: 'RUNNING', state: 'paused' })).toMatch(
      /^rollout:demo is paused: only a completed rollout can be reverted; .*wavegate abort rollout:demo/,
    );
    expect(revertStateRefusal({ ...completed, execution: 'RUNNING', state: undefined })).toMatch(
      /^rollout:demo is running:/,
    );
  });
  it('refuses a rolled-back, aborted, cancelled, failed or terminated one naming what happened', () => {
    expect(revertStateRefusal({ ...completed, state: 'rolled-back' })).toMatch(
      /^rollout:demo is rolled-back: it already put back every device it changed to r1; nothing to revert/,
    );
    expect(revertStateRefusal({ ...completed, state: 'aborted', changed: [] })).toMatch(
      /is aborted: it put back every device it changed/,
    );
    expect(revertStateRefusal({ ...completed, state: 'aborted' })).toMatch(
      /is aborted: .*2 device\(s\) it changed were kept at r2 \(abort --no-rollback\).*roll forward/,
    );
    expect(revertStateRefusal({ ...completed, execution: 'CANCELLED', state: undefined })).toMatch(
      /is cancelled: it put back every device/,
    );
    expect(revertStateRefusal({ ...completed, execution: 'FAILED', state: undefined })).toMatch(
      /^rollout:demo is failed: it did not complete/,
    );
    expect(revertStateRefusal({ ...completed, execution: 'TERMINATED', state: undefined })).toMatch(
      /^rollout:demo was terminated: it did not complete/,
    );
  });
  it('refuses a canary run, a revert of a revert (go up with start) and a rollout that changed nothing', () => {
    expect(revertStateRefusal({ ...completed, canary: true })).toMatch(/nightly canary run/);
    expect(revertStateRefusal({ ...completed, reverts: { rolloutId: 'rollout:demo', runId: 'run-0' } })).toMatch(
      /is itself a revert of rollout:demo \(run run-0\): to go back up to r1, start a rollout r2 → r1/,
    );
    expect(revertStateRefusal({ ...completed, changed: [] })).toMatch(/completed without changing any device/);
  });
});

describe("revert: the window is the device floor's rule", () => {
  it('is open until close time + revertWindow, then refused naming when it closed', () => {
    expect(revertWindowRefusal(completed, CLOSED + HOUR - 1)).toBeNull();
    expect(revertWindowRefusal(completed, CLOSED + HOUR)).toBe(
      "rollout:demo completed at 2026-01-10T12:00:00.000Z and its revert window (revertWindow 1h) closed at 2026-01-10T13:00:00.000Z: its devices' floor is r2 now, so nothing below it is applied there again; roll forward instead",
    );
  });
  it('revertWindow 0: never; no revertWindow in an older input: the default 24h', () => {
    expect(revertWindowRefusal({ ...completed, spec: { ...spec, revertWindow: 0 } }, CLOSED)).toMatch(
      /it had no revert window \(revertWindow 0\)/,
    );
    const older = { ...completed, spec: { profile: 'demo', fromRevision: 1, toRevision: 2 } };
    expect(revertWindowRefusal(older, CLOSED + 23 * HOUR)).toBeNull();
    expect(revertWindowRefusal(older, CLOSED + 24 * HOUR)).toMatch(/closed at 2026-01-11T12:00:00.000Z/);
  });
  it('agrees with floorRefusal over the floor the completion wrote, at every moment', () => {
    for (const windowMs of [0, 1, HOUR, 30 * 24 * HOUR]) {
      const floor = { revision: 2, from: 1, revertUntil: revertUntilOf(CLOSED, windowMs), rollout: 'rollout:demo' };
      for (const now of [CLOSED - 1, CLOSED, CLOSED + windowMs - 1, CLOSED + windowMs, CLOSED + windowMs + 1]) {
        const r = { ...completed, spec: { ...spec, revertWindow: windowMs } };
        expect(revertWindowRefusal(r, now) === null, `window ${windowMs} at +${now - CLOSED}`).toBe(
          floorRefusal(floor, 1, now) === null,
        );
      }
    }
  });
});

describe('revert: its spec', () => {
  it('swaps the revisions, keeps the phases, gates, health checks and every other setting, and has no window of its own', () => {
    const revert = revertSpec(spec, false);
    expect(revert).toEqual({ ...spec, fromRevision: 2, toRevision: 1, revertWindow: 0 });
  });
  it('leaves the two-person rule behind: the way back waits for no second person', () => {
    const ruled = { ...spec, approval: { required: 2, notBy: 'starter' as const } };
    expect(revertSpec(ruled, false)).toEqual({ ...spec, fromRevision: 2, toRevision: 1, revertWindow: 0 });
    expect(revertSpec(ruled, true).approval).toBeUndefined();
  });
  it('--fast: one phase over every device, gate 0, the health checks of every phase once each', () => {
    const revert = revertSpec(spec, true);
    expect(revert.phases).toEqual([
      {
        bulk: { kind: 'percent', percent: 100 },
        name: 'revert (fast)',
        gate: 0,
        healthGate: ['all-runtimes-healthy', 'error-rate < 0.01', 'check: motd-present'],
      },
    ]);
    expect(fastRevertPhase([{ bulk: { kind: 'remainder' }, healthGate: [] }]).healthGate).toEqual([]);
  });
  it('the planner takes devices at the reverted revision as candidates only for a revert', () => {
    const devices = ['a', 'b', 'c', 'd'].map((id, i) => ({
      id,
      pool: 'p',
      class: 'server',
      os: 'linux',
      updateClass: 'required' as const,
      current: i === 3 ? 3 : 2,
    }));
    const base = { rolloutId: 'rollout:demo', poolBudgets: { p: 0.5 }, risk: 'risky' as const };
    const revert = planPhases(
      plannerInputOf(
        { ...base, spec: revertSpec(spec, true), reverts: { rolloutId: 'rollout:demo', runId: 'run-1' } },
        devices,
      ),
    );
    expect(revert.phases.flatMap((p) => p.devices).sort()).toEqual(['a', 'b', 'c']);
    expect(revert.notForMe).toEqual([{ id: 'd', reason: 'ahead: the device is at revision 3, above the target 1' }]);
    const notRevert = planPhases(plannerInputOf({ ...base, spec: revertSpec(spec, true) }, devices));
    expect(notRevert.phases).toEqual([]);
    expect(notRevert.notForMe.map((n) => n.id)).toEqual(['a', 'b', 'c', 'd']);
  });
});

describe('revert: the roll-forward commands', () => {
  it('name the next revision, sign, cosign and start; the printed sed makes a valid revision with the old content', () => {
    const scratch = scratchDir('roll-forward');
    try {
      const dir = join(scratch.dir, 'demo');
      mkdirSync(join(dir, 'revisions'), { recursive: true });
      copyFileSync(join(PROJECT_ROOT, 'profiles/demo/revisions/1.yaml'), join(dir, 'revisions/1.yaml'));
      // An r1 that carries the fields a copy must not keep.
      const r1 = parse(readFileSync(join(dir, 'revisions/1.yaml'), 'utf8')) as Record<string, unknown>;
      writeFileSync(
        join(dir, 'revisions/1.yaml'),
        stringify({ ...r1, expiresAt: '2026-01-01T00:00:00Z', previous: 1 }),
      );
      const lines = rollForwardCommands({
        profile: 'demo',
        profileDir: dir,
        profilesRoot: scratch.dir,
        from: 1,
        to: 2,
        next: 3,
        inventoryPath: '/fleet.yaml',
      });
      expect(lines[0]).toBe("roll forward: r1's content as a new revision r3, then a rollout r2 → r3:");
      expect(lines.join('\n')).toContain(
        `wavegate sign ${dir}/revisions/3.yaml --key <your key> --out ${dir}/envelopes/3.json --inventory /fleet.yaml --profile ${dir}/profile.yaml`,
      );
      expect(lines.join('\n')).toContain(`wavegate cosign ${dir}/envelopes/3.json`);
      expect(lines.join('\n')).toContain(
        `wavegate start -f <the rollout's spec with fromRevision: 2, toRevision: 3> --inventory /fleet.yaml --profiles ${scratch.dir} --wait`,
      );
      execFileSync('/bin/sh', ['-c', lines[1]!.trim()]);
      const r3 = parseRevision(parse(readFileSync(join(dir, 'revisions/3.yaml'), 'utf8')), 'r3');
      const original = parseRevision(r1, 'r1');
      expect(r3).toEqual({ ...original, revision: 3, previous: 2 });
    } finally {
      scratch.cleanup();
    }
  });

  it('for an inventory read over HTTP: start reads it from the URL again, sign takes a file of it', () => {
    const text = rollForwardCommands({
      profile: 'demo',
      profileDir: '/p/demo',
      profilesRoot: '/p',
      from: 1,
      to: 2,
      next: 3,
      inventoryPath: 'https://cmdb.example/devices',
    }).join('\n');
    expect(text).toContain('--inventory-url https://cmdb.example/devices --profiles /p --wait');
    expect(text).toContain('--out /p/demo/envelopes/3.json --inventory <the inventory, saved as a file> --profile');
    expect(text).not.toContain('--inventory https://');
  });
});

describe('revert: its input, through intake', () => {
  const scratch = scratchDir('revert-input');
  const inventoryPath = join(scratch.dir, 'fleet.yaml');
  writeFileSync(
    inventoryPath,
    stringify({
      pools: { web: { disruptionBudget: 0.5 } },
      defaults: { user: 'wavegate', host: '127.0.0.1' },
      devices: ['a', 'b', 'c'].map((id, i) => ({ id, pool: 'web', port: 2201 + i })),
    }),
  );
  const profilesRoot = join(PROJECT_ROOT, 'profiles');
  const original = rolloutInputFromFiles({
    spec,
    specSource: 'spec.yaml',
    inventoryPath,
    profilesRoot,
    startedBy: 'alice',
  });

  it('goes down exactly the way the original went back, over only the devices it changed, naming it', () => {
    const input = revertRolloutInput({
      original,
      reverts: { rolloutId: 'rollout:demo', runId: 'run-1' },
      devices: ['a', 'b'],
      fast: false,
      profilesRoot,
      startedBy: 'bob',
    });
    expect(input.rolloutId).toBe('rollout:demo');
    expect(input.spec).toEqual(revertSpec(spec, false));
    expect(input.steps).toEqual(original.rollbackSteps);
    expect(input.steps.revision).toBe(1);
    expect(input.rollbackSteps).toEqual({ ...original.steps, revision: 2 });
    expect(input.onlyDevices).toEqual(['a', 'b']);
    expect(input.reverts).toEqual({ rolloutId: 'rollout:demo', runId: 'run-1' });
    expect(input.startedBy).toBe('bob');
    expect(input.inventoryPath).toBe(original.inventoryPath);
    expect(input.poolBudgets).toEqual({ web: 0.5 });
  });
  it('refuses a revision the profile no longer has, naming it (nothing started)', () => {
    const gone = { ...original, spec: { ...spec, fromRevision: 7 } };
    const err = refusal(() =>
      revertRolloutInput({
        original: gone,
        reverts: { rolloutId: 'rollout:demo', runId: 'run-1' },
        devices: ['a'],
        fast: true,
        profilesRoot,
        startedBy: 'bob',
      }),
    );
    expect(err.code).toBe('INVALID_INPUT');
    expect(err.message).toContain('rollout:demo (the rollout reverted): rollout.fromRevision');
  });
});
