import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { channelFor, devicesWithTwins } from '../../device/channel';
import { readDrift, readFleetBoard, targetOf } from '../../device/fleet';
import { createHealthActivities, type HealthCheckInput } from '../../activities/health';
import { TransportError } from '../../device/transport';
import { parseInventory } from '../../core/inventory';
import type { DeviceTarget } from '../../core/rollout-state';
import { errorRateReportName, type HealthReport, type TwinView } from '../../core/twin';
import { demoDevices, startFleet, type Fleet } from '../../sim';
import { scratchDir } from '../support/harness';
import { refusal } from '../support/refusal';
import { writeSignedProfile } from '../support/signed-profile';

/**
 * The device channel (device/channel/): health gates, the board and drift ask one interface and
 * the channel chosen from the device's transport answers. Agent devices are read from twin views given
 * here as data (what a twin's query returns); SSH devices are real sessions to the simulated fleet.
 */
const scratch = scratchDir('device-channel');
const profile = writeSignedProfile({
  root: join(scratch.dir, 'profiles'),
  name: 'chan',
  keys: 1,
  revisions: [
    { revision: 1, apply: 'true', verify: 'true' },
    {
      revision: 2,
      apply: 'true',
      verify: 'true',
      health: {
        runtimes: [{ name: 'motd', command: 'sim-runtime-health motd' }],
        errorRate: { command: 'sim-error-rate' },
      },
    },
  ],
});
afterAll(() => scratch.cleanup());

const agentKey = `ed25519:${Buffer.alloc(32, 3).toString('base64')}`;
const agent: DeviceTarget = { id: 'a1', host: '', port: 0, user: '', pool: 'p', class: 'c', transport: 'agent' };
const secondsAgo = (s: number) => new Date(Date.now() - s * 1000).toISOString();

/** A twin's view of an agent at r2 of `chan`, last synced and health-reported `ageS` seconds ago. */
function twin(ageS: number, health: HealthReport[] = [{ name: 'motd', ok: true, kind: 'runtime' }]): TwinView {
  return {
    deviceId: 'a1',
    version: 1,
    desired: {},
    lastSeenAt: secondsAgo(ageS),
    reverify: false,
    report: {
      profiles: { chan: { revision: 2, state: 'applied', at: secondsAgo(ageS) } },
      health,
      healthAt: secondsAgo(ageS),
      agentVersion: 'test',
    },
  };
}

function healthWith(view: TwinView | null) {
  return createHealthActivities({ profilesRoot: profile.root, twins: async (id) => (id === 'a1' ? view : null) })
    .runHealthCheck;
}

const input = (check: string, devices: DeviceTarget[]): HealthCheckInput => ({
  check,
  devices,
  profile: 'chan',
  revision: 2,
  envelope: profile.envelope(2),
  timeoutMs: 60_000,
});

describe('health gates through the channel: an agent whose report is missing or stale', () => {
  it('devices-online is inconclusive naming the report bound (reports count for 120 s), not the check timeout', async () => {
    const result = await healthWith(twin(300))(input('devices-online', [agent]));
    expect(result).toMatchObject({ outcome: 'inconclusive', failedDevices: ['a1'] });
    expect(result.evidence).toBe(
      'could not read 1 of 1 devices: a1 (no fresh report from its agent: last seen 5m ago, reports count for 120 s)',
    );
    expect(result.evidence).not.toContain('60000 ms');
  });

  it('an agent that never synced says so', async () => {
    const result = await healthWith(null)(input('devices-online', [agent]));
    expect(result.evidence).toBe(
      'could not read 1 of 1 devices: a1 (no fresh report from its agent: never synced, reports count for 120 s)',
    );
  });

  it('all-runtimes-healthy and the signed error rate name the bound too; a fresh report answers both', async () => {
    const stale = healthWith(twin(300));
    for (const check of ['all-runtimes-healthy', 'error-rate < 0.1']) {
      const result = await stale(input(check, [agent]));
      expect(result.outcome).toBe('inconclusive');
      expect(result.evidence).toContain('a1 (no fresh report from its agent: last 5m ago, reports count for 120 s)');
      expect(result.evidence).not.toContain('within');
    }
    const fresh = healthWith(
      twin(5, [
        { name: 'motd', ok: true, kind: 'runtime' },
        { name: errorRateReportName('chan'), ok: true, kind: 'error-rate', value: 0.4 },
      ]),
    );
    expect(await fresh(input('all-runtimes-healthy', [agent]))).toMatchObject({
      outcome: 'pass',
      evidence: '1 check on 1 device exited 0',
    });
    expect(await fresh(input('error-rate < 0.1', [agent]))).toMatchObject({
      outcome: 'fail',
      evidence: 'error rate not < 0.1 on a1 (0.4)',
      failedDevices: ['a1'],
    });
  });
});

