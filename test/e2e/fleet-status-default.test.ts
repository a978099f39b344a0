import { cpSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse, stringify } from 'yaml';
import { beforeAll, describe, expect, it } from 'vitest';
import { demoDevices } from '../../sim';
import { freePort } from '../../sim/ports';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { runCli, type CliRun } from '../support/cli';
import { realRollouts } from '../support/real-rollouts';
import { writeDemoSpecAt } from '../support/harness';
import { until } from '../support/until';
import { resolveAuditLocation } from '../../audit/file';
import { startBoard } from '../../cli/board/server';

const BOARD_TOKEN = 'alice-token-0123456789abcdef-0123456789';

/**
 * Issue 23 frictions, against a real Temporal dev server, a real worker and a simulated SSH fleet:
 * - `fleet status` checks, by default, the revision the profile's last completed rollout left (r2 here),
 *   not the newest signed one (r3, signed but never rolled out), and says which and why; without a
 *   completed rollout or without Temporal it checks the newest and says so; `--revision` still decides.
 * - `drift` exits 1 when a device is refused (its host key is not the pinned one), naming it; a device
 *   that does not answer is listed as unreachable and does not fail the check.
 */
// The demo profile, pinned to a key of this test's own, with a third revision signed but never rolled out:
// written before the worker starts, which reads its pins from there.
const real = realRollouts('fleet-default', { profilesRoot: () => profiles, prepare: () => writeProfile() });
const profiles = join(real.dir, 'profiles');
const profile = join(profiles, 'demo');
let inventory = '';

const ENV = {
  TEMPORAL_ADDRESS: '',
  TEMPORAL_PROFILE: '',
  TEMPORAL_CONFIG_FILE: join(real.dir, 'none.toml'),
  WAVEGATE_PROFILES: '',
};

function wg(args: string[], address = real.env.address): Promise<CliRun> {
  return runCli([...args, '--address', address, '--task-queue', real.worker.taskQueue], {
    timeoutMs: 180_000,
    env: ENV,
  });
}
const cli = (args: string[]) => runCli(args, { cwd: real.dir, env: ENV });
const status = (...more: string[]) =>
  wg(['fleet', 'status', '--profile', 'demo', '--inventory', inventory, '--profiles', profiles, ...more]);

async function writeProfile(): Promise<void> {
  cpSync(join(PROJECT_ROOT, 'profiles', 'demo'), profile, { recursive: true });
  rmSync(join(profile, 'envelopes'), { recursive: true });
  const r2 = parse(readFileSync(join(profile, 'revisions', '2.yaml'), 'utf8')) as Record<string, unknown>;
  // Signed and not rolled out at first; the last test rolls it out (its sha256 and size filled by sign).
  writeFileSync(join(profile, 'payload', 'motd-r3'), 'wavegate demo revision 3\n');
  writeFileSync(
    join(profile, 'revisions', '3.yaml'),
    stringify({
      ...r2,
      revision: 3,
      description: 'signed, not rolled out',
      previous: 2,
      verify: `grep -qx 'wavegate demo revision 3' "$HOME/etc/motd"`,
      payload: [{ name: 'motd', source: 'payload/motd-r3' }],
    }),
  );
  const key = join(real.dir, 'alice.key');
  expect((await cli(['keygen', '--out', key, '--name', 'alice'])).code).toBe(0);
  expect((await cli(['trust', `${key}.pub.yaml`, '--threshold', '1', '--out', join(profile, 'trust.yaml')])).code).toBe(
    0,
  );
  for (const n of [1, 2, 3]) {
    const signed = await cli([
      'sign',
      join(profile, 'revisions', `${n}.yaml`),
      '--key',
      key,
      '--out',
      join(profile, 'envelopes', `${n}.json`),
    ]);
    expect(signed.code, signed.stderr).toBe(0);
  }
}

beforeAll(async () => {
  ({ inventoryPath: inventory } = await real.fleet(demoDevices(4), { 'pool-a': 0.5, 'pool-b': 0.5 }));
});

