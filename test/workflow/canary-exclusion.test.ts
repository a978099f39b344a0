import { copyFileSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { beforeAll, describe, expect, it } from 'vitest';
import { startOrJoinRollout } from '../../cli/client';
import { registerProfileEnvelopes } from '../../cli/registry-client';
import { prepareRollout } from '../../intake/prepare';
import { demoDevices, type Fleet } from '../../sim';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { runCli, type CliRun } from '../support/cli';
import { recordHistory } from '../support/histories';
import { realRollouts } from '../support/real-rollouts';
import { until } from '../support/until';

/**
 * The nightly canary and rollouts of its profile exclude each other (issue 14 item 6), against a real
 * dev server, a real worker, the simulator and the real CLI: a canary triggered on its schedule while
 * `rollout:demo` runs records `skipped: rollout running` (result, audit, search attribute, `schedule
 * describe`) and touches no device; `wavegate start` while a canary of the profile runs is refused
 * (exit 2) naming the canary, and so is a start while a converge of the profile runs.
 */
const real = realRollouts('canary-exclusion');
let fleet: Fleet;
let inventory = '';
const APPLY = /install -m 0644/;

function wg(args: string[], timeoutMs = 180_000): Promise<CliRun> {
  return real.cli(args, timeoutMs);
}

function specFile(name: string, body: Record<string, unknown>): string {
  const path = join(real.dir, `${name}.yaml`);
  writeFileSync(path, stringify({ rollout: body }));
  return path;
}

const applies = () => fleet.devices.reduce((n, d) => n + fleet.count(d.id, APPLY), 0);

interface Listed {
  workflowId: string;
  type: string;
  status: string;
}
const running = async (): Promise<Listed[]> =>
  (JSON.parse((await wg(['list', '--profile', 'demo', '--json'])).stdout) as Listed[]).filter(
    (r) => r.status === 'RUNNING',
  );

async function closed(workflowId: string): Promise<void> {
  await until(
    `${workflowId} to close`,
    async () =>
      (await real.env.client.workflow.getHandle(workflowId).describe()).status.name === 'RUNNING' ? undefined : true,
    90_000,
  );
}

/** Every device back on r1 (its motd and marker): what a nightly canary starts from. */
function installR1(): void {
  for (const d of fleet.devices) {
    const sandbox = fleet.device(d.id).sandbox;
    mkdirSync(join(sandbox, 'etc'), { recursive: true });
    mkdirSync(join(sandbox, '.wavegate', 'profiles', 'demo'), { recursive: true });
    copyFileSync(join(PROJECT_ROOT, 'profiles', 'demo', 'payload', 'motd-r1'), join(sandbox, 'etc', 'motd'));
    writeFileSync(join(sandbox, '.wavegate', 'profiles', 'demo', 'revision'), '1\n');
  }
}

beforeAll(async () => {
  ({ fleet, inventoryPath: inventory } = await real.fleet(demoDevices(6), { 'pool-a': 0.5, 'pool-b': 0.5 }));
  // An installed fleet on r1, and r1, r2 registered: what a nightly canary starts from.
  installR1();
  await registerProfileEnvelopes(real.env.client, {
    profile: 'demo',
    profileDir: join(PROJECT_ROOT, 'profiles', 'demo'),
    by: 'test',
    taskQueue: real.worker.taskQueue,
  });
  const canarySpec = specFile('canary', {
    phases: [{ canary: '1 device', gate: '10m', healthGate: ['all-runtimes-healthy', 'error-rate < 0.01'] }],
  });
  const created = await wg([
    'schedule',
    'create',
    'nightly-demo',
    '--profile',
    'demo',
    '--inventory',
    inventory,
    '--at',
    '02:00',
    '-f',
    canarySpec,
  ]);
  expect(created.code, created.stderr).toBe(0);
});

describe('nightly canary and rollouts exclude each other', () => {
  it('a canary triggered while a rollout of demo runs records skipped: rollout running and applies nothing', async () => {
    const manual = specFile('manual', {
      profile: 'demo',
      fromRevision: 1,
      toRevision: 2,
      disruptionBudget: { 'pool-a': 0.5, 'pool-b': 0.5 },
      phases: [
        { canary: '1 device', gate: 'manual' },
        { bulk: 'remainder', gate: '0s' },
      ],
    });
    const started = await wg(['start', '-f', manual, '--inventory', inventory]);
    expect(started.code, started.stderr).toBe(0);
    const id = /^rollout (rollout:demo:\S+) started$/m.exec(started.stdout)?.[1] ?? 'no id printed';
    await until('the rollout at its manual gate', async () => {
      const run = await wg(['status', id, '--json']);
      return run.code !== 2 &&
        (JSON.parse(run.stdout) as { phases: Array<{ stage: string }> }).phases[0]?.stage === 'awaiting-approval'
        ? true
        : undefined;
    });
    const before = applies();

    const triggered = await wg(['schedule', 'trigger', 'nightly-demo', '--wait', '--json']);
    expect(triggered.code, triggered.stderr).toBe(1);
    const result = JSON.parse(triggered.stdout) as {
      verdict: string;
      reason: string;
      rolloutId?: string;
      kept: boolean;
    };
    expect(result).toMatchObject({ verdict: 'skipped', reason: `skipped: rollout running (${id})`, kept: false });
    expect(result.rolloutId).toBeUndefined();
    expect(applies()).toBe(before);

    const described = await wg(['schedule', 'describe', 'nightly-demo']);
    expect(described.stdout).toContain('last verdict: skipped');
    expect(described.stdout).toContain(`verdict skipped  (skipped: rollout running (${id}))`);
    const nightlyId = (
      JSON.parse((await wg(['schedule', 'describe', 'nightly-demo', '--json'])).stdout) as {
        recentActions: Array<{ workflowId: string }>;
      }
    ).recentActions[0]!.workflowId;
    const audit = JSON.parse(
      (await runCli(['audit', nightlyId, '--json', '--audit-dir', real.auditDir])).stdout,
    ) as Array<{ event: string; reason: string; evidence: { reason: string } }>;
    expect(audit).toEqual([
      expect.objectContaining({
        event: 'canary.verdict',
        reason: 'skipped',
        evidence: expect.objectContaining({ reason: `skipped: rollout running (${id})` }),
      }),
    ]);
    // The new path (patch canary-rollout-exclusion) gets a history of its own for the replay test.
    await recordHistory(real.env.client.workflow.getHandle(nightlyId), 'nightly-canary-skipped-rollout-running');

    const aborted = await wg(['abort', id, '--reason', 'test over']);
    expect(aborted.code, aborted.stderr).toBe(0);
    await closed(id);
  });

  it('start while a canary of the profile runs is refused (exit 2) naming the canary; nothing starts', async () => {
    const triggered = await wg(['schedule', 'trigger', 'nightly-demo']);
    expect(triggered.code, triggered.stderr).toBe(0);
    const canary = await until('the canary rollout to run', async () =>
      (await running()).find((r) => r.workflowId.startsWith('canary:demo:')),
    );
    const nightly = (await running()).find((r) => r.type === 'nightlyCanaryWorkflow')!;
    expect(nightly).toBeDefined();

    const fast = specFile('fast', {
      profile: 'demo',
      fromRevision: 1,
      toRevision: 2,
      phases: [
        { canary: '1 device', gate: '0s' },
        { bulk: 'remainder', gate: '0s' },
      ],
    });
    const before = applies();
    const refused = await wg(['start', '-f', fast, '--inventory', inventory]);
    expect(refused.code, refused.stdout + refused.stderr).toBe(2);
    expect(refused.stderr).toContain('CONFLICT: a nightly canary of profile "demo" is running');
    expect(refused.stderr).toContain(canary.workflowId);
    expect(refused.stderr).toContain(nightly.workflowId);
    expect((await running()).map((r) => r.workflowId).filter((w) => w.startsWith('rollout:demo'))).toEqual([]);
    expect(applies()).toBe(before);

    await real.env.client.workflow.getHandle(nightly.workflowId).terminate('test over');
    await closed(canary.workflowId);
  });

  it('start while a converge of the profile runs is refused naming it', async () => {
    // The tests before may leave edge-01 on r2 (a canary terminated mid-apply): on r2 the converge would
    // have nothing to do and complete before the start below looks, so put the fleet back on r1 first.
    installR1();
    const manual = specFile('converge', {
      profile: 'demo',
      fromRevision: 1,
      toRevision: 2,
      phases: [{ canary: '1 device', gate: 'manual' }],
    });
    const input = {
      ...prepareRollout({
        specPath: manual,
        inventoryPath: inventory,
        profilesRoot: join(PROJECT_ROOT, 'profiles'),
        startedBy: 'test',
      }),
      rolloutId: 'rollout:demo:converge-1',
      onlyDevices: ['edge-01'],
    };
    await startOrJoinRollout(real.env.client, real.worker.taskQueue, input);
    // Visibility lags the start a little: wait until a start would find the converge by search attribute.
    await until(
      'the converge to be listed',
      async () => {
        for await (const info of real.env.client.workflow.list({
          query: "WavegateProfile = 'demo' AND ExecutionStatus = 'Running'",
        }))
          if (info.workflowId === 'rollout:demo:converge-1') return true;
        return undefined;
      },
      90_000,
    );
    // ... and it really is still running (held at its manual gate), not a listing that lags its end.
    await until(
      'the converge at its manual gate',
      async () => {
        const status = await real.env.client.workflow
          .getHandle('rollout:demo:converge-1')
          .query<{ phases: Array<{ stage: string }> }>('status');
        return status.phases[0]?.stage === 'awaiting-approval' ? true : undefined;
      },
      90_000,
    );
    const refused = await wg(['start', '-f', manual, '--inventory', inventory]);
    expect(refused.code, refused.stdout + refused.stderr).toBe(2);
    expect(refused.stderr).toContain(
      'CONFLICT: another rollout of profile "demo" is running (rollout:demo:converge-1)',
    );
    await real.env.client.workflow.getHandle('rollout:demo:converge-1').terminate('test over');
  });
});

/**
 * A freeze (issue 46 item 1), through the real CLI: `wavegate freeze` holds the running rollout (a pause recorded
 * as freeze-1's) and not the one an operator had paused; start and converge in scope are refused (exit 2) naming
 * the freeze; `unfreeze` resumes the rollout it paused, which completes, and leaves the operator's paused; under a
 * freeze of the profile a revert of that rollout is refused naming it, and a nightly canary triggered is skipped
 * naming it and changes no device.
 */
describe('a freeze', () => {
  /** The rollout the first test's freeze held, completed after it: what the second test's revert would undo. */
  let heldRollout = '';
  const statusOf = (id: string) =>
    real.env.client.workflow.getHandle(id).query<{
      state: string;
      phases: Array<{ stage: string }>;
      controls: Array<{ control: string; by: string; reason?: string; accepted: boolean }>;
    }>('status');
  const refusedNaming = (run: CliRun, action: string, freeze: string) => {
    expect(run.code, run.stdout + run.stderr).toBe(2);
    expect(run.stderr).toContain(`CONFLICT: ${action} of profile "demo" refused: frozen by ${freeze}`);
    expect(run.stderr).toContain(`wavegate unfreeze ${freeze.split(' ')[0]}`);
  };

  it('holds running rollouts, refuses new ones naming it, and resumes only what it paused', async () => {
    const phases = [
      { canary: '1 device', gate: '8s' },
      { bulk: 'remainder', gate: '0s' },
    ];
    const held = await real.rollout({ phases }, demoDevices(2), { 'pool-a': 1, 'pool-b': 1 });
    const paused = await real.rollout({ phases }, demoDevices(2), { 'pool-a': 1, 'pool-b': 1 });
    const heldApplies = () => held.fleet.devices.reduce((n, d) => n + held.fleet.count(d.id, APPLY), 0);
    await real.start(paused.input);
    const byOperator = await wg(['pause', paused.input.rolloutId, '--reason', 'looking at it']);
    expect(byOperator.code, byOperator.stderr).toBe(0);
    await real.start(held.input);
    await until('the rollout in its canary gate', async () =>
      (await statusOf(held.input.rolloutId)).phases[0]?.stage === 'gate' ? true : undefined,
    );
    const gateSeen = Date.now();

    const frozen = await wg(['freeze', '--reason', 'incident 42', '--json']);
    expect(frozen.code, frozen.stderr).toBe(0);
    const added = JSON.parse(frozen.stdout) as { window: { id: string; scope: unknown }; paused: string[] };
    expect(added).toMatchObject({ window: { id: 'freeze-1', scope: 'all' }, paused: [held.input.rolloutId] });
    const status = await statusOf(held.input.rolloutId);
    expect(status.state).toBe('paused');
    expect(status.controls.at(-1)).toMatchObject({
      control: 'pause',
      by: 'freeze:freeze-1',
      reason: 'incident 42',
      accepted: true,
    });
    // Held: its gate's time (8 s) runs out, and neither its health gate nor the next phase starts.
    await new Promise((r) => setTimeout(r, Math.max(0, gateSeen + 9_000 - Date.now())));
    expect((await statusOf(held.input.rolloutId)).phases.map((p) => p.stage)).toEqual(['gate', 'pending']);
    expect(heldApplies()).toBe(1);

    const fast = specFile('frozen-start', {
      profile: 'demo',
      fromRevision: 1,
      toRevision: 2,
      phases: [{ canary: '1 device', gate: '0s' }],
    });
    const before = applies();
    refusedNaming(
      await wg(['start', '-f', fast, '--inventory', inventory]),
      'start',
      'freeze-1 ("incident 42", all, until lifted)',
    );
    refusedNaming(
      await wg(['converge', '--profile', 'demo', '-f', fast, '--inventory', inventory]),
      'converge',
      'freeze-1 ("incident 42", all, until lifted)',
    );
    expect(applies()).toBe(before);
    const listed = JSON.parse((await wg(['freeze', 'list', '--json'])).stdout) as Array<{
      id: string;
      paused: string[];
    }>;
    expect(listed).toMatchObject([{ id: 'freeze-1', paused: [held.input.rolloutId] }]);

    const lifted = await wg(['unfreeze', 'freeze-1', '--json']);
    expect(lifted.code, lifted.stderr).toBe(0);
    expect(JSON.parse(lifted.stdout)).toEqual({ lifted: ['freeze-1'], resumed: [held.input.rolloutId], left: [] });
    const done = (await real.env.client.workflow.getHandle(held.input.rolloutId).result()) as { state: string };
    expect(done.state).toBe('completed');
    heldRollout = held.input.rolloutId;
    expect(heldApplies()).toBe(2);
    const still = await statusOf(paused.input.rolloutId);
    expect(still.state).toBe('paused');
    expect(still.controls.filter((c) => c.accepted).at(-1)).toMatchObject({
      control: 'pause',
      reason: 'looking at it',
    });
    expect(still.controls.some((c) => c.by.startsWith('freeze:') && c.accepted)).toBe(false);
    await real.env.client.workflow.getHandle(paused.input.rolloutId).terminate('test over');
  });

  it('a revert and a nightly canary triggered during a freeze of their profile are refused naming it; no device changes', async () => {
    installR1();
    const frozen = await wg(['freeze', '--profile', 'demo', '--reason', 'release week', '--until', '10m']);
    expect(frozen.code, frozen.stderr).toBe(0);
    expect(frozen.stdout).toMatch(/^freeze-2 in force: "release week" \(profile demo, until \S+; by /m);
    // A revert in scope is refused as a start is (the rollout completed inside its revert window).
    refusedNaming(await wg(['revert', heldRollout]), 'revert', 'freeze-2 ("release week", profile demo, until');
    const before = applies();
    const triggered = await wg(['schedule', 'trigger', 'nightly-demo', '--wait', '--json']);
    expect(triggered.code, triggered.stderr).toBe(1);
    const result = JSON.parse(triggered.stdout) as { verdict: string; reason: string; rolloutId?: string };
    expect(result.verdict).toBe('skipped');
    expect(result.reason).toMatch(
      /^nightly canary of demo refused: frozen by freeze-2 \("release week", profile demo, until \S+\)$/,
    );
    expect(result.rolloutId).toBeUndefined();
    expect(applies()).toBe(before);
    const nightlyId = (
      JSON.parse((await wg(['schedule', 'describe', 'nightly-demo', '--json'])).stdout) as {
        recentActions: Array<{ workflowId: string }>;
      }
    ).recentActions.at(-1)!.workflowId;
    // The new path (patch canary-freeze) gets a history of its own for the replay test.
    await recordHistory(real.env.client.workflow.getHandle(nightlyId), 'nightly-canary-frozen');
    const lifted = await wg(['unfreeze', '--all']);
    expect(lifted.code, lifted.stderr).toBe(0);
    expect(lifted.stdout).toContain('lifted freeze-2');
    expect(JSON.parse((await wg(['freeze', 'list', '--json'])).stdout)).toEqual([]);
  });
});