describe('one gate over SSH and agent devices (simulated fleet)', () => {
  let fleet: Fleet;
  let ssh: DeviceTarget;
  beforeAll(async () => {
    fleet = await startFleet({ devices: demoDevices(1), dir: join(scratch.dir, 'fleet') });
    const d = fleet.devices[0]!;
    ssh = {
      id: d.id,
      host: d.host,
      port: d.port,
      user: fleet.user,
      pool: 'p',
      class: 'c',
      ssh: { hostKey: d.hostKeyFingerprint, key: fleet.clientKeyPath },
    };
  });
  afterAll(() => fleet?.stop());

  it('each device is answered by its own channel: the SSH device over a session, the agent from its report', async () => {
    const result = await healthWith(twin(5))(input('all-runtimes-healthy', [ssh, agent]));
    expect(result).toMatchObject({ outcome: 'pass', evidence: '2 checks on 2 devices exited 0' });
    expect(fleet.count(ssh.id, 'sim-runtime-health motd')).toBe(1);
  });

  it('a stale agent beside an SSH device that timed out: each named with its own bound', async () => {
    await fleet.setFaults(ssh.id, { hangCommand: 'sim-runtime-health' });
    try {
      const result = await healthWith(twin(300))({ ...input('all-runtimes-healthy', [ssh, agent]), timeoutMs: 1_000 });
      expect(result.outcome).toBe('inconclusive');
      expect(result.evidence).toMatch(
        new RegExp(
          `^could not read 1 of 2 devices within 1000 ms: ${ssh.id} \\(.+\\); could not read 1 of 2 devices: a1 \\(no fresh report from its agent: last 5m ago, reports count for 120 s\\)$`,
        ),
      );
    } finally {
      await fleet.setFaults(ssh.id, {});
    }
  });

  it('probe over SSH: a marker read that hangs after a good connect leaves the device reachable, its marker unknown', async () => {
    const device = { ...ssh, current: null, reachable: true, updateClass: 'required' as const, os: 'linux' };
    const channel = channelFor(ssh);
    expect(await channel.probe(device, 'chan', { readTimeoutMs: 5_000 })).toMatchObject({
      reachable: true,
      current: null,
    });
    await fleet.setFaults(ssh.id, { hangCommand: '.wavegate' });
    try {
      const canary = await channel.probe(device, 'chan', { readTimeoutMs: 500 });
      expect(canary).toMatchObject({ reachable: true, current: null });
      expect(canary.error).toMatch(/^marker not read \(the apply's verify-first decides\): /);
    } finally {
      await fleet.setFaults(ssh.id, {});
    }
  });

  it('the board and drift read both kinds of device through their channels', async () => {
    const d = fleet.devices[0]!;
    const inventory = parseInventory(
      {
        defaults: { pool: 'p', class: 'c', user: fleet.user },
        devices: [
          { id: d.id, host: d.host, port: d.port, ssh: { hostKey: d.hostKeyFingerprint, key: fleet.clientKeyPath } },
          { id: 'a1', transport: 'agent', agentKey },
        ],
      },
      'fleet.yaml',
    );
    const twins = async () => twin(5);
    // The SSH device runs the verify now (and fails it); the agent's report says it verified r2.
    const board = await readFleetBoard({
      inventory,
      profile: 'chan',
      scope: {},
      revision: 2,
      verify: 'false',
      provable: true,
      probe: { twins },
    });
    expect(board.rows.map((r) => [r.id, r.state])).toEqual([
      [d.id, 'pending'],
      ['a1', 'applied'],
    ]);
    expect(board.rows[0]).toMatchObject({
      marker: null,
      reason: 'verify exited 1 (never reported: no revision marker)',
    });
    expect(board.rows[1]!.reason).toMatch(/^verified by its agent 5s ago/);
    const drift = await readDrift({ inventory, profile: 'chan', scope: {}, verifyOf: () => 'true', probe: { twins } });
    expect(drift.map((r) => [r.id, r.status])).toEqual([
      [d.id, 'no-marker'],
      ['a1', 'ok'],
    ]);
    // Without a twin reader an agent device is pending, saying why (the CLI had no Temporal client).
    const blind = await readFleetBoard({
      inventory,
      profile: 'chan',
      scope: {},
      revision: 2,
      verify: 'true',
      provable: true,
    });
    expect(blind.rows[1]).toMatchObject({
      id: 'a1',
      state: 'pending',
      reason: 'agent device: read from its twin, and no Temporal client was given to read it',
    });
  });
});

describe('channelFor', () => {
  it('an unknown transport is a non-retryable config error naming the device, the value and the allowed names', () => {
    const err = refusal(() => channelFor({ id: 'dev-9', transport: 'ftp' as 'ssh' }), TransportError);
    expect(err).toBeInstanceOf(TransportError);
    expect(err.kind).toBe('config');
    expect(err.retryable).toBe(false);
    expect(err.message).toBe(
      'dev-9: transport "ftp": not a transport this worker knows; allowed: "ssh", "agent" (set transport on the device in the inventory)',
    );
  });

  it('chosen from the transport (none is ssh); an agent target carries no ssh settings, and an SSH path given one without them refuses it', async () => {
    expect(channelFor({ id: 'x' }).name).toBe('ssh');
    expect(channelFor(agent).name).toBe('agent');
    const inventory = parseInventory(
      {
        defaults: { pool: 'p', ssh: { key: '/k' } },
        devices: [
          { id: 'a1', transport: 'agent', agentKey },
          { id: 's1', host: 'h', user: 'u' },
        ],
      },
      'fleet.yaml',
    );
    expect(targetOf(inventory.devices[0]!)).not.toHaveProperty('ssh');
    expect(targetOf(inventory.devices[1]!).ssh).toMatchObject({ key: '/k' });
    // Which devices have a twin to read is the channel's word too (the CLI opens a client for those only).
    expect(devicesWithTwins([...inventory.devices, { id: 'f1', transport: 'ftp' as 'ssh' }]).map((d) => d.id)).toEqual([
      'a1',
    ]);
    const probed = await channelFor({ id: 'bare' }).probe(
      { ...agent, id: 'bare', transport: 'ssh', current: null, reachable: true, updateClass: 'required', os: 'linux' },
      'chan',
      { readTimeoutMs: 1_000 },
    );
    expect(probed).toMatchObject({ reachable: false, refusal: 'config' });
    expect(probed.error).toBe(
      'bare: no ssh settings to dial it with (ssh.hostKey or ssh.knownHosts, and ssh.key or ssh.agent); set them on the device in the inventory',
    );
  });
});
