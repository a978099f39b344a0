import { appendFileSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse, stringify } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DeviceTarget } from '../../core/rollout-state';
import { keyPairFromSeed, pinOf } from '../../core/signing';
import { loginKeyOf } from '../../device/channel/ssh-login-key';
import { connectDevice, TransportError } from '../../device/transport';
import { startFleet, type Fleet } from '../../sim';
import { keygen, startOpenSshFleet, type OpenSshFleet } from '../../sim/openssh';
import { portFree } from '../../sim/ports';
import { runCli, type CliRun } from '../support/cli';
import { scratchDir } from '../support/harness';
import { writeKeyFile } from '../support/key-file';
import { rejection } from '../support/refusal';

/**
 * The SSH login key rotated on a signed schedule across three devices, on real OpenSSH sshd and on the
 * simulator, through the real `wavegate rotation` commands: one device offline during activate stays on the
 * old key and is named; the retire is refused naming it; back online, activate catches it up from its old
 * key; the retire then removes the old key everywhere, after which a login with the old key is refused and
 * the new one works. Every other line of each authorized_keys file is kept.
 */

const IDS = ['rot-a', 'rot-b', 'rot-c'];
const OTHER_LINE =
  'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOlPx3cR6E9CVbZ9SXlGrmMuGk9bFhqZpw6H9G2v7Bq2 someone-else@laptop';

/** What the scenario needs of a fleet: where each device is, its authorized_keys, and taking one offline. */
interface RotationFleet {
  user: string;
  oldKey: string;
  devices: Array<{ id: string; host: string; port: number; hostKey: string }>;
  authorizedKeys(id: string): string;
  offline(id: string): Promise<void>;
  online(id: string): Promise<void>;
  stop(): Promise<void>;
}

/** Three free ports below 32768 (the kernel's ephemeral range: a stopped device's port is not taken meanwhile). */
async function basePort(): Promise<number> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const base = 20_000 + Math.floor(Math.random() * 12_000);
    if ((await Promise.all(IDS.map((_, i) => portFree(base + i)))).every(Boolean)) return base;
  }
  throw new Error('no three free ports below 32768');
}

async function openSshFleet(dir: string): Promise<RotationFleet> {
  const fleet: OpenSshFleet = await startOpenSshFleet({
    dir,
    ids: IDS,
    basePort: await basePort(),
    authorizedKeysInHome: true,
    logLevel: 'VERBOSE',
  });
  return {
    user: fleet.user,
    oldKey: fleet.clientKeyPath,
    devices: fleet.devices.map((d) => ({ id: d.id, host: d.host, port: d.port, hostKey: d.hostKeyFingerprint })),
    authorizedKeys: (id) => join(fleet.device(id).home, '.ssh', 'authorized_keys'),
    offline: (id) => fleet.stopDevice(id),
    online: (id) => fleet.startDevice(id),
    stop: () => fleet.stop(),
  };
}

async function simFleet(dir: string): Promise<RotationFleet> {
  const fleet: Fleet = await startFleet({ dir, devices: IDS.map((id) => ({ id })) });
  // The device's own authorized_keys, as a real device has: from now on it is what lets a login in.
  for (const d of fleet.devices) {
    mkdirSync(join(d.sandbox, '.ssh'), { recursive: true, mode: 0o700 });
    writeFileSync(join(d.sandbox, '.ssh', 'authorized_keys'), `${fleet.clientPublicKey}\n`, { mode: 0o600 });
  }
  return {
    user: fleet.user,
    oldKey: fleet.clientKeyPath,
    devices: fleet.devices.map((d) => ({ id: d.id, host: d.host, port: d.port, hostKey: d.hostKeyFingerprint })),
    authorizedKeys: (id) => join(fleet.device(id).sandbox, '.ssh', 'authorized_keys'),
    offline: (id) => fleet.setFaults(id, { offline: true }),
    online: (id) => fleet.setFaults(id, {}),
    stop: () => fleet.stop(),
  };
}

