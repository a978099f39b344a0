import { execFileSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AuditRecord } from '../../core/audit';
import { parseFloor, type DeviceFloor } from '../../core/floor';
import type { RolloutInput } from '../../core/rollout/input';
import type { RolloutStatus } from '../../core/rollout/status';
import { demoDevices, type Fleet } from '../../sim';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { runCli, runCliAgainst, spawnCliUntil, stopChild, type CliRun } from '../support/cli';
import { recordHistory } from '../support/histories';
import { writeDemoSpec } from '../support/harness';
import { realRollouts } from '../support/real-rollouts';
import { markerOf, verifiesAt } from '../support/rollout-helpers';
import { until } from '../support/until';

/**
 * `wavegate revert` from the real command against a real Temporal dev server, a real worker and a
 * simulated SSH fleet: a completed r1 → r2 rollout undone inside its revert window (every device it
 * changed back at r1, read from the devices; the ones it did not change untouched; the audit and the
 * status naming the original), `--fast` as one phase with no gate and its health checks, a revert
 * refused after the window with the roll-forward printed and nothing started, and refusals of a
 * running, a rolled-back and an unknown rollout.
 */
const real = realRollouts('revert');
let fleet: Fleet;
let inventory = '';
/** The roll-forward's worker: `wavegate worker --profiles <root>` with pins of keys this test made. */
let forwardWorker: Awaited<ReturnType<typeof spawnCliUntil>> | undefined;
const OFFLINE = 'edge-05';
const LEFT_BEHIND = 'edge-08';
const REQUIRED = ['edge-01', 'edge-02', 'edge-03', 'edge-04', 'edge-05', 'edge-06', 'edge-07'];
const FAST = {
  phases: [
    { canary: '1 device', gate: '0s' },
    { bulk: 'remainder', gate: '0s', healthGate: ['all-runtimes-healthy'] },
  ],
};

function wg(args: string[], timeoutMs?: number): Promise<CliRun> {
  return runCliAgainst(
    { address: real.env.address, taskQueue: real.worker.taskQueue, scratch: real.dir },
    args,
    timeoutMs,
  );
}

function spec(name: string, rollout: Record<string, unknown>): string {
  return writeDemoSpec(real.dir, name, rollout);
}

async function status(id: string): Promise<RolloutStatus> {
  const run = await wg(['status', id, '--json']);
  expect(run.code, run.stderr).not.toBe(2);
  return JSON.parse(run.stdout) as RolloutStatus;
}

/** The rollout id a command printed (`rollout <id> started`, `revert <id> started`). */
const printedId = (run: CliRun, verb: 'rollout' | 'revert'): string =>
  new RegExp(`^${verb} (rollout:demo:\\S+) started`, 'm').exec(run.stdout)?.[1] ??
  `no id printed: ${run.stdout}${run.stderr}`;
/** The id of the rollout whose revert window closed (the window test), for the roll-forward. */
let closedWindowId = 'not started';

