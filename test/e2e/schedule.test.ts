import { copyFileSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse, stringify } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { runCli, startDevDemo, type CliRun, type DevDemo } from '../support/cli';
import { scratchDir } from '../support/harness';

/**
 * The nightly canary on a Temporal Schedule, through the CLI against `wavegate dev --demo` (demo r1 and
 * r2 registered in registry:demo). The fleet starts on r1, as an installed fleet would.
 */
const scratch = scratchDir('schedule');
let stack: DevDemo | undefined;
let address = '';
let inventory = '';
let deviceIds: string[] = [];
const stateDir = join(scratch.dir, 'state');
const auditDir = join(stateDir, 'audit');

function wg(args: string[], timeoutMs = 120_000): Promise<CliRun> {
  return runCli([...args, '--address', address], { timeoutMs, env: { TEMPORAL_ADDRESS: '', TEMPORAL_PROFILE: '' } });
}

const sandbox = (id: string) => join(stateDir, 'demo-fleet', id);
const markerOf = (id: string) =>
  readFileSync(join(sandbox(id), '.wavegate', 'profiles', 'demo', 'revision'), 'utf8').trim();

/** Put every device on revision n as if it had been rolled out long ago: its motd and its marker. */
function installRevision(n: number): void {
  for (const id of deviceIds) {
    mkdirSync(join(sandbox(id), 'etc'), { recursive: true });
    mkdirSync(join(sandbox(id), '.wavegate', 'profiles', 'demo'), { recursive: true });
    copyFileSync(join(PROJECT_ROOT, 'profiles', 'demo', 'payload', `motd-r${n}`), join(sandbox(id), 'etc', 'motd'));
    writeFileSync(join(sandbox(id), '.wavegate', 'profiles', 'demo', 'revision'), `${n}\n`);
  }
}

interface Report {
  name: string;
  profile: string;
  paused: boolean;
  note?: string;
  calendar: string;
  overlap: string;
  catchupWindowMs: number;
  nextActionTimes: string[];
  recentActions: Array<{
    workflowId: string;
    status: string;
    verdict?: string;
    result?: { verdict: string; rolloutId?: string };
  }>;
  lastVerdict?: string;
}

async function describeSchedule(name: string): Promise<Report> {
  const run = await wg(['schedule', 'describe', name, '--json']);
  expect(run.code, run.stderr).toBe(0);
  return JSON.parse(run.stdout);
}

beforeAll(async () => {
  stack = await startDevDemo(stateDir);
  address = stack.address;
  inventory = stack.inventory;
  deviceIds = (parse(readFileSync(inventory, 'utf8')) as { devices: Array<{ id: string }> }).devices.map((d) => d.id);
  installRevision(1);
});

afterAll(async () => {
  await stack?.stop();
  scratch.cleanup();
});