describe.each([
  ['real OpenSSH sshd', openSshFleet],
  ['the simulator', simFleet],
])('SSH login key rotation on %s', (_name, start) => {
  const scratch = scratchDir('login-rotation');
  const path = (name: string) => join(scratch.dir, name);
  let fleet: RotationFleet;
  const signers = [1, 2, 3].map((n) => keyPairFromSeed(new Uint8Array(32).fill(40 + n)));
  const newKey = path('login_new_ed25519');
  let oldFp: string;
  let newFp: string;

  const wavegate = (args: string[]): Promise<CliRun> => runCli(args, { env: { WAVEGATE_PROFILES: '' } });
  const common = () => ['--inventory', path('inventory.yaml'), '--profiles', path('profiles')];
  const device = (id: string) => fleet.devices.find((d) => d.id === id)!;
  const target = (id: string, key: string): DeviceTarget => {
    const d = device(id);
    return {
      id,
      host: d.host,
      port: d.port,
      user: fleet.user,
      pool: 'lab',
      class: 'server',
      ssh: { hostKey: d.hostKey, key },
    };
  };
  const logsIn = async (id: string, key: string) => {
    const session = await connectDevice(target(id, key), { connectTimeoutMs: 5_000 });
    try {
      return (await session.exec('echo in')).stdout.trim();
    } finally {
      session.close();
    }
  };
  /** The key file the inventory logs in to a device with: its own ssh.key, else the defaults'. */
  const inventoryKey = (id: string) => {
    const inv = parse(readFileSync(path('inventory.yaml'), 'utf8')) as {
      defaults: { ssh: { key: string } };
      devices: Array<{ id: string; ssh: { key?: string } }>;
    };
    return inv.devices.find((d) => d.id === id)!.ssh.key ?? inv.defaults.ssh.key;
  };

  beforeAll(async () => {
    fleet = await start(path('fleet'));
    for (const d of fleet.devices) appendFileSync(fleet.authorizedKeys(d.id), `${OTHER_LINE}\n`);
    keygen(newKey, 'wavegate-login-2027');
    oldFp = loginKeyOf(fleet.oldKey).fingerprint;
    newFp = loginKeyOf(newKey).fingerprint;
    mkdirSync(path('profiles/fleet'), { recursive: true });
    writeFileSync(path('profiles/fleet/trust.yaml'), stringify({ threshold: 2, pins: signers.map((s) => pinOf(s)) }));
    for (const [i, s] of signers.entries()) writeKeyFile(path(`signer${i + 1}.json`), s);
    writeFileSync(
      path('inventory.yaml'),
      stringify({
        defaults: { user: fleet.user, pool: 'lab', ssh: { key: fleet.oldKey } },
        devices: fleet.devices.map((d) => ({ id: d.id, host: d.host, port: d.port, ssh: { hostKey: d.hostKey } })),
      }),
    );
    const now = Date.now();
    writeFileSync(
      path('schedule.yaml'),
      stringify({
        type: 'wavegate/rotation',
        id: 'ssh-login-2027-01',
        kind: 'ssh-login',
        authority: 'fleet',
        old: oldFp,
        new: newFp,
        publish: new Date(now - 2 * 3_600_000).toISOString(),
        activate: new Date(now - 3_600_000).toISOString(),
        // Due already: the gate, not the clock, is what holds this retire.
        retire: new Date(now - 60_000).toISOString(),
        required: 'all',
      }),
    );
    const signed = await wavegate([
      'rotation',
      'sign',
      path('schedule.yaml'),
      '--key',
      path('signer1.json'),
      '--out',
      path('schedule.json'),
    ]);
    expect(signed.code, signed.stderr).toBe(0);
  }, 120_000);
  afterAll(async () => {
    await fleet?.stop();
    scratch.cleanup();
  });

  it('a schedule below its threshold is refused, and nothing is touched', async () => {
    const run = await wavegate(['rotation', 'activate', path('schedule.json'), ...common(), '--new-key', newKey]);
    expect(run.code).toBe(2);
    expect(run.stderr).toContain('BELOW_THRESHOLD');
    const cosigned = await wavegate(['cosign', path('schedule.json'), '--key', path('signer2.json')]);
    expect(cosigned.code, cosigned.stderr).toBe(0);
    for (const d of fleet.devices)
      expect(readFileSync(fleet.authorizedKeys(d.id), 'utf8')).not.toContain('wavegate-rotation');
  });

  it('activate with another key than the schedule names is refused, naming --new-key', async () => {
    const run = await wavegate(['rotation', 'activate', path('schedule.json'), ...common(), '--new-key', fleet.oldKey]);
    expect(run.code).toBe(2);
    expect(run.stderr).toContain('--new-key');
    expect(run.stderr).toContain(newFp);
  });

  it('with rot-c offline, activate moves rot-a and rot-b and names rot-c; the retire is refused naming it', async () => {
    await fleet.offline('rot-c');
    const run = await wavegate([
      'rotation',
      'activate',
      path('schedule.json'),
      ...common(),
      '--new-key',
      newKey,
      '--connect-timeout',
      '3000',
    ]);
    expect(run.code, run.stderr).toBe(1);
    expect(run.stdout).toMatch(/rot-a: active/);
    expect(run.stdout).toMatch(/rot-b: active/);
    expect(run.stdout).toMatch(/rot-c: missed \(required\): adding the new key/);
    expect(run.stdout).toContain('1 device(s) still on the old key');
    expect(run.stdout).toMatch(
      /next: its old key still logs in until retire: run `wavegate rotation activate` again once rot-c is reachable/,
    );
    for (const id of ['rot-a', 'rot-b']) {
      const lines = readFileSync(fleet.authorizedKeys(id), 'utf8');
      expect(lines).toContain(OTHER_LINE);
      expect(lines).toContain(`${loginKeyOf(fleet.oldKey).blob}`);
      expect(lines).toContain(`${loginKeyOf(newKey).blob} wavegate-rotation:ssh-login-2027-01`);
      expect(inventoryKey(id)).toBe(newKey);
      // make before break: both keys log in until retire
      expect(await logsIn(id, newKey)).toBe('in');
      expect(await logsIn(id, fleet.oldKey)).toBe('in');
    }
    expect(inventoryKey('rot-c')).toBe(fleet.oldKey);

    const statement = await wavegate([
      'rotation',
      'retire-statement',
      path('schedule.json'),
      '--key',
      path('signer3.json'),
      '--out',
      path('retire.json'),
    ]);
    expect(statement.code, statement.stderr).toBe(0);
    expect((await wavegate(['cosign', path('retire.json'), '--key', path('signer1.json')])).code).toBe(0);
    const refused = await wavegate([
      'rotation',
      'retire',
      path('schedule.json'),
      ...common(),
      '--statement',
      path('retire.json'),
    ]);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toContain('CONFLICT');
    expect(refused.stderr).toContain('rot-c (missed)');
    expect(refused.stderr).not.toContain('rot-a');
    // Nothing was removed anywhere.
    for (const id of ['rot-a', 'rot-b'])
      expect(readFileSync(fleet.authorizedKeys(id), 'utf8')).toContain(loginKeyOf(fleet.oldKey).blob);
    // --force on a statement not signed forced is refused too.
    const forced = await wavegate([
      'rotation',
      'retire',
      path('schedule.json'),
      ...common(),
      '--statement',
      path('retire.json'),
      '--force',
    ]);
    expect(forced.code).toBe(2);
    expect(forced.stderr).toContain('--force');
  }, 120_000);

  it('back online, activate catches rot-c up; the retire removes the old key, which no longer logs in', async () => {
    await fleet.online('rot-c');
    const again = await wavegate(['rotation', 'activate', path('schedule.json'), ...common(), '--new-key', newKey]);
    expect(again.code, again.stdout + again.stderr).toBe(0);
    expect(again.stdout).toMatch(/rot-a: unchanged/);
    expect(again.stdout).toMatch(/rot-c: active/);
    expect(again.stdout).toContain('0 device(s) still on the old key');
    expect(inventoryKey('rot-c')).toBe(newKey);

    const retired = await wavegate([
      'rotation',
      'retire',
      path('schedule.json'),
      ...common(),
      '--statement',
      path('retire.json'),
    ]);
    expect(retired.code, retired.stdout + retired.stderr).toBe(0);
    for (const id of IDS)
      expect(retired.stdout).toMatch(new RegExp(`${id}: retired: a login with the old key is refused`));
    for (const id of IDS) {
      const lines = readFileSync(fleet.authorizedKeys(id), 'utf8');
      expect(lines).not.toContain(loginKeyOf(fleet.oldKey).blob);
      expect(lines).toContain(OTHER_LINE);
      expect(lines).toContain(loginKeyOf(newKey).blob);
      expect(await logsIn(id, newKey)).toBe('in');
      const err = await rejection(logsIn(id, fleet.oldKey), TransportError);
      expect(err.kind).toBe('auth');
    }
    const status = await wavegate(['rotation', 'status', path('schedule.json'), ...common()]);
    expect(status.code).toBe(0);
    for (const id of IDS) expect(status.stdout).toMatch(new RegExp(`${id}: retired`));
    expect(status.stdout).toContain('0 device(s) still on the old key');
    const state = JSON.parse(readFileSync(path('.wavegate-rotations/ssh-login-2027-01.json'), 'utf8'));
    expect(state.retire).toMatchObject({ forced: false, notActive: [] });
    expect(state.log.map((e: { event: string; device?: string }) => `${e.event}:${e.device ?? ''}`)).toEqual(
      expect.arrayContaining(['missed:rot-c', 'active:rot-c', 'retire:', 'retired:rot-c']),
    );
  }, 120_000);
});

