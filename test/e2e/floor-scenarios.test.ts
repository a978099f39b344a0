import { randomUUID } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { ChildProcess } from 'node:child_process';
import { beforeAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { desireOnTwin, readTwin } from '../../clients/twin';
import { parseFloor, type DeviceFloor } from '../../core/floor';
import { changedDevices } from '../../core/rollout/revert';
import type { RolloutStatus } from '../../core/rollout/status';
import { envelopeDigestOf, requestIdOf, type DesiredRequest } from '../../core/twin';
import { demoDevices, fleetInventory, type Fleet } from '../../sim';
import { runCli, spawnCliUntil, stopChild, type CliRun } from '../support/cli';
import { realRollouts } from '../support/real-rollouts';
import { writeSignedProfile, type RevisionSource, type SignedProfile } from '../support/signed-profile';
import { until } from '../support/until';
import { twinAnswer } from '../support/twin-answer';

/**
 * The scenarios issue 21 demands ("Must show"), end to end over a mixed fleet: simulated SSH devices and
 * real `wavegate agent` processes behind a real `wavegate gateway`, one dev server and one worker, driven
 * by the real `wavegate` CLI. Each scenario has a profile of its own (w21a..w21e, r1..r5, signed 2-of-2
 * by keys made here (test/support/signed-profile.ts) and pinned by the worker, the gateway and every agent), so floors and markers of one
 * never meet another's. Every apply appends `r<n>` to `$HOME/etc/<profile>.runs` on the device.
 *
 *   1. an old spec (r1 -> r2) re-run on a fleet at r5 applies nothing, now or later (no agent is given r2);
 *   2. a twin desired below an agent's floor is refused BELOW_FLOOR;
 *   3. a re-run of a completed spec changes no floor or revert window, and the first window still closes;
 *   4. a device found in place is left alone by its rollout's revert;
 *   5. a `check: <name>` gate over a signed health.checks entry passes on agent devices.
 */
const real = realRollouts('floor-scenarios', {
  profilesRoot: () => ROOT,
  prepare: () => {
    for (const p of PROFILES) writeProfile(p);
  },
  cleanup: async () => {
    for (const child of agents.values()) await stopChild(child);
    if (gateway) await stopChild(gateway.child);
  },
});
const ROOT = join(real.dir, 'profiles'); // worker, gateway and CLI
const DEVICE_PINS = join(real.dir, 'device-pins'); // the agents' own pins
const PROFILES = ['w21a', 'w21b', 'w21c', 'w21d', 'w21e'] as const;
const SSH = ['edge-01', 'edge-02', 'edge-03', 'edge-04'];
const AGENTS = ['ag-1', 'ag-2', 'ag-3', 'ag-4'];

let fleet: Fleet;
let gateway: { child: ChildProcess; output: () => string };
let gatewayUrl = '';
const agents = new Map<string, ChildProcess>();
const agentPins = new Map<string, string>();
const profiles = new Map<string, SignedProfile>();

// ---- the test's own signed profiles -------------------------------------------------------------------

/** Revision n of `profile`: installs `$HOME/etc/<profile>.conf` ("<profile> revision <n>"), counted in `<profile>.runs`. */
function revisionSource(profile: string, n: number): RevisionSource {
  return {
    revision: n,
    apply: `mkdir -p "$HOME/etc" && echo r${n} >> "$HOME/etc/${profile}.runs" && install -m 0644 "$WAVEGATE_STAGING/conf" "$HOME/etc/${profile}.conf"`,
    verify: `grep -qx '${profile} revision ${n}' "$HOME/etc/${profile}.conf"`,
    payload: { conf: `${profile} revision ${n}\n` },
    risk: 'risky',
    health: {
      runtimes: [{ name: `${profile}-up`, command: 'true' }],
      checks: [{ name: `${profile}-conf`, command: `grep -qx '${profile} revision ${n}' "$HOME/etc/${profile}.conf"` }],
    },
  };
}

/** r1..r5 of `profile`, signed 2-of-2 under ROOT, and the same pins on every agent (DEVICE_PINS). */
function writeProfile(profile: string): void {
  const p = writeSignedProfile({
    root: ROOT,
    name: profile,
    revisions: [1, 2, 3, 4, 5].map((n) => revisionSource(profile, n)),
  });
  p.writePins(DEVICE_PINS);
  profiles.set(profile, p);
}

// ---- the devices, read back from their homes ----------------------------------------------------------

const isAgent = (id: string) => id.startsWith('ag-');
const homeOf = (id: string) => (isAgent(id) ? join(real.dir, 'homes', id) : fleet.device(id).sandbox);
const stateDir = (id: string) => join(real.dir, 'state', id);
const readIf = (path: string) => (existsSync(path) ? readFileSync(path, 'utf8') : null);
const marker = (id: string, profile: string) => {
  const text = readIf(join(homeOf(id), '.wavegate/profiles', profile, 'revision'));
  return text === null ? null : Number(text.trim());
};
/** The floor file's bytes (null: none). */
const floorText = (id: string, profile: string) => readIf(join(homeOf(id), '.wavegate/profiles', profile, 'floor'));
const floorOf = (id: string, profile: string): DeviceFloor | null => {
  const text = floorText(id, profile);
  return text === null ? null : parseFloor(text);
};
/** The revisions whose apply ran on the device, in order ("r2", "r3", ...). */
const runs = (id: string, profile: string) =>
  (readIf(join(homeOf(id), 'etc', `${profile}.runs`)) ?? '').split('\n').filter(Boolean);
const conf = (id: string, profile: string) => readIf(join(homeOf(id), 'etc', `${profile}.conf`));

// ---- the CLI ------------------------------------------------------------------------------------------

function wg(args: string[], timeoutMs = 240_000): Promise<CliRun> {
  return real.cli(args, timeoutMs);
}

/** An inventory of these devices in one pool (budget 100%): SSH ones from the simulator, agents by their pins. */
function inventory(name: string, ids: readonly string[], classes: Record<string, string> = {}): string {
  const ssh = fleetInventory(fleet).devices;
  const devices = ids.map((id) =>
    isAgent(id)
      ? { id, pool: 'mix', class: classes[id] ?? 'edge', labels: {}, transport: 'agent', agentKey: agentPins.get(id)! }
      : {
          ...ssh.find((d) => d.id === id)!,
          class: classes[id] ?? 'edge',
          pool: 'mix',
          user: fleet.user,
          ssh: { ...ssh.find((d) => d.id === id)!.ssh, key: fleet.clientKeyPath },
        },
  );
  const path = join(real.dir, `${name}.inventory.yaml`);
  writeFileSync(path, stringify({ pools: { mix: { disruptionBudget: 1 } }, devices }));
  return path;
}

const TWO_PHASES = [{ canary: '1 device' }, { bulk: 'remainder' }];
function spec(name: string, rollout: Record<string, unknown>): string {
  const path = join(real.dir, `${name}.spec.yaml`);
  writeFileSync(path, stringify({ rollout: { gate: '0s', applyTimeout: '2m', phases: TWO_PHASES, ...rollout } }));
  return path;
}

interface Started {
  rolloutId: string;
  runId: string;
  run: CliRun;
  status: RolloutStatus;
}
/** `wavegate start --wait --json` (exit code not judged here); the run's final (or current) status. */
async function startAndWait(specPath: string, inventoryPath: string, extra: string[] = []): Promise<Started> {
  const run = await wg([
    'start',
    '-f',
    specPath,
    '--inventory',
    inventoryPath,
    '--profiles',
    ROOT,
    '--wait',
    '--json',
    '--interval',
    '300',
    ...extra,
  ]);
  const first = run.stdout.split('\n')[0] ?? '';
  expect(first, `${run.stdout}\n${run.stderr}`).toMatch(/^\{/);
  const { rolloutId, runId } = JSON.parse(first) as { rolloutId: string; runId: string };
  const handle = real.env.client.workflow.getHandle(rolloutId, runId);
  const described = await handle.describe();
  const status =
    described.status.name === 'RUNNING'
      ? await handle.query<RolloutStatus>('status')
      : ((await handle.result()) as RolloutStatus);
  return { rolloutId, runId, run, status };
}

/** A rollout that must complete with exit 0. */
async function rollout(
  name: string,
  ids: readonly string[],
  rolloutSpec: Record<string, unknown>,
  classes: Record<string, string> = {},
): Promise<Started> {
  const started = await startAndWait(spec(name, rolloutSpec), inventory(name, ids, classes));
  expect(started.run.code, `${name}: ${started.run.stdout}\n${started.run.stderr}`).toBe(0);
  expect(started.status.state, name).toBe('completed');
  return started;
}

// ---- the fleet ----------------------------------------------------------------------------------------

async function startAgent(id: string): Promise<void> {
  const { child } = await spawnCliUntil(
    [
      'agent',
      '--device-id',
      id,
      '--gateway',
      gatewayUrl,
      '--trust',
      DEVICE_PINS,
      '--state-dir',
      stateDir(id),
      '--key',
      join(stateDir(id), 'identity.key'),
      '--home',
      homeOf(id),
    ],
    /syncing with the gateway/,
    120_000,
  );
  agents.set(id, child);
}

beforeAll(async () => {
  ({ fleet } = await real.fleet(demoDevices(SSH.length)));
  for (const id of AGENTS) {
    mkdirSync(homeOf(id), { recursive: true });
    const run = await runCli(['agent', 'enroll', '--state-dir', stateDir(id)]);
    expect(run.code, run.stderr).toBe(0);
    agentPins.set(id, run.stdout.trim());
  }
  const gatewayInventory = inventory('gateway', AGENTS);
  gateway = await spawnCliUntil(
    ['gateway', '--listen', '127.0.0.1:0', '--inventory', gatewayInventory, '--profiles', ROOT, ...real.cliFlags()],
    /gateway listening on (http:\/\/\S+)/,
  );
  gatewayUrl = /gateway listening on (http:\/\/\S+)/.exec(gateway.output())![1]!;
  for (const id of AGENTS) await startAgent(id);
  await until(
    'every agent synced',
    async () =>
      (await Promise.all(AGENTS.map((id) => readTwin(real.env.client, id)))).every((v) => v?.lastSeenAt)
        ? true
        : undefined,
    120_000,
  );
}, 300_000);

describe('issue 21: floors, re-runs and reverts on a mixed fleet (SSH simulator + real agents)', () => {
  it('an old spec (r1 -> r2) re-run on a mixed fleet at r5 finds every device ahead, applies nothing, and 30 s later every device is still at r5 (no agent is given r2)', async () => {
    const P = 'w21a';
    const ids = ['edge-01', 'edge-02', 'ag-1', 'ag-2'];
    const old = { profile: P, fromRevision: 1, toRevision: 2 };
    for (let n = 2; n <= 5; n++) await rollout(`a-r${n}`, ids, { profile: P, fromRevision: n - 1, toRevision: n });
    for (const id of ids) {
      expect(marker(id, P), id).toBe(5);
      expect(runs(id, P), id).toEqual(['r2', 'r3', 'r4', 'r5']);
    }

    const again = await startAndWait(spec('a-old', old), inventory('a-old', ids));
    expect(again.status.state, again.run.stdout + again.run.stderr).toBe('completed');
    for (const id of ids) {
      const d = again.status.devices.find((x) => x.id === id);
      // Not for this rollout: above its target (its marker, or its agent's report, says r5).
      expect(d, `${id} in the re-run's status`).toBeDefined();
      expect(['applied', 'claimed', 'failed', 'rolled-back'], `${id}: ${JSON.stringify(d)}`).not.toContain(d!.state);
      expect(`${d!.state} ${d!.reason ?? ''}`, id).toMatch(/not-for-me|ahead/);
    }
    expect(again.status.counts.applied + again.status.counts.claimed + again.status.counts.failed).toBe(0);

    // Agents sync every few seconds: whatever the rollout left on their twins has reached them by now.
    await new Promise((r) => setTimeout(r, 30_000));
    for (const id of ids) {
      expect(marker(id, P), id).toBe(5);
      expect(conf(id, P), id).toBe(`${P} revision 5\n`);
      expect(runs(id, P), `${id} ran nothing after r5`).toEqual(['r2', 'r3', 'r4', 'r5']);
    }
    for (const id of ids.filter(isAgent)) {
      const view = await readTwin(real.env.client, id);
      const desired = view?.desired[P];
      expect(desired?.revision ?? 5, `${id}'s desired state`).toBeGreaterThanOrEqual(5);
      expect(view?.report?.profiles[P]?.revision, `${id}'s report`).toBe(5);
    }
  }, 600_000);

  it("a twin desired below an agent's floor (as a compromised gateway could) is refused BELOW_FLOOR; the device stays at r2", async () => {
    const P = 'w21b';
    const done = await rollout('b', ['ag-3', 'edge-03'], { profile: P, fromRevision: 1, toRevision: 2 });
    expect(marker('ag-3', P)).toBe(2);
    expect(runs('ag-3', P)).toEqual(['r2']);

    const envelope = profiles.get(P)!.envelope(1);
    const revision = profiles.get(P)!.revision(1);
    const desire = async (over: Partial<DesiredRequest['steps']> = {}) => {
      const holder = { rollout: done.rolloutId, run: `forged-${randomUUID()}`, activity: '1', attempt: 1 };
      const request: DesiredRequest = {
        requestId: requestIdOf(holder),
        profile: P,
        revision: 1,
        steps: {
          profile: P,
          revision: 1,
          apply: revision.apply,
          verify: revision.verify,
          payload: revision.payload.map((f) => ({ ...f, source: f.name })),
          envelope,
          ...over,
        },
        envelopeDigest: envelopeDigestOf(envelope),
        holder,
        rollout: done.rolloutId,
        fromRevision: 2,
      };
      await desireOnTwin(real.env.client, real.worker.taskQueue, 'ag-3', request);
      return twinAnswer(real.env.client, 'ag-3', P, request.requestId);
    };
    // Signed r1, validly: only the device's floor stands in the way.
    const plain = await desire();
    expect(plain).toMatchObject({ state: 'refused', reason: 'BELOW_FLOOR', revision: 2 });
    expect(plain.detail).toContain('floor r2');
    // Claiming to be a revert of the completed rollout, under a run that is not the one that raised the floor.
    const forged = await desire({
      floor: {
        rollout: done.rolloutId,
        run: `forged-${randomUUID()}`,
        below: { kind: 'revert', rollout: done.rolloutId, run: `forged-${randomUUID()}`, closedAt: Date.now() },
      },
    });
    expect(forged).toMatchObject({ state: 'refused', reason: 'BELOW_FLOOR', revision: 2 });
    expect(marker('ag-3', P)).toBe(2);
    expect(conf('ag-3', P)).toBe(`${P} revision 2\n`);
    expect(runs('ag-3', P)).toEqual(['r2']);
    // The floor that refused it: the one the agent's own apply of r2 raised for the completed rollout.
    expect(floorOf('ag-3', P)).toMatchObject({ revision: 2, from: 1, rollout: done.rolloutId });
  }, 300_000);

  it('a re-run of a completed spec leaves every floor byte-identical; after the first window a revert of either rollout is refused (exit 2) and no device goes to r1', async () => {
    const P = 'w21c';
    const ids = ['edge-01', 'edge-02', 'ag-1', 'ag-2'];
    // No canary phase: nothing is probed before the plan, so the re-run finds every device in place by its
    // own apply (a canary phase would have probed them all and planned them at the target, phase -1).
    const phases = [{ bulk: '50%' }, { bulk: 'remainder' }];
    const first = await rollout('c-first', ids, {
      profile: P,
      fromRevision: 1,
      toRevision: 2,
      revertWindow: '10s',
      phases,
    });
    const floors = new Map(ids.map((id) => [id, floorText(id, P)]));
    for (const id of ids) expect(marker(id, P), id).toBe(2);
    const closedAt = (
      await real.env.client.workflow.getHandle(first.rolloutId, first.runId).describe()
    ).closeTime!.getTime();

    const rerun = await startAndWait(
      spec('c-rerun', { profile: P, fromRevision: 1, toRevision: 2, revertWindow: '30d', phases }),
      inventory('c-rerun', ids),
    );
    expect(rerun.status.state, rerun.run.stdout + rerun.run.stderr).toBe('completed');
    expect(rerun.rolloutId, 'the re-run is a rollout of its own').not.toBe(first.rolloutId);
    for (const id of ids) {
      expect(floorText(id, P), `${id}'s floor after the re-run`).toBe(floors.get(id));
      expect(runs(id, P), id).toEqual(['r2']);
    }
    // It found every device in place: it changed none (what `wavegate revert` would go over).
    expect(changedDevices(rerun.status), JSON.stringify(rerun.status.devices)).toEqual([]);
    // Each one is the floor the first rollout's own apply raised: r2, back to r1 only by that rollout.
    for (const id of ids) {
      expect(floors.get(id), `${id} has a floor`).not.toBeNull();
      expect(parseFloor(floors.get(id)!), id).toMatchObject({ revision: 2, from: 1, rollout: first.rolloutId });
    }

    await until(
      "the first rollout's 10 s revert window to pass",
      async () => (Date.now() > closedAt + 10_000 + 1_500 ? true : undefined),
      60_000,
    );
    const late = await wg(['revert', first.rolloutId, '--run', first.runId, '--profiles', ROOT]);
    expect(late.code, late.stdout + late.stderr).toBe(2);
    expect(late.stderr).toMatch(/revert window \(revertWindow 10s\) closed at/);
    const byId = await wg(['revert', first.rolloutId, '--profiles', ROOT]);
    expect(byId.code, byId.stdout + byId.stderr).toBe(2);
    expect(byId.stderr).toMatch(/revert window \(revertWindow 10s\) closed at/);
    // The re-run's own window (30d) is open, but it changed no device: its revert has nothing to put back.
    const ofRerun = await wg(['revert', rerun.rolloutId, '--profiles', ROOT]);
    expect(ofRerun.code, ofRerun.stdout + ofRerun.stderr).toBe(2);
    expect(ofRerun.stderr).toContain(`${rerun.rolloutId} completed without changing any device`);
    // Nothing started: no rollout of the profile but these two.
    const listed = await wg(['list', '--profile', P, '--json']);
    expect(
      (JSON.parse(listed.stdout) as Array<{ workflowId: string; type: string }>)
        .filter((r) => r.type === 'rolloutWorkflow')
        .map((r) => r.workflowId)
        .sort(),
    ).toEqual([first.rolloutId, rerun.rolloutId].sort());
    await new Promise((r) => setTimeout(r, 5_000));
    for (const id of ids) {
      expect(marker(id, P), id).toBe(2);
      expect(conf(id, P), id).toBe(`${P} revision 2\n`);
      expect(runs(id, P), id).toEqual(['r2']);
      expect(floorText(id, P), id).toBe(floors.get(id));
    }
  }, 600_000);

  it("a device found in place (already at r2) is untouched by its rollout's revert: the changed ones go back to r1, it stays at r2 (no r1 apply on it)", async () => {
    const P = 'w21d';
    const IN_PLACE = 'edge-04';
    const changed = ['edge-02', 'edge-03', 'ag-4'];
    // r2 put in place by hand: its verify passes and its marker says r2.
    mkdirSync(join(homeOf(IN_PLACE), 'etc'), { recursive: true });
    writeFileSync(join(homeOf(IN_PLACE), 'etc', `${P}.conf`), `${P} revision 2\n`);
    mkdirSync(join(homeOf(IN_PLACE), '.wavegate/profiles', P), { recursive: true });
    writeFileSync(join(homeOf(IN_PLACE), '.wavegate/profiles', P, 'revision'), '2\n');

    // Its class keeps it out of the canary phase (whose devices are probed before the plan): it is found in
    // place by its own apply, in the bulk phase, as a device nobody probed would be.
    const done = await rollout(
      'd',
      [IN_PLACE, ...changed],
      { profile: P, fromRevision: 1, toRevision: 2, revertWindow: '1h', canaryClass: 'edge' },
      { [IN_PLACE]: 'kiosk' },
    );
    expect(
      done.status.devices.find((d) => d.id === IN_PLACE)?.phase,
      'the device found in place is in the bulk phase',
    ).toBe(1);
    for (const id of changed) {
      expect(marker(id, P), id).toBe(2);
      expect(runs(id, P), id).toEqual(['r2']);
    }
    expect(marker(IN_PLACE, P)).toBe(2);
    expect(runs(IN_PLACE, P)).toEqual([]);

    const revert = await wg(['revert', done.rolloutId, '--profiles', ROOT, '--wait', '--interval', '300']);
    expect(revert.code, revert.stdout + revert.stderr).toBe(0);
    expect(revert.stdout).toContain(
      `over the ${changed.length} device(s) ${done.rolloutId} (run ${done.runId}) changed`,
    );
    for (const id of changed) {
      expect(marker(id, P), id).toBe(1);
      expect(conf(id, P), id).toBe(`${P} revision 1\n`);
      expect(runs(id, P), id).toEqual(['r2', 'r1']);
    }
    expect(marker(IN_PLACE, P)).toBe(2);
    expect(conf(IN_PLACE, P)).toBe(`${P} revision 2\n`);
    expect(
      runs(IN_PLACE, P).filter((r) => r === 'r1'),
      'r1 applies on the device found in place',
    ).toHaveLength(0);
    // Its floor only ever rose: never below r2.
    const floor = floorOf(IN_PLACE, P);
    if (floor) expect(floor.revision).toBeGreaterThanOrEqual(2);
    const revertId = /^revert (\S+) started/m.exec(revert.stdout)?.[1];
    expect(revertId, revert.stdout).toBeDefined();
    const reverted = (await real.env.client.workflow.getHandle(revertId!).result()) as RolloutStatus;
    expect(reverted.reverts).toMatchObject({ rolloutId: done.rolloutId, runId: done.runId });
    expect(reverted.devices.map((d) => d.id)).not.toContain(IN_PLACE);
  }, 600_000);

  it('a `check: <name>` gate over a signed health.checks entry passes on agent devices: the rollout completes', async () => {
    const P = 'w21e';
    const ids = ['ag-1', 'ag-2', 'ag-3'];
    const gate = [`check: ${P}-conf`];
    const started = await startAndWait(
      spec('e', {
        profile: P,
        fromRevision: 1,
        toRevision: 2,
        healthTimeout: '90s',
        phases: [
          { canary: '1 device', healthGate: gate },
          { bulk: 'remainder', healthGate: gate },
        ],
      }),
      inventory('e', ids),
      ['--exit-on-pause'],
    );
    try {
      const evidence = started.status.phases
        .map((p) => `${p.name}: ${p.gateOutcome ?? '-'} ${(p.evidence ?? []).join('; ')}`)
        .join('\n');
      expect(started.status.state, `${started.status.pausedReason ?? ''}\n${evidence}`).toBe('completed');
      expect(started.run.code, started.run.stdout + started.run.stderr).toBe(0);
      for (const p of started.status.phases) expect(p.gateOutcome, evidence).toBe('pass');
      for (const id of ids) expect(marker(id, P), id).toBe(2);
    } finally {
      // A paused rollout (the gate inconclusive) is ended, not left waiting for an operator.
      if (started.status.state === 'running' || started.status.state === 'paused')
        await wg(['abort', started.rolloutId, '--no-rollback', '--reason', 'test cleanup']);
    }
  }, 400_000);
});
