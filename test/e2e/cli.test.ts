import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse, stringify } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { userInfo } from 'node:os';
import { runCli, startDevDemo, type CliRun, type DevDemo } from '../support/cli';
import { scratchDir, writeDemoSpec } from '../support/harness';
import { until } from '../support/until';

/**
 * The `wavegate` command as an operator runs it: real processes against `wavegate dev --demo` (Temporal
 * dev server, worker, 12 simulated SSH devices, the demo revisions registered), every command and every
 * refusal with its exit code.
 */
const scratch = scratchDir('cli');
let stack: DevDemo | undefined;
let address = '';
let uiUrl = '';
let inventory = '';
const me = userInfo().username;

/** wavegate against the dev stack; never the ambient TEMPORAL_* of the machine. */
function wg(args: string[], timeoutMs = 120_000): Promise<CliRun> {
  return runCli([...args, '--address', address], {
    timeoutMs,
    env: { TEMPORAL_ADDRESS: '', TEMPORAL_PROFILE: '', TEMPORAL_CONFIG_FILE: join(scratch.dir, 'none.toml') },
  });
}

function spec(name: string, rollout: Record<string, unknown>): string {
  return writeDemoSpec(scratch.dir, name, rollout);
}

async function statusOf(id: string): Promise<{
  state: string;
  phase: string;
  phases: Array<{ stage: string }>;
  controls: Array<{ control: string; by: string; reason?: string; accepted: boolean }>;
  counts: Record<string, number>;
}> {
  const run = await wg(['status', id, '--json']);
  // Answered (exit 2 is a refusal); 0 or 1 is the rollout's outcome so far (1 while it runs).
  expect(run.code, run.stderr).not.toBe(2);
  return JSON.parse(run.stdout);
}

const MANUAL = {
  phases: [
    { canary: '1 device', gate: 'manual' },
    { bulk: '25%', gate: 'manual' },
    { bulk: 'remainder', gate: '1s' },
  ],
};

beforeAll(async () => {
  stack = await startDevDemo(join(scratch.dir, 'state'));
  address = stack.address;
  uiUrl = stack.uiUrl;
  inventory = stack.inventory;
  expect(stack.output).toMatch(/registry:demo: r1 \w+, r2 \w+/);
});

afterAll(async () => {
  await stack?.stop();
  scratch.cleanup();
});

