import { chmodSync, existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { WorkflowFailedError } from '@temporalio/client';
import { beforeAll, describe, expect, it } from 'vitest';
import { readVerdicts, verdictsPathFor, writeVerdicts } from '../../intake/node-down';
import { demoDevices, type Fleet } from '../../sim';
import { runCli, type CliRun } from '../support/cli';
import { realRollouts } from '../support/real-rollouts';
import { rejection } from '../support/refusal';
import { writeDemoSpecAt } from '../support/harness';

/**
 * Node-down verdicts end to end (issue 14 item 5): the real `wavegate` command against a real Temporal
 * dev server, a real worker and a simulated SSH fleet. A verdict makes its device not-for-me in the
 * plan with its reason (and no command reaches it); the board rechecks every verdict on the control
 * host and prints `node-down since ..., expires ...` and `never reported`; a verdict past its
 * expiresAt brings the device back into the next plan and is never silently renewed; a recheck that
 * passes at snapshot time lifts its verdict on the worker, recorded in the file and the status.
 */
const real = realRollouts('node-down');
let fleet: Fleet;
let inventory = '';
let verdictsFile = '';
const APPLY_R2 = 'install -m 0644 "$WAVEGATE_STAGING/motd"';
const DEAD = 'edge-02';
const FLAKY = 'edge-03';
const BACK_AT_BOARD = 'edge-04';
const flag = join(real.dir, 'edge-03-is-back');

function wg(args: string[], timeoutMs = 180_000): Promise<CliRun> {
  return real.cli(args, timeoutMs);
}
/** Commands that take no Temporal options. */
const offline = (args: string[]) => runCli(args, { env: { WAVEGATE_PROFILES: '' } });

function spec(): string {
  const path = join(real.dir, 'fast.yaml');
  writeDemoSpecAt(path, {
    phases: [
      { canary: '1 device', gate: '0s' },
      { bulk: 'remainder', gate: '0s' },
    ],
  });
  return path;
}

interface Status {
  state: string;
  warnings: string[];
  devices: Array<{ id: string; state: string; reason?: string }>;
}
/** The id of the rollout a `start` printed (`rollout <id> started`). */
const startedId = (run: { stdout: string }): string =>
  /^rollout (rollout:demo:\S+) started$/m.exec(run.stdout)?.[1] ?? 'no id printed';
const statusOf = async (id: string): Promise<Status> =>
  JSON.parse((await wg(['status', id, '--json'])).stdout) as Status;
const board = () => wg(['fleet', 'status', '--profile', 'demo', '--inventory', inventory]);
const rowOf = (stdout: string, id: string) => stdout.split('\n').find((l) => l.trimStart().startsWith(`${id} `)) ?? '';

beforeAll(async () => {
  ({ fleet, inventoryPath: inventory } = await real.fleet(demoDevices(6), { 'pool-a': 0.5, 'pool-b': 0.5 }));
  verdictsFile = verdictsPathFor(inventory);
});

describe('node-down verdicts through the CLI, the worker and the planner', () => {
  it('bad input exits 2 naming the field and the value, and writes nothing', async () => {
    const cases: Array<[string[], string]> = [
      [
        ['fleet', 'mark-down', 'edge-99', '--recheck', 'true', '--reason', 'gone'],
        'device "edge-99": not in the inventory',
      ],
      [
        ['fleet', 'mark-down', DEAD, '--recheck', 'true', '--reason', 'gone', '--expires', '5m'],
        '--expires "5m": must be between 1h and 365d',
      ],
      [
        ['fleet', 'mark-down', DEAD, '--recheck', 'true', '--reason', 'gone', '--expires', 'forever'],
        '--expires "forever"',
      ],
      [['fleet', 'mark-down', DEAD, '--recheck', '', '--reason', 'gone'], '--recheck "": must be a command'],
      [['fleet', 'mark-down', DEAD, '--recheck', 'true', '--reason', ' '], '--reason " ": must say why'],
      [['fleet', 'mark-up', DEAD], `device "${DEAD}" has no node-down verdict`],
    ];
    for (const [args, message] of cases) {
      const run = await offline([...args, '--inventory', inventory]);
      expect(run.code, args.join(' ')).toBe(2);
      expect(run.stderr).toContain(message);
    }
    expect(existsSync(verdictsFile)).toBe(false);
  });

  it('the board rechecks every verdict now: node-down since ..., expires ... for the down ones, a passing recheck lifts one, never reported for devices without a marker', async () => {
    for (const [id, recheck, reason] of [
      [DEAD, 'exit 1', 'PSU failed, ticket OPS-12'],
      [FLAKY, `test -f ${flag}`, 'flapping uplink'],
      [BACK_AT_BOARD, 'test "$WAVEGATE_DEVICE" = edge-04', 'was rebooting'],
    ] as const) {
      const marked = await offline([
        'fleet',
        'mark-down',
        id,
        '--inventory',
        inventory,
        '--recheck',
        recheck,
        '--reason',
        reason,
      ]);
      expect(marked.code, marked.stderr).toBe(0);
      expect(marked.stdout).toMatch(new RegExp(`${id}: node-down since \\S+Z, expires \\S+Z: ${reason}`));
    }
    const run = await board();
    expect(run.code, run.stdout + run.stderr).toBe(1);
    expect(rowOf(run.stdout, DEAD)).toMatch(
      /not-for-me .*node-down since \d{4}-\d\d-\d\dT\S+Z, expires \d{4}-\d\d-\d\dT\S+Z: PSU failed, ticket OPS-12/,
    );
    expect(rowOf(run.stdout, FLAKY)).toMatch(/not-for-me .*node-down since .* flapping uplink/);
    expect(rowOf(run.stdout, BACK_AT_BOARD)).toMatch(
      /pending .*node-down lifted at \S+: its recheck passed \(was rebooting\); verify exited \d \(never reported: no revision marker\)/,
    );
    expect(rowOf(run.stdout, 'edge-01')).toMatch(/pending .*never reported/);
    expect(run.stdout).toMatch(/not-for-me +2/);

    const file = readVerdicts(verdictsFile);
    expect(file.verdicts.map((v) => v.device).sort()).toEqual([DEAD, FLAKY]);
    expect(file.verdicts.find((v) => v.device === DEAD)).toMatchObject({ lastCheckResult: 'exit 1' });
    expect(file.history.filter((h) => h.event === 'lifted-by-recheck')).toEqual([
      expect.objectContaining({ device: BACK_AT_BOARD }),
    ]);
    expect(fleet.totalCommands()).toBeGreaterThan(0); // the board read the others over SSH
    expect(fleet.count(DEAD, /./)).toBe(0);
  });

  it('a rollout leaves a device under a holding verdict not-for-me with the reason, and sends it no command', async () => {
    const run = await wg(['start', '-f', spec(), '--inventory', inventory, '--wait', '--interval', '300']);
    expect(run.code, run.stdout + run.stderr).toBe(0);
    const status = await statusOf(startedId(run));
    expect(status.state).toBe('completed');
    for (const id of [DEAD, FLAKY]) {
      expect(status.devices.find((d) => d.id === id)).toMatchObject({
        state: 'not-for-me',
        reason: expect.stringMatching(/^node-down since \S+Z, expires \S+Z: /),
      });
      expect(fleet.count(id, /./)).toBe(0);
    }
    expect(
      status.devices
        .filter((d) => d.state === 'applied')
        .map((d) => d.id)
        .sort(),
    ).toEqual(['edge-01', 'edge-04', 'edge-05', 'edge-06']);
  });

  it('an expired verdict brings its device back into the next plan and is not renewed; a recheck passing at snapshot lifts its verdict on the worker', async () => {
    // DEAD's verdict ran out a minute ago; FLAKY is back (its recheck passes from now on).
    const file = readVerdicts(verdictsFile);
    const expiredAt = new Date(Date.now() - 60_000).toISOString();
    writeVerdicts(verdictsFile, {
      ...file,
      verdicts: file.verdicts.map((v) =>
        v.device === DEAD
          ? { ...v, since: new Date(Date.now() - 3 * 86_400_000).toISOString(), expiresAt: expiredAt }
          : v,
      ),
    });
    writeFileSync(flag, 'yes\n');

    // The worker-side recheck happens only when the worker reads the inventory itself (issue 11: `start` rechecks on its own host otherwise).
    const run = await wg([
      'start',
      '-f',
      spec(),
      '--inventory',
      inventory,
      '--inventory-on-worker',
      '--wait',
      '--interval',
      '300',
    ]);
    expect(run.code, run.stdout + run.stderr).toBe(0);
    const status = await statusOf(startedId(run));
    expect(
      status.devices
        .filter((d) => d.state === 'applied' && !d.reason)
        .map((d) => d.id)
        .sort(),
    ).toEqual([DEAD, FLAKY]);
    expect(fleet.count(DEAD, APPLY_R2)).toBe(1);
    expect(fleet.count(FLAKY, APPLY_R2)).toBe(1);
    expect(status.warnings).toContainEqual(
      expect.stringMatching(new RegExp(`^device ${DEAD}: node-down expired ${expiredAt.replace(/\.\d{3}Z$/, 'Z')}`)),
    );
    expect(status.warnings).toContainEqual(
      expect.stringMatching(
        new RegExp(`^device ${FLAKY}: node-down lifted at \\S+: its recheck passed \\(flapping uplink\\)`),
      ),
    );

    const after = readVerdicts(verdictsFile);
    // The expired verdict is still there, exactly as it was (never extended); the lifted one is gone, by the worker.
    expect(after.verdicts).toEqual([expect.objectContaining({ device: DEAD, expiresAt: expiredAt })]);
    expect(after.history.at(-1)).toMatchObject({
      device: FLAKY,
      event: 'lifted-by-recheck',
      by: expect.stringMatching(/^worker /),
    });

    // The board says so until an operator acts: node-down expired <date>.
    const shown = await board();
    expect(shown.code, shown.stdout).toBe(0);
    expect(rowOf(shown.stdout, DEAD)).toMatch(
      new RegExp(`applied .*node-down expired ${expiredAt.replace(/\.\d{3}Z$/, 'Z')}`),
    );
    const listed = await offline(['fleet', 'verdicts', '--inventory', inventory, '--json']);
    expect(JSON.parse(listed.stdout).verdicts).toEqual([
      expect.objectContaining({ device: DEAD, standing: 'expired' }),
    ]);

    const up = await offline(['fleet', 'mark-up', DEAD, '--inventory', inventory]);
    expect(up.code, up.stderr).toBe(0);
    expect(readVerdicts(verdictsFile).verdicts).toEqual([]);
    expect(rowOf((await board()).stdout, DEAD)).not.toContain('node-down');
  });

  it('the worker refuses a verdicts file others may write: the rollout fails at snapshot naming the file, with no command sent', async () => {
    await offline(['fleet', 'mark-down', DEAD, '--inventory', inventory, '--recheck', 'exit 1', '--reason', 'again']);
    chmodSync(verdictsFile, 0o666);
    const before = fleet.totalCommands();
    // Without --inventory-on-worker `start` itself refuses the file (exit 2) before anything starts.
    const refused = await wg(['start', '-f', spec(), '--inventory', inventory, '--wait', '--interval', '300']);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toContain(`${verdictsFile}: refused: is world-writable (mode 0666)`);
    const run = await wg([
      'start',
      '-f',
      spec(),
      '--inventory',
      inventory,
      '--inventory-on-worker',
      '--wait',
      '--interval',
      '300',
    ]);
    expect(run.code).not.toBe(0);
    const id = startedId(run);
    const described = await wg(['status', id, '--json']);
    const status = JSON.parse(described.stdout) as Status;
    expect(status.state).toBe('failed');
    const failed = await rejection(real.env.client.workflow.getHandle(id).result(), WorkflowFailedError);
    const failure = `${failed.cause?.message ?? ''} ${(failed.cause?.cause as Error | undefined)?.message ?? ''}`;
    expect(failure).toContain(`${verdictsFile}: refused: is world-writable (mode 0666)`);
    expect(fleet.totalCommands()).toBe(before);
    const board = await wg(['fleet', 'status', '--profile', 'demo', '--inventory', inventory]);
    expect(board.code).toBe(2);
    expect(board.stderr).toContain(`${verdictsFile}: refused: is world-writable (mode 0666)`);
    chmodSync(verdictsFile, 0o600);
  });
});