describe('fleet status: the default revision', () => {
  it('checks the newest signed revision, saying so, while no rollout has completed; then the revision the last completed rollout left; --revision and a missing Temporal as said', async () => {
    const before = await status();
    expect(before.stdout).toContain(
      `checking r3: newest signed, no completed rollout of "demo" that changed a device found in namespace default at ${real.env.address}`,
    );
    expect(before.stdout).toMatch(/^fleet demo r3/m);

    const spec = join(real.dir, 'r1-r2.yaml');
    writeDemoSpecAt(spec, {
      phases: [
        { canary: '1 device', gate: '0s' },
        { bulk: 'remainder', gate: '0s' },
      ],
    });
    const started = await wg([
      'start',
      '-f',
      spec,
      '--inventory',
      inventory,
      '--profiles',
      profiles,
      '--wait',
      '--interval',
      '300',
    ]);
    expect(started.code, started.stdout + started.stderr).toBe(0);

    // The healthy fleet after its rollout reads green, though r3 is signed.
    const after = await status();
    expect(after.code, after.stdout + after.stderr).toBe(0);
    expect(after.stdout).toMatch(
      /^checking r2: left by rollout (\S+) completed \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/m,
    );
    const rolloutId = /^checking r2: left by rollout (\S+) completed/m.exec(after.stdout)![1]!;
    expect(started.stdout).toContain(rolloutId);
    expect(after.stdout).toMatch(/^ {2}applied +4$/m);
    const json = JSON.parse((await status('--json')).stdout) as { revision: number; revisionWhy: string };
    expect(json.revision).toBe(2);
    expect(json.revisionWhy).toContain(`left by rollout ${rolloutId}`);

    const r3 = await status('--revision', '3');
    expect(r3.code).toBe(1);
    expect(r3.stdout).toContain('checking r3: --revision');
    expect(r3.stdout).toMatch(/^ {2}pending +4/m);

    // No Temporal at the address given: the newest, and why.
    const nobody = `127.0.0.1:${await freePort()}`;
    const noTemporal = await wg(
      ['fleet', 'status', '--profile', 'demo', '--inventory', inventory, '--profiles', profiles],
      nobody,
    );
    expect(noTemporal.code).toBe(1);
    expect(noTemporal.stdout).toContain(
      `checking r3: newest signed, Temporal at ${nobody} not reachable, so no completed rollout could be read`,
    );
    expect(noTemporal.stderr).not.toMatch(/\n\s+at /);
  });
});

describe('drift: a refused device fails the check', () => {
  it('exits 1 naming a device whose host key is not the pinned one; an unreachable device is listed and does not fail it', async () => {
    const clean = await wg(['drift', '--profile', 'demo', '--inventory', inventory, '--profiles', profiles]);
    expect(clean.code, clean.stdout + clean.stderr).toBe(0);

    const doc = parse(readFileSync(inventory, 'utf8')) as {
      devices: Array<{ id: string; port: number; ssh?: object }>;
    };
    const wrongPin = {
      ...doc,
      devices: doc.devices.map((d, i) =>
        i === 0 ? { ...d, ssh: { ...d.ssh, hostKey: `SHA256:${'A'.repeat(43)}` } } : d,
      ),
    };
    const pinned = join(real.dir, 'wrong-pin.yaml');
    writeFileSync(pinned, stringify(wrongPin));
    const refused = await wg(['drift', '--profile', 'demo', '--inventory', pinned, '--profiles', profiles]);
    expect(refused.code, refused.stdout + refused.stderr).toBe(1);
    expect(refused.stdout).toMatch(/^ {2}edge-01 +refused +- +refused \(host-key\): /m);
    expect(refused.stdout).toContain(
      '0 drifted of 4 devices in scope (3 ok, 0 without marker, 1 refused, 0 unreachable)',
    );
    expect(refused.stdout).toContain('1 device(s) refused as pinned (edge-01): their drift is unknown; exit 1');
    const asJson = JSON.parse(
      (await wg(['drift', '--profile', 'demo', '--inventory', pinned, '--profiles', profiles, '--json'])).stdout,
    ) as { refused: number; devices: Array<{ id: string; status: string }> };
    expect(asJson.refused).toBe(1);
    expect(asJson.devices.find((d) => d.id === 'edge-01')?.status).toBe('refused');

    const away = { ...doc, devices: doc.devices.map((d, i) => (i === 1 ? { ...d, port: 1 } : d)) };
    const awayPath = join(real.dir, 'away.yaml');
    writeFileSync(awayPath, stringify(away));
    const unreachable = await wg(['drift', '--profile', 'demo', '--inventory', awayPath, '--profiles', profiles]);
    expect(unreachable.code, unreachable.stdout).toBe(0);
    expect(unreachable.stdout).toMatch(/^ {2}edge-02 +unreachable /m);
    expect(unreachable.stdout).toContain('1 device(s) unreachable: not checked, not counted as drift');
  });
});