/** Start r1 → r2 with `--wait --json`: the rollout's id and run id (first line) and the exit code. */
async function startAndWait(
  name: string,
  rollout: Record<string, unknown>,
): Promise<{ rolloutId: string; runId: string; run: CliRun }> {
  const run = await wg([
    'start',
    '-f',
    spec(name, rollout),
    '--inventory',
    inventory,
    '--wait',
    '--json',
    '--interval',
    '300',
  ]);
  const first = run.stdout.split('\n')[0] ?? '';
  expect(first, run.stdout + run.stderr).toMatch(/^\{/);
  const { rolloutId, runId } = JSON.parse(first) as { rolloutId: string; runId: string };
  return { rolloutId, runId, run };
}

const floorOf = (id: string): DeviceFloor | null => {
  const path = join(fleet.device(id).sandbox, '.wavegate/profiles/demo/floor');
  return existsSync(path) ? parseFloor(readFileSync(path, 'utf8')) : null;
};
const commandCounts = () => Object.fromEntries(fleet.devices.map((d) => [d.id, fleet.commands(d.id).length]));

beforeAll(async () => {
  const devices = demoDevices(8).map((d) => (d.id === LEFT_BEHIND ? { ...d, updateClass: 'left-behind' as const } : d));
  ({ fleet, inventoryPath: inventory } = await real.fleet(devices, { 'pool-a': 0.5, 'pool-b': 0.5 }));
});

afterAll(async () => {
  if (forwardWorker) await stopChild(forwardWorker.child);
});

describe('wavegate revert', () => {
  it('an unknown rollout id is NOT_FOUND (exit 2) with a clear message; --help explains the window and the roll-forward', async () => {
    const unknown = await wg(['revert', 'rollout:nope']);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain('wavegate: NOT_FOUND: no rollout with id "rollout:nope"');
    expect(fleet.totalCommands()).toBe(0);
    const help = await runCli(['revert', '--help']);
    expect(help.code).toBe(0);
    expect(help.stdout).toMatch(/revertWindow \(default 24h\)/);
    expect(help.stdout).toMatch(/roll-forward is\s+printed/);
  });

  it('bad inventory flags are refused (exit 2, naming the flag and the value) before Temporal is asked anything', async () => {
    // An address where nothing listens: reaching it would be UNAVAILABLE (exit 1), not these.
    const nowhere = { env: { TEMPORAL_ADDRESS: '', TEMPORAL_PROFILE: '', WAVEGATE_TEST_UNSET: '' } };
    const cases: Array<[string[], string]> = [
      [
        ['--inventory-url', 'ftp://cmdb/devices'],
        '--inventory-url "ftp://cmdb/devices": must be http or https (got ftp)',
      ],
      [['--inventory-token-env', 'CMDB_TOKEN'], '--inventory-token-env: only with --inventory-url'],
      [
        ['--inventory-url', 'http://127.0.0.1:1/devices', '--inventory-token-env', 'WAVEGATE_TEST_UNSET'],
        '--inventory-token-env "WAVEGATE_TEST_UNSET": that environment variable is not set or empty',
      ],
      [
        ['--inventory', 'fleet.yaml', '--inventory-url', 'http://127.0.0.1:1/devices'],
        '--inventory-url: give --inventory or --inventory-url, not both',
      ],
    ];
    for (const [flags, message] of cases) {
      const run = await runCli(['revert', 'rollout:demo', ...flags, '--address', '127.0.0.1:1'], nowhere);
      expect(run.code, run.stderr).toBe(2);
      expect(run.stderr).toContain(`wavegate: INVALID_INPUT: ${message}`);
    }
  });

  it('a running rollout and a rolled-back one are refused naming their state, and nothing is started', async () => {
    for (const d of fleet.devices) await fleet.setFaults(d.id, { unhealthyRuntimes: ['motd'] });
    const started = await wg([
      'start',
      '-f',
      spec('manual', {
        phases: [
          { canary: '1 device', gate: 'manual', healthGate: ['all-runtimes-healthy'] },
          { bulk: 'remainder', gate: '0s' },
        ],
      }),
      '--inventory',
      inventory,
    ]);
    expect(started.code, started.stderr).toBe(0);
    const id = printedId(started, 'rollout');
    await until(
      'the canary at its manual gate',
      async () => ((await status(id)).phases[0]?.stage === 'awaiting-approval' ? true : undefined),
      90_000,
    );

    const running = await wg(['revert', id]);
    expect(running.code, running.stdout).toBe(2);
    expect(running.stderr).toContain(
      `wavegate: INVALID_STATE: ${id} is running: only a completed rollout can be reverted; to undo it now, abort it`,
    );

    expect((await wg(['approve', id])).code).toBe(0);
    const back = await until(
      'the failed health gate to roll the canary back',
      async () => {
        const s = await status(id);
        return s.state === 'running' || s.state === 'paused' ? undefined : s;
      },
      90_000,
    );
    expect(back.state).toBe('rolled-back');
    const before = fleet.totalCommands();
    const rolledBack = await wg(['revert', id]);
    expect(rolledBack.code, rolledBack.stdout).toBe(2);
    expect(rolledBack.stderr).toContain(
      `INVALID_STATE: ${id} is rolled-back: it already put back every device it changed to r1; nothing to revert`,
    );
    expect((await status(id)).state).toBe('rolled-back');
    expect(fleet.totalCommands()).toBe(before);
    for (const d of fleet.devices) await fleet.setFaults(d.id, {});
  });

  it('inside the window: the revert brings exactly the devices the rollout changed back to r1, the others untouched; audit and status name the original', async () => {
    await fleet.setFaults(OFFLINE, { offline: true });
    const { rolloutId: id, runId, run } = await startAndWait('inside', { ...FAST, revertWindow: '1h' });
    expect(run.code, run.stdout + run.stderr).toBe(1); // completed with the offline device skipped
    const original = await status(id);
    const changed = REQUIRED.filter((id) => id !== OFFLINE);
    expect(
      original.devices
        .filter((d) => d.state === 'applied')
        .map((d) => d.id)
        .sort(),
    ).toEqual(changed);
    for (const id of changed) expect(markerOf(fleet, id)).toBe(2);
    await fleet.setFaults(OFFLINE, {});
    const offlineMarker = markerOf(fleet, OFFLINE);
    expect([null, 1]).toContain(offlineMarker);

    const before = commandCounts();
    const revert = await wg(['revert', id, '--wait', '--interval', '300']);
    expect(revert.code, revert.stdout + revert.stderr).toBe(0);
    // The revert is a rollout of its own, with an id of its own.
    const revertId = printedId(revert, 'revert');
    expect(revertId).not.toBe(id);
    expect(revert.stdout).toContain(
      `revert ${revertId} started: r2 → r1 over the 6 device(s) ${id} (run ${runId}) changed, 2 phase(s) as it ran`,
    );
    expect(revert.stdout).toMatch(/rollout completed: .* — exit 0/);
    // The revert's membership holds only the devices it puts back, and its input lists none of them.
    const revertStarted = (await real.env.client.workflow.getHandle(revertId).fetchHistory()).events![0]!
      .workflowExecutionStartedEventAttributes!;
    const revertInput = await real.env.client.options.loadedDataConverter.payloadConverter.fromPayload<RolloutInput>(
      revertStarted.input!.payloads![0]!,
    );
    expect(revertInput.onlyDevices).toBeUndefined();
    expect(revertInput.membership?.devices).toBe(changed.length);

    // Read back from the devices: every changed one verifies r1 again, with its marker and its floor at r1.
    for (const id of changed) {
      expect(markerOf(fleet, id), id).toBe(1);
      expect(verifiesAt(fleet, id, 1), id).toBe(true);
      expect(verifiesAt(fleet, id, 2), id).toBe(false);
      // Raised by the revert's own apply, to its target with no way back (window 0), tagged with the revert's run.
      expect(floorOf(id), id).toEqual({
        revision: 1,
        from: 1,
        revertUntil: 0,
        rollout: revertId,
        run: expect.not.stringMatching(runId),
        window: 0,
        at: expect.any(Number),
        wayBack: 0,
      });
    }
    // The devices it did not change (offline then, left-behind) saw no command at all.
    const after = commandCounts();
    for (const id of [OFFLINE, LEFT_BEHIND]) expect(after[id], id).toBe(before[id]);
    // Untouched (r1 if an earlier test's canary, picked by the rollout's id, was it and was put back; else none).
    expect(markerOf(fleet, OFFLINE)).toBe(offlineMarker);

    // The revert's own history (patch revert-rollouts) is replayed by test/workflow/replay.test.ts.
    await recordHistory(real.env.client.workflow.getHandle(revertId), 'revert-inside-window');
    const reverted = await status(revertId);
    expect(reverted).toMatchObject({
      fromRevision: 2,
      toRevision: 1,
      state: 'completed',
      reverts: { rolloutId: id, runId },
    });
    expect(reverted.devices.map((d) => d.id).sort()).toEqual(changed);
    expect(reverted.phases).toHaveLength(2);
    const human = await wg(['status', revertId]);
    expect(human.stdout).toContain(`reverts: ${id} (run ${runId}), r2 → r1`);

    const audit = await wg(['audit', revertId, '--audit-dir', real.auditDir, '--json']);
    expect(audit.code, audit.stderr).toBe(0);
    const records = JSON.parse(audit.stdout) as AuditRecord[];
    expect(records[0]).toMatchObject({
      event: 'rollout.started',
      evidence: { from: 2, to: 1, reverts: id, revertsRun: runId },
    });
    expect(records.find((r) => r.event === 'floor.confirmed')).toMatchObject({
      evidence: { revision: 1, from: 1, revertWindowMs: 0 },
    });
    // The original's trail, by its id alone.
    const originalTrail = await wg(['audit', id, '--audit-dir', real.auditDir, '--json']);
    expect((JSON.parse(originalTrail.stdout) as AuditRecord[]).at(-1)).toMatchObject({ event: 'rollout.completed' });

    // A revert is not reverted again: going up is a start.
    const again = await wg(['revert', revertId]);
    expect(again.code).toBe(2);
    expect(again.stderr).toContain(
      `${revertId} is itself a revert of ${id} (run ${runId}): to go back up to r2, start a rollout r1 → r2 again`,
    );
  });

  it('--fast: one phase over every changed device, no gate timer, its health checks still run', async () => {
    const { rolloutId: id, runId, run } = await startAndWait('fast', { ...FAST, revertWindow: '1h' });
    expect(run.code, run.stdout + run.stderr).toBe(0);
    for (const id of REQUIRED) expect(markerOf(fleet, id)).toBe(2);
    const before = commandCounts();

    const revert = await wg(['revert', id, '--fast', '--wait', '--interval', '300']);
    expect(revert.code, revert.stdout + revert.stderr).toBe(0);
    expect(revert.stdout).toContain(`over the 7 device(s) ${id} (run ${runId}) changed, one phase, no gate (--fast)`);
    const revertId = printedId(revert, 'revert');
    await recordHistory(real.env.client.workflow.getHandle(revertId), 'revert-fast');
    const s = await status(revertId);
    expect(s.reverts).toEqual({ rolloutId: id, runId, closedAt: expect.any(Number) });
    expect(s.phases).toEqual([
      expect.objectContaining({ name: 'revert (fast)', devices: 7, gate: 0, stage: 'passed', gateOutcome: 'pass' }),
    ]);
    expect(s.phases[0]!.evidence!.join(' ')).toContain('all-runtimes-healthy');
    for (const id of REQUIRED) expect(markerOf(fleet, id), id).toBe(1);
    expect(commandCounts()[LEFT_BEHIND]).toBe(before[LEFT_BEHIND]);
  });

  it('outside the window: refused (exit 2) with the roll-forward commands, nothing started, and the devices keep their floor', async () => {
    const { rolloutId: id, runId, run } = await startAndWait('short-window', { ...FAST, revertWindow: '3s' });
    expect(run.code, run.stdout + run.stderr).toBe(0);
    closedWindowId = id;
    const closedFloor = floorOf('edge-01');
    // Raised by its apply, tagged with the run, carrying the window; the window runs from the rollout's close.
    expect(closedFloor).toMatchObject({ revision: 2, from: 1, rollout: id, run: runId, window: 3_000 });
    const closedAt = (await real.env.client.workflow.getHandle(id, runId).describe()).closeTime!.getTime();
    await until('the 3 s revert window to pass', async () =>
      Date.now() > closedAt + 3_000 + 1_500 ? true : undefined,
    );

    const before = fleet.totalCommands();
    const late = await wg(['revert', id]);
    expect(late.code, late.stdout).toBe(2);
    expect(late.stderr).toContain(`wavegate: INVALID_STATE: ${id} completed at `);
    expect(late.stderr).toMatch(
      / completed at \S+ and its revert window \(revertWindow 3s\) closed at \S+: its devices' floor is r2 now/,
    );
    expect(late.stderr).toContain("roll forward: r1's content as a new revision r3, then a rollout r2 → r3:");
    expect(late.stderr).toMatch(
      /wavegate sign \S+\/profiles\/demo\/revisions\/3\.yaml --key <your key> --out \S+\/profiles\/demo\/envelopes\/3\.json/,
    );
    expect(late.stderr).toContain("wavegate start -f <the rollout's spec with fromRevision: 2, toRevision: 3>");

    // Nothing started: the profile's lock is free, and no device was contacted.
    const still = await status(id);
    expect(still).toMatchObject({ fromRevision: 1, toRevision: 2, state: 'completed' });
    expect(still.reverts).toBeUndefined();
    expect((await real.env.client.workflow.getHandle('profile-lock:demo').describe()).status.name).toBe('COMPLETED');
    expect(fleet.totalCommands()).toBe(before);
    for (const id of REQUIRED) expect(markerOf(fleet, id)).toBe(2);
  });
});

describe('the printed roll-forward, run as printed', () => {
  it("signs r1's content as r3 and rolls the fleet forward from r2 to it: every device verifies r1's content at marker 3", async () => {
    // A profiles root of our own: the demo's files, signed 2-of-2 by keys made here (the demo's are gone).
    const root = join(real.dir, 'profiles');
    const dir = join(root, 'demo');
    cpSync(join(PROJECT_ROOT, 'profiles', 'demo'), dir, { recursive: true });
    rmSync(join(dir, 'envelopes'), { recursive: true });
    mkdirSync(join(dir, 'envelopes'));
    const key = (name: string) => join(real.dir, `${name}.key`);
    const offline = async (args: string[]) => {
      const run = await runCli(args);
      expect(run.code, `${args.join(' ')}\n${run.stdout}\n${run.stderr}`).toBe(0);
      return run;
    };
    for (const name of ['alice', 'bob']) await offline(['keygen', '--out', key(name), '--name', name]);
    await offline([
      'trust',
      `${key('alice')}.pub.yaml`,
      `${key('bob')}.pub.yaml`,
      '--threshold',
      '2',
      '--out',
      join(dir, 'trust.yaml'),
    ]);
    for (const n of [1, 2]) {
      await offline([
        'sign',
        join(dir, 'revisions', `${n}.yaml`),
        '--key',
        key('alice'),
        '--out',
        join(dir, 'envelopes', `${n}.json`),
      ]);
      await offline(['cosign', join(dir, 'envelopes', `${n}.json`), '--key', key('bob')]);
    }
    const queue = `${real.worker.taskQueue}-forward`;
    forwardWorker = await spawnCliUntil(
      [
        'worker',
        '--address',
        real.env.address,
        '--task-queue',
        queue,
        '--profiles',
        root,
        '--audit-dir',
        real.auditDir,
      ],
      /worker \S+ polling/,
    );
    const wgForward = (args: string[]) =>
      runCli([...args, '--address', real.env.address, '--task-queue', queue], {
        timeoutMs: 180_000,
        env: {
          TEMPORAL_ADDRESS: '',
          TEMPORAL_PROFILE: '',
          TEMPORAL_CONFIG_FILE: join(real.dir, 'none.toml'),
          WAVEGATE_PROFILES: '',
        },
      });

    // The fleet is at r2 with its window closed (the test above): the revert prints the way forward.
    for (const id of REQUIRED) expect(markerOf(fleet, id)).toBe(2);
    const late = await wgForward(['revert', closedWindowId, '--profiles', root]);
    expect(late.code).toBe(2);
    const lines = late.stderr.split('\n').map((l) => l.trim());
    const at = lines.indexOf("roll forward: r1's content as a new revision r3, then a rollout r2 → r3:");
    expect(at, late.stderr).toBeGreaterThan(0);
    const [sed, sign, cosign, start] = lines.slice(at + 1, at + 5);
    expect(sed).toMatch(/^sed /);

    execFileSync('/bin/sh', ['-c', sed!]);
    await offline(sign!.replace('<your key>', key('alice')).split(' ').slice(1));
    await offline(
      cosign!
        .replace(/ +#.*$/, '')
        .replace("<the next signer's key>", key('bob'))
        .split(' ')
        .slice(1),
    );
    const forwardSpec = spec('forward', { ...FAST, fromRevision: 2, toRevision: 3 });
    const startArgs = start!
      .replace(/<the rollout's spec[^>]*>/, forwardSpec)
      .split(' ')
      .slice(1);
    expect(startArgs).toEqual(['start', '-f', forwardSpec, '--inventory', inventory, '--profiles', root, '--wait']);
    const forward = await wgForward(startArgs);
    expect(forward.code, forward.stdout + forward.stderr + forwardWorker.output()).toBe(0);

    for (const id of REQUIRED) {
      expect(markerOf(fleet, id), id).toBe(3);
      expect(verifiesAt(fleet, id, 1), id).toBe(true);
      expect(floorOf(id), id).toMatchObject({ revision: 3, from: 2 });
    }
    expect(markerOf(fleet, LEFT_BEHIND)).toBeNull();
  }, 300_000);
});