describe('nightly canary schedule', () => {
  it('is created on a calendar in a time zone with overlap SKIP and a catch-up window; bad input and duplicates exit 2', async () => {
    const canarySpec = join(scratch.dir, 'canary-spec.yaml');
    writeFileSync(
      canarySpec,
      stringify({
        rollout: {
          phases: [{ canary: '1 device', gate: '1s', healthGate: ['all-runtimes-healthy', 'error-rate < 0.01'] }],
        },
      }),
    );
    const create = [
      'schedule',
      'create',
      'nightly-canary',
      '--profile',
      'demo',
      '--inventory',
      inventory,
      '--at',
      '02:00',
      '--tz',
      'Europe/Berlin',
      '-f',
      canarySpec,
    ];
    const created = await wg(create);
    expect(created.code, created.stderr).toBe(0);
    expect(created.stdout).toContain('schedule nightly-canary created: nightly canary of demo at 02:00 Europe/Berlin');

    const again = await wg(create);
    expect(again.code).toBe(2);
    expect(again.stderr).toContain('CONFLICT: a schedule named "nightly-canary" already exists');
    for (const [flag, value, message] of [
      ['--at', '25:00', '--at "25:00"'],
      ['--tz', 'Mars/Olympus', '--tz "Mars/Olympus"'],
    ] as const) {
      const bad = await wg(
        create.map((a, i) => (create[i - 1] === flag ? value : a)).map((a) => (a === 'nightly-canary' ? 'other' : a)),
      );
      expect(bad.code, flag).toBe(2);
      expect(bad.stderr).toContain(message);
    }

    const report = await describeSchedule('nightly-canary');
    expect(report).toMatchObject({
      name: 'nightly-canary',
      profile: 'demo',
      paused: false,
      calendar: '02:00 Europe/Berlin',
      overlap: 'SKIP',
      catchupWindowMs: 3_600_000,
      recentActions: [],
    });
    // The next run is 02:00 in Berlin: 00:00 or 01:00 UTC depending on daylight saving time.
    expect(report.nextActionTimes[0]).toMatch(/T0[01]:00:00\.000Z$/);
    const listed = JSON.parse((await wg(['schedule', 'list', '--json'])).stdout) as Array<{
      name: string;
      workflowType: string;
    }>;
    expect(listed).toContainEqual(
      expect.objectContaining({ name: 'nightly-canary', workflowType: 'nightlyCanaryWorkflow' }),
    );

    expect((await wg(['schedule', 'pause', 'nightly-canary', '--reason', 'change freeze'])).code).toBe(0);
    expect(await describeSchedule('nightly-canary')).toMatchObject({
      paused: true,
      note: expect.stringContaining('change freeze'),
    });
    const pausedAgain = await wg(['schedule', 'pause', 'nightly-canary']);
    expect(pausedAgain.code).toBe(2);
    expect(pausedAgain.stderr).toContain('already paused');
    expect((await wg(['schedule', 'unpause', 'nightly-canary'])).code).toBe(0);
    expect((await describeSchedule('nightly-canary')).paused).toBe(false);

    for (const args of [
      ['schedule', 'describe', 'nope'],
      ['schedule', 'trigger', 'nope'],
      ['schedule', 'delete', 'nope'],
    ]) {
      const run = await wg(args);
      expect(run.code, args.join(' ')).toBe(2);
      expect(run.stderr).toContain('NOT_FOUND: no schedule named "nope"');
    }
  });

  it('trigger runs the canary now: verdict in describe, in the audit and as a search attribute; the canary is back on the fleet revision', async () => {
    const run = await wg(['schedule', 'trigger', 'nightly-canary', '--wait', '--json'], 180_000);
    expect(run.code, run.stderr).toBe(0);
    const result = JSON.parse(run.stdout) as {
      verdict: string;
      fleetRevision: number;
      revision: number;
      rolloutId: string;
      kept: boolean;
    };
    expect(result).toMatchObject({ verdict: 'pass', fleetRevision: 1, revision: 2, kept: false });
    expect(result.rolloutId).toMatch(/^canary:demo:nightly-canary:demo-/);

    const report = await describeSchedule('nightly-canary');
    expect(report.lastVerdict).toBe('pass');
    expect(report.recentActions).toHaveLength(1);
    expect(report.recentActions[0]).toMatchObject({ status: 'COMPLETED', verdict: 'pass' });
    const text = await wg(['schedule', 'describe', 'nightly-canary']);
    expect(text.stdout).toContain('last verdict: pass');

    // The audit: the canary rollout's trail holds the verdict; the nightly run's own trail too.
    const trail = await runCli(['audit', result.rolloutId, '--json', '--audit-dir', auditDir]);
    expect(trail.code, trail.stderr).toBe(0);
    const events = JSON.parse(trail.stdout) as Array<{
      event: string;
      reason: string | null;
      evidence: { verdict?: string } | null;
    }>;
    expect(events.find((e) => e.event === 'canary.verdict')).toMatchObject({
      reason: 'pass',
      evidence: expect.objectContaining({ verdict: 'pass' }),
    });
    expect(events.map((e) => e.event)).toEqual(
      expect.arrayContaining(['rollback.started', 'rollback.completed', 'rollout.completed']),
    );
    expect((await runCli(['audit', result.rolloutId, '--verify', '--audit-dir', auditDir])).code).toBe(0);
    const own = JSON.parse(
      (await runCli(['audit', report.recentActions[0]!.workflowId, '--json', '--audit-dir', auditDir])).stdout,
    ) as Array<{ event: string; reason: string }>;
    expect(own).toEqual([expect.objectContaining({ event: 'canary.verdict', reason: 'pass' })]);

    // The search attribute: visibility lists the nightly run and its canary with WavegateVerdict = pass.
    const deadline = Date.now() + 30_000;
    let rows: Array<{ workflowId: string; type: string; verdict?: string }> = [];
    for (;;) {
      rows = JSON.parse((await wg(['list', '--profile', 'demo', '--json'])).stdout);
      if (rows.some((r) => r.type === 'nightlyCanaryWorkflow' && r.verdict === 'pass') || Date.now() > deadline) break;
      await new Promise((r) => setTimeout(r, 500));
    }
    expect(rows).toContainEqual(expect.objectContaining({ type: 'nightlyCanaryWorkflow', verdict: 'pass' }));
    expect(rows).toContainEqual(expect.objectContaining({ workflowId: result.rolloutId, verdict: 'pass' }));

    // The canary went to r2 and came back: every device is on r1 again, proven by r1's verify now.
    const status = JSON.parse((await wg(['status', result.rolloutId, '--json'])).stdout) as {
      devices: Array<{ id: string; state: string }>;
    };
    const canary = status.devices.find((d) => d.state === 'rolled-back');
    expect(canary, JSON.stringify(status.devices)).toBeDefined();
    expect(markerOf(canary!.id)).toBe('1');
    expect(existsSync(join(sandbox(canary!.id), '.wavegate', 'staging', 'demo', '2'))).toBe(true);
    const board = await wg(['fleet', 'status', '--profile', 'demo', '--inventory', inventory, '--revision', '1']);
    expect(board.code, board.stdout).toBe(0);
    expect(board.stdout).toMatch(/^ {2}applied +12$/m);
  });

  it('with nothing registered above the fleet it records nothing-to-test and touches no device; delete removes the schedule', async () => {
    installRevision(2);
    const motdBefore = deviceIds.map((id) => readFileSync(join(sandbox(id), 'etc', 'motd'), 'utf8'));
    const run = await wg(['schedule', 'trigger', 'nightly-canary', '--wait', '--json'], 180_000);
    expect(run.code, run.stderr).toBe(0);
    const result = JSON.parse(run.stdout) as {
      verdict: string;
      fleetRevision: number;
      revision: number | null;
      rolloutId?: string;
    };
    expect(result).toMatchObject({ verdict: 'nothing-to-test', fleetRevision: 2, revision: null });
    expect(result.rolloutId).toBeUndefined();
    expect(deviceIds.map((id) => readFileSync(join(sandbox(id), 'etc', 'motd'), 'utf8'))).toEqual(motdBefore);
    expect(deviceIds.map(markerOf)).toEqual(deviceIds.map(() => '2'));
    const report = await describeSchedule('nightly-canary');
    expect(report.lastVerdict).toBe('nothing-to-test');
    expect(report.recentActions.map((a) => a.verdict)).toEqual(['pass', 'nothing-to-test']);

    expect((await wg(['schedule', 'delete', 'nightly-canary'])).code).toBe(0);
    const gone = await wg(['schedule', 'describe', 'nightly-canary']);
    expect(gone.code).toBe(2);
  });
});