describe('SSH login key rotation on the simulator: before the activate instant, and a forced retire', () => {
  const scratch = scratchDir('login-rotation-forced');
  const path = (name: string) => join(scratch.dir, name);
  let fleet: RotationFleet;
  const signers = [1, 2].map((n) => keyPairFromSeed(new Uint8Array(32).fill(60 + n)));
  const newKey = path('login_new_ed25519');
  const wavegate = (args: string[]): Promise<CliRun> => runCli(args, { env: { WAVEGATE_PROFILES: '' } });
  const common = ['--profiles', path('profiles')];

  /** A schedule signed by both signers, its instants `hours` from now. */
  async function schedule(id: string, hours: [number, number, number]): Promise<string> {
    const at = (h: number) => new Date(Date.now() + h * 3_600_000).toISOString();
    writeFileSync(
      path(`${id}.yaml`),
      stringify({
        type: 'wavegate/rotation',
        id,
        kind: 'ssh-login',
        authority: 'fleet',
        old: loginKeyOf(fleet.oldKey).fingerprint,
        new: loginKeyOf(newKey).fingerprint,
        publish: at(hours[0]),
        activate: at(hours[1]),
        retire: at(hours[2]),
        required: 'all',
      }),
    );
    const out = path(`${id}.json`);
    expect(
      (await wavegate(['rotation', 'sign', path(`${id}.yaml`), '--key', path('s1.json'), '--out', out])).code,
    ).toBe(0);
    expect((await wavegate(['cosign', out, '--key', path('s2.json')])).code).toBe(0);
    return out;
  }
  const inventory = (name: string) => {
    writeFileSync(
      path(name),
      stringify({
        defaults: { user: fleet.user, pool: 'lab', ssh: { key: fleet.oldKey } },
        devices: fleet.devices.map((d) => ({ id: d.id, host: d.host, port: d.port, ssh: { hostKey: d.hostKey } })),
      }),
    );
    return path(name);
  };

  beforeAll(async () => {
    fleet = await simFleet(path('fleet'));
    keygen(newKey, 'wavegate-login-forced');
    mkdirSync(path('profiles/fleet'), { recursive: true });
    writeFileSync(path('profiles/fleet/trust.yaml'), stringify({ threshold: 2, pins: signers.map((s) => pinOf(s)) }));
    for (const [i, s] of signers.entries()) writeKeyFile(path(`s${i + 1}.json`), s);
  }, 60_000);
  afterAll(async () => {
    await fleet?.stop();
    scratch.cleanup();
  });

  it('between publish and activate, activate only adds the new key: every device stays published, the inventory unmoved', async () => {
    const sched = await schedule('early', [-1, 1, 2]);
    const inv = inventory('early.yaml');
    const run = await wavegate(['rotation', 'activate', sched, '--inventory', inv, ...common, '--new-key', newKey]);
    expect(run.code, run.stdout + run.stderr).toBe(0);
    expect(run.stdout).toContain('publishing the new key');
    for (const id of IDS) {
      expect(run.stdout).toMatch(new RegExp(`${id}: added`));
      expect(run.stdout).toMatch(new RegExp(`${id}: published \\(required\\)`));
      expect(readFileSync(fleet.authorizedKeys(id), 'utf8')).toContain(loginKeyOf(newKey).blob);
    }
    expect(run.stdout).toContain('3 device(s) still on the old key');
    expect(readFileSync(inv, 'utf8')).not.toContain(newKey);
    // A retire is refused before its instant, whatever the devices.
    const statement = path('early-retire.json');
    await wavegate(['rotation', 'retire-statement', sched, '--key', path('s1.json'), '--out', statement]);
    await wavegate(['cosign', statement, '--key', path('s2.json')]);
    const retire = await wavegate([
      'rotation',
      'retire',
      sched,
      '--inventory',
      inv,
      ...common,
      '--statement',
      statement,
    ]);
    expect(retire.code).toBe(2);
    expect(retire.stderr).toContain('INVALID_STATE');
  }, 60_000);

  it('a forced retire needs a statement signed forced and --force; it removes the old key only where the new one was proven, and is recorded', async () => {
    const sched = await schedule('forced', [-3, -2, -1]);
    const inv = inventory('forced.yaml');
    await fleet.offline('rot-c');
    const run = await wavegate([
      'rotation',
      'activate',
      sched,
      '--inventory',
      inv,
      ...common,
      '--new-key',
      newKey,
      '--connect-timeout',
      '3000',
    ]);
    expect(run.code).toBe(1);
    const statement = path('forced-retire.json');
    const signed = await wavegate([
      'rotation',
      'retire-statement',
      sched,
      '--key',
      path('s1.json'),
      '--out',
      statement,
      '--forced',
    ]);
    expect(signed.code).toBe(2);
    expect(signed.stderr).toContain('reason: required when forced');
    await wavegate([
      'rotation',
      'retire-statement',
      sched,
      '--key',
      path('s1.json'),
      '--out',
      statement,
      '--forced',
      '--reason',
      'rack 4 is gone',
    ]);
    await wavegate(['cosign', statement, '--key', path('s2.json')]);
    const unforced = await wavegate([
      'rotation',
      'retire',
      sched,
      '--inventory',
      inv,
      ...common,
      '--statement',
      statement,
    ]);
    expect(unforced.code).toBe(2);
    expect(unforced.stderr).toContain('rot-c (missed)');
    const forced = await wavegate([
      'rotation',
      'retire',
      sched,
      '--inventory',
      inv,
      ...common,
      '--statement',
      statement,
      '--force',
    ]);
    expect(forced.code, forced.stdout + forced.stderr).toBe(0);
    expect(forced.stderr).toContain('FORCED retire of forced (rack 4 is gone): rot-c still on the old key');
    expect(forced.stdout).toContain('1 device(s) still on the old key');
    const state = JSON.parse(readFileSync(path('.wavegate-rotations/forced.json'), 'utf8'));
    expect(state.retire).toMatchObject({ forced: true, reason: 'rack 4 is gone', notActive: ['rot-c'] });
    expect(state.log.some((e: { event: string }) => e.event === 'retire-forced')).toBe(true);
    await fleet.online('rot-c');
    expect(readFileSync(fleet.authorizedKeys('rot-a'), 'utf8')).not.toContain(loginKeyOf(fleet.oldKey).blob);
    // rot-c was never proven on the new key: its old key was left, and still logs in.
    expect(readFileSync(fleet.authorizedKeys('rot-c'), 'utf8')).toContain(loginKeyOf(fleet.oldKey).blob);
  }, 60_000);
});