describe('wavegate CLI against the dev stack', () => {
  it('every command answers --help with exit 0', async () => {
    const commands = [
      [],
      ['start'],
      ['status'],
      ['watch'],
      ['list'],
      ['pause'],
      ['resume'],
      ['approve'],
      ['abort'],
      ['audit'],
      ['fleet', 'status'],
      ['drift'],
      ['schedule', 'create'],
      ['schedule', 'list'],
      ['schedule', 'describe'],
      ['schedule', 'pause'],
      ['schedule', 'unpause'],
      ['schedule', 'trigger'],
      ['schedule', 'delete'],
    ];
    const runs = await Promise.all(commands.map((c) => runCli([...c, '--help'])));
    runs.forEach((run, i) => {
      expect(run.code, `${commands[i]!.join(' ')} --help`).toBe(0);
      expect(run.stdout).toContain('Usage: wavegate');
    });
    expect(runs[1]!.stdout).toContain('--key <key>');
    expect(runs[5]!.stdout).toContain('--profile-name <name>');
    expect(runs[8]!.stdout).toContain('--no-rollback');
  });

  it('refuses bad input, unknown ids and a bad connection profile with exit 2', async () => {
    const bad = join(scratch.dir, 'bad.yaml');
    writeFileSync(
      bad,
      'rollout:\n  profile: demo\n  fromRevision: 1\n  toRevision: 2\n  phases:\n    - canary: lots\n',
    );
    const badSpec = await wg(['start', '-f', bad, '--inventory', inventory]);
    expect(badSpec.code).toBe(2);
    expect(badSpec.stderr).toContain('rollout.phases[0].canary');
    for (const args of [
      ['status', 'rollout:nope'],
      ['watch', 'rollout:nope'],
      ['pause', 'rollout:nope'],
      ['abort', 'rollout:nope', '--reason', 'x'],
    ]) {
      const run = await wg(args);
      expect(run.code, args.join(' ')).toBe(2);
      expect(run.stderr).toContain('NOT_FOUND: no rollout with id "rollout:nope"');
    }
    const badState = await wg(['list', '--state', 'sleeping']);
    expect(badState.code).toBe(2);
    expect(badState.stderr).toContain('--state "sleeping"');
    // The connection can come from a Temporal client config profile (TOML) instead of flags.
    const toml = join(scratch.dir, 'temporal.toml');
    writeFileSync(toml, `[profile.ci]\naddress = "${address}"\nnamespace = "default"\n`);
    const env = { TEMPORAL_ADDRESS: '', TEMPORAL_CONFIG_FILE: toml };
    const viaProfile = await runCli(['status', 'rollout:nope', '--profile-name', 'ci'], { env });
    expect(viaProfile.stderr).toContain('NOT_FOUND: no rollout with id "rollout:nope"');
    expect(viaProfile.code).toBe(2);
    const viaEnv = await runCli(['status', 'rollout:nope'], { env: { ...env, TEMPORAL_PROFILE: 'ci' } });
    expect(viaEnv.stderr).toContain('NOT_FOUND');
    const noProfile = await runCli(['status', 'rollout:nope', '--profile-name', 'staging'], { env });
    expect(noProfile.code).toBe(2);
    expect(noProfile.stderr).toContain('profile "staging"');
  });

  it('start → same key returns it → conflicts → pause/resume/approve/abort with refusals → list by search attributes', async () => {
    const manual = spec('manual', MANUAL);
    const started = await wg(['start', '-f', manual, '--inventory', inventory, '--key', 'change-42', '--json']);
    expect(started.code, started.stderr).toBe(0);
    const first = JSON.parse(started.stdout) as { rolloutId: string; runId: string; url: string; existing: boolean };
    // An id of its own: the profile and the UTC second it started (issue 23).
    expect(first.rolloutId).toMatch(/^rollout:demo:\d{8}-\d{6}$/);
    expect(first).toMatchObject({
      existing: false,
      url: `${uiUrl}/namespaces/default/workflows/${encodeURIComponent(first.rolloutId)}`,
    });
    const id = first.rolloutId;

    // A retried start with the same key and spec: the same rollout, not an error.
    const retried = await wg(['start', '-f', manual, '--inventory', inventory, '--key', 'change-42']);
    expect(retried.code, retried.stderr).toBe(0);
    expect(retried.stdout).toContain(`rollout ${id} already started with this key`);
    expect(retried.stdout).toContain(`Web UI: ${uiUrl}/namespaces/default/workflows/${encodeURIComponent(id)}`);
    const retriedJson = JSON.parse(
      (await wg(['start', '-f', manual, '--inventory', inventory, '--key', 'change-42', '--json'])).stdout,
    );
    expect(retriedJson).toMatchObject({ rolloutId: id, runId: first.runId, existing: true });

    // Another spec while it runs: CONFLICT, with or without a key.
    const other = spec('other', { ...MANUAL, maxFailureRatio: 0.2 });
    for (const extra of [['--key', 'change-42'], ['--key', 'change-43'], []]) {
      const run = await wg(['start', '-f', extra.length ? other : manual, '--inventory', inventory, ...extra]);
      expect(run.code, extra.join(' ')).toBe(2);
      expect(run.stderr).toContain('CONFLICT');
    }

    await until('the canary to wait for approval', async () =>
      (await statusOf(id)).phases[0]?.stage === 'awaiting-approval' ? true : undefined,
    );

    const listed = await until('visibility to list the running rollout', async () => {
      const run = await wg(['list', '--profile', 'demo', '--state', 'running', '--json']);
      expect(run.code, run.stderr).toBe(0);
      const rows = JSON.parse(run.stdout) as Array<{ workflowId: string; state: string; profile: string }>;
      return rows.find((r) => r.workflowId === id);
    });
    expect(listed).toMatchObject({ profile: 'demo', state: 'running' });
    const otherProfile = await wg(['list', '--profile', 'nothing-here', '--json']);
    expect(JSON.parse(otherProfile.stdout)).toEqual([]);

    // Controls: each accepted one records who and why; each invalid one is refused at once, exit 2.
    const wrongPhase = await wg(['approve', id, '--phase', '1']);
    expect(wrongPhase.code).toBe(2);
    expect(wrongPhase.stderr).toMatch(/phase 1 is not the one waiting; phase 0 "canary[^"]*" is/);
    const resumeRunning = await wg(['resume', id]);
    expect(resumeRunning.code).toBe(2);
    expect(resumeRunning.stderr).toContain('rollout is running; only a paused rollout can be resumed');

    const paused = await wg(['pause', id, '--reason', 'checking dashboards']);
    expect(paused.code, paused.stderr).toBe(0);
    const pausedAgain = await wg(['pause', id]);
    expect(pausedAgain.code).toBe(2);
    expect(pausedAgain.stderr).toContain('INVALID_STATE');
    expect(pausedAgain.stderr).toContain('rollout is paused; only a running rollout can be paused');
    let s = await statusOf(id);
    expect(s.state).toBe('paused');
    expect(s.controls.at(-1)).toMatchObject({
      control: 'pause',
      by: me,
      reason: 'checking dashboards',
      accepted: true,
    });
    const pausedList = await until('visibility to show it paused', async () => {
      const rows = JSON.parse((await wg(['list', '--state', 'paused', '--json'])).stdout) as Array<{
        workflowId: string;
      }>;
      return rows.find((r) => r.workflowId === id);
    });
    expect(pausedList).toBeDefined();

    expect((await wg(['resume', id, '--reason', 'dashboards fine'])).code).toBe(0);
    const approved = await wg(['approve', id, '--phase', '0', '--reason', 'canary looks right']);
    expect(approved.code, approved.stderr).toBe(0);
    s = await until('the next phase to wait for approval', async () => {
      const st = await statusOf(id);
      return st.phases[1]?.stage === 'awaiting-approval' ? st : undefined;
    });
    expect(s.controls.map((c) => `${c.control}:${c.by}:${c.accepted}`)).toEqual(
      expect.arrayContaining([`resume:${me}:true`, `approve:${me}:true`]),
    );

    const aborted = await wg(['abort', id, '--no-rollback', '--reason', 'enough for today', '--json']);
    expect(aborted.code, aborted.stderr).toBe(0);
    expect(JSON.parse(aborted.stdout).controls.at(-1)).toMatchObject({
      control: 'abort',
      by: me,
      reason: 'enough for today',
    });
    const final = await until('the abort to finish', async () => {
      const st = await statusOf(id);
      return st.state === 'aborted' ? st : undefined;
    });
    expect(final.state).toBe('aborted');
    const resumeAborted = await wg(['resume', id]);
    expect(resumeAborted.code).toBe(2);
    expect(resumeAborted.stderr).toContain('rollout is aborted; resume is no longer possible');

    const trail = await runCli(['audit', id, '--json', '--audit-dir', join(scratch.dir, 'state', 'audit')]);
    expect(trail.code, trail.stderr).toBe(0);
    const events = (JSON.parse(trail.stdout) as Array<{ event: string; by: string; reason: string | null }>).map(
      (r) => `${r.event}:${r.by}:${r.reason ?? ''}`,
    );
    expect(events).toEqual(
      expect.arrayContaining([
        `rollout.paused:${me}:checking dashboards`,
        `rollout.resumed:${me}:dashboards fine`,
        `rollout.approved:${me}:canary looks right`,
        `rollout.aborted:${me}:enough for today`,
      ]),
    );
  });

  it('start --watch draws plain lines when not a terminal and exits 0 when completed; controls on a completed rollout exit 2; audit verifies', async () => {
    const quick = spec('quick', {
      phases: [
        { canary: '1 device', gate: '1s' },
        { bulk: 'remainder', gate: '1s' },
      ],
    });
    const run = await wg(['start', '-f', quick, '--inventory', inventory, '--watch', '--interval', '300'], 180_000);
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toContain('Web UI: ');
    const id = /^rollout (rollout:demo:\S+) started$/m.exec(run.stdout)?.[1] ?? 'no id printed';
    expect(run.stdout).not.toContain('\x1b[');
    expect(run.stdout).toMatch(/\[running\] phase canary[^:]*: \d+\/12 applied/);
    expect(run.stdout).toMatch(/rollout completed: 12\/12 applied — exit 0/);
    const resumeCompleted = await wg(['resume', id]);
    expect(resumeCompleted.code).toBe(2);
    expect(resumeCompleted.stderr).toContain('rollout is completed; resume is no longer possible');
    const watchDone = await wg(['watch', id, '--json']);
    expect(watchDone.code).toBe(0);
    expect(JSON.parse(watchDone.stdout).state).toBe('completed');
    const verify = await runCli(['audit', id, '--verify', '--audit-dir', join(scratch.dir, 'state', 'audit')]);
    expect(verify.code, verify.stdout + verify.stderr).toBe(0);
    expect(verify.stdout).toContain('chain intact');
  });

  it('fleet status computes applied / claimed / pending / not-for-me now over SSH; drift finds a changed device', async () => {
    const green = await wg(['fleet', 'status', '--profile', 'demo', '--inventory', inventory]);
    expect(green.code, green.stdout + green.stderr).toBe(0);
    expect(green.stdout).toMatch(/^ {2}applied +12$/m);
    expect(green.stdout).toMatch(/^ {2}claimed +0$/m);
    expect((await wg(['drift', '--profile', 'demo', '--inventory', inventory])).code).toBe(0);

    // Somebody edits a device behind wavegate's back: its marker still says r2, the fact no longer holds.
    const doc = parse(readFileSync(inventory, 'utf8')) as {
      devices: Array<{ id: string; updateClass?: string; port: number }>;
    };
    const sandbox = join(scratch.dir, 'state', 'demo-fleet', 'edge-03');
    writeFileSync(join(sandbox, 'etc', 'motd'), 'hand-edited\n');
    const board = await wg(['fleet', 'status', '--profile', 'demo', '--inventory', inventory, '--json']);
    expect(board.code).toBe(1);
    const parsed = JSON.parse(board.stdout) as {
      counts: Record<string, number>;
      rows: Array<{ id: string; state: string; reason?: string; marker?: number }>;
    };
    expect(parsed.counts).toEqual({ applied: 11, claimed: 0, pending: 1, ahead: 0, notForMe: 0, total: 12 });
    expect(parsed.rows.find((r) => r.id === 'edge-03')).toMatchObject({ state: 'pending', marker: 2 });
    const drift = await wg(['drift', '--profile', 'demo', '--inventory', inventory]);
    expect(drift.code).toBe(1);
    expect(drift.stdout).toMatch(/edge-03 +drifted +r2/);
    // The board of another revision: nobody is on r1 any more. The devices at r2 (verified now) are ahead of
    // it, never behind; the drifted one, whose r2 verify fails, is pending.
    const r1 = await wg([
      'fleet',
      'status',
      '--profile',
      'demo',
      '--inventory',
      inventory,
      '--revision',
      '1',
      '--json',
    ]);
    expect(JSON.parse(r1.stdout).counts).toMatchObject({ pending: 1, ahead: 11, applied: 0 });

    // Left-behind, out of scope (another site), unreachable (a port nobody listens on).
    // And one whose pinned host key is not the one it presents: refused, and said so.
    const wrongPin = `SHA256:${'A'.repeat(43)}`;
    const edited = {
      ...doc,
      devices: doc.devices.map((d, i) =>
        i === 0
          ? { ...d, updateClass: 'left-behind' }
          : i === 1
            ? { ...d, port: 1 }
            : i === 2
              ? { ...d, ssh: { ...(d as { ssh?: object }).ssh, hostKey: wrongPin } }
              : d,
      ),
    };
    const altInventory = join(scratch.dir, 'alt-inventory.yaml');
    writeFileSync(altInventory, stringify(edited));
    const alt = JSON.parse(
      (await wg(['fleet', 'status', '--profile', 'demo', '--inventory', altInventory, '--json'])).stdout,
    ) as typeof parsed;
    expect(alt.rows.find((r) => r.id === 'edge-01')).toMatchObject({ state: 'not-for-me', reason: 'left-behind' });
    expect(alt.rows.find((r) => r.id === 'edge-02')).toMatchObject({ state: 'pending' });
    expect(alt.rows.find((r) => r.id === 'edge-02')!.reason).toMatch(/^never answered: /);
    expect(alt.rows.find((r) => r.id === 'edge-03')).toMatchObject({
      state: 'pending',
      reason: expect.stringMatching(/^refused \(host-key\): /),
    });

    // A profile whose verify cannot prove anything: every device that "passes" is only claimed.
    const profiles = join(scratch.dir, 'profiles');
    mkdirSync(join(profiles, 'prose', 'revisions'), { recursive: true });
    writeFileSync(join(profiles, 'prose', 'profile.yaml'), stringify({ name: 'prose', scope: { site: 'site-1' } }));
    writeFileSync(
      join(profiles, 'prose', 'revisions', '1.yaml'),
      stringify({ profile: 'prose', revision: 1, apply: 'touch "$HOME/prose"', verify: 'exit 0', risk: 'safe' }),
    );
    const claimed = await wg([
      'fleet',
      'status',
      '--profile',
      'prose',
      '--inventory',
      inventory,
      '--profiles',
      profiles,
    ]);
    expect(claimed.code).toBe(1);
    expect(claimed.stdout).toContain('NOT provable');
    expect(claimed.stdout).toMatch(/^ {2}applied +0$/m);
    expect(claimed.stdout).toMatch(/^ {2}claimed +6$/m);
    expect(claimed.stdout).toMatch(/^ {2}not-for-me +6$/m);
    expect(claimed.stdout).toMatch(/edge-12 +not-for-me .*out of scope \(site=site-1\)/);

    const unknown = await wg(['fleet', 'status', '--profile', 'demo', '--inventory', inventory, '--revision', '9']);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain('--revision 9');
  });
});