describe('fleet status never calls a healthy fleet behind (issue 48)', () => {
  it('a running r2 -> r3 is named with its target, the devices it brought to r3 are ahead (not pending, no converge advice); a no-op re-run of r1 -> r2 does not move the view off r3', async () => {
    const gated = writeDemoSpecAt(join(real.dir, 'r2-r3.yaml'), {
      fromRevision: 2,
      toRevision: 3,
      phases: [
        { canary: '1 device', gate: 'manual' },
        { bulk: 'remainder', gate: '0s' },
      ],
    });
    const start = await wg(['start', '-f', gated, '--inventory', inventory, '--profiles', profiles, '--json']);
    expect(start.code, start.stdout + start.stderr).toBe(0);
    const { rolloutId } = JSON.parse(start.stdout) as { rolloutId: string };
    type Json = { counts: { ahead: number; pending: number }; rows: Array<{ id: string; state: string }> };
    let json: Json | undefined;
    await until(
      'the canary at r3, seen ahead',
      async () => {
        json = JSON.parse((await status('--json')).stdout) as Json;
        return json.counts.ahead === 1 ? true : undefined;
      },
      120_000,
    );
    expect(json!.counts.pending).toBe(0);
    const during = await status();
    expect(during.code, during.stdout + during.stderr).toBe(0);
    expect(during.stdout).toMatch(/^checking r2: left by rollout /m);
    expect(during.stdout).toContain(`to r3: devices it already brought to r3 show as ahead of r2, not behind`);
    expect(during.stdout).toMatch(new RegExp(`^rollout ${rolloutId} is running( \\(.+\\))? to r3: `, 'm'));
    expect(during.stdout).toMatch(/^ {2}ahead +1 /m);
    expect(during.stdout).toMatch(/^ {2}\S+ +ahead +r3 +at r3 \(verified now\), above r2$/m);
    expect(during.stdout).not.toMatch(/device\(s\) behind|wavegate converge/);

    // The board's fleet view says the same: the running rollout with its target, the canary ahead, and it
    // checks any revision asked (as --revision does).
    const board = await startBoard({
      sources: {
        client: real.env.client,
        audit: { where: resolveAuditLocation({ auditDir: join(real.dir, 'board-audit') }, { env: {} }) },
        transports: new Map(),
        taskQueue: real.worker.taskQueue,
        profilesRoot: profiles,
      },
      fleet: {
        client: real.env.client,
        inventory,
        profiles,
        temporal: { address: real.env.address, taskQueue: real.worker.taskQueue },
      },
      listen: { host: '127.0.0.1', port: 0 },
      tokens: [{ name: 'alice', token: BOARD_TOKEN }],
      log: () => {},
    });
    try {
      const view = async (query: string) => {
        const res = await fetch(`${board.url}/api/fleet/demo${query}`, {
          headers: { authorization: `Bearer ${BOARD_TOKEN}` },
        });
        return { status: res.status, body: (await res.json()) as Record<string, unknown> };
      };
      const byDefault = await view('');
      expect(byDefault.status).toBe(200);
      expect(byDefault.body).toMatchObject({
        revision: 2,
        counts: { applied: 3, ahead: 1, pending: 0 },
        active: [{ rolloutId, toRevision: 3 }],
        converge: null,
        revisions: [1, 2, 3],
      });
      const atR3 = await view('?revision=3');
      expect(atR3.body).toMatchObject({
        revision: 3,
        revisionWhy: 'r3: --revision',
        counts: { applied: 1, pending: 3 },
      });
      const bad = await view('?revision=0x3');
      expect(bad.status).toBe(400);
      expect(bad.body).toMatchObject({ code: 'INVALID_INPUT', message: expect.stringContaining('revision "0x3"') });
    } finally {
      await board.close();
    }

    const approved = await wg(['approve', rolloutId, '--reason', 'canary looks right']);
    expect(approved.code, approved.stdout + approved.stderr).toBe(0);
    const done = (await real.env.client.workflow.getHandle(rolloutId).result()) as { state: string };
    expect(done.state).toBe('completed');
    const after = await status();
    expect(after.code, after.stdout + after.stderr).toBe(0);
    expect(after.stdout).toContain(`checking r3: left by rollout ${rolloutId}`);

    // Last week's r1 -> r2 spec run again by mistake: it changes nothing, and the view stays on r3.
    const again = await wg([
      'start',
      '-f',
      join(real.dir, 'r1-r2.yaml'),
      '--inventory',
      inventory,
      '--profiles',
      profiles,
      '--wait',
      '--interval',
      '300',
    ]);
    expect(again.stdout + again.stderr).toMatch(/rollout \S+ (completed|started)/);
    const stays = await status();
    expect(stays.code, stays.stdout + stays.stderr).toBe(0);
    expect(stays.stdout).toContain(`checking r3: left by rollout ${rolloutId}`);
    expect(stays.stdout).toMatch(/^ {2}applied +4$/m);
    expect(stays.stdout).not.toMatch(/device\(s\) behind|wavegate converge/);
  }, 300_000);
});
