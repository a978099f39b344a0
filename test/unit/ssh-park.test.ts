import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { MockActivityEnvironment } from '@temporalio/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseFloor } from '../../core/floor';
import type { DeviceTarget } from '../../core/rollout-state';
import { applyToDevice, type RevisionSteps } from '../../activities/device-steps';
import { createFloorActivities } from '../../activities/floor';
import { ConnectionPark, sshPark } from '../../activities/transport/ssh-park';
import { startFleet, type Fleet, type SimDevice } from '../../sim';
import { scratchDir } from '../support/harness';

/**
 * Parked connections (activities/transport/ssh-park.ts) over real SSH (the simulator): a device's
 * successful apply keeps its connection, and the completing rollout's floor write takes it back instead
 * of connecting again. Never after a failed apply, never for a host key no longer pinned, and a kept
 * connection the device let go of is replaced by a new one.
 */
describe('parked SSH connections', () => {
  const scratch = scratchDir('ssh-park');
  let fleet: Fleet;
  const target = (d: SimDevice, hostKey = d.hostKeyFingerprint): DeviceTarget => ({
    id: d.id,
    host: d.host,
    port: d.port,
    user: fleet.user,
    pool: 'p',
    class: 'c',
    ssh: { hostKey, key: fleet.clientKeyPath },
  });
  const steps = (apply = 'echo 2 > "$HOME/applied"'): RevisionSteps => ({
    profile: 'parked',
    revision: 2,
    apply,
    verify: 'test -f "$HOME/applied"',
    payload: [],
  });
  const opts = { commandTimeoutMs: 10_000, profilesRoot: join(scratch.dir, 'profiles'), parkConnectionMs: 30_000 };
  const raiseFloor = (t: DeviceTarget) =>
    new MockActivityEnvironment().run(createFloorActivities().confirmFloor, {
      devices: [t],
      profile: 'parked',
      revision: 2,
      from: 1,
      rolloutId: 'rollout:parked',
      revertWindowMs: 60_000,
    });
  const floorOf = (d: SimDevice) =>
    parseFloor(readFileSync(join(d.sandbox, '.wavegate/profiles/parked/floor'), 'utf8'));

  beforeAll(async () => {
    mkdirSync(opts.profilesRoot, { recursive: true });
    fleet = await startFleet({
      devices: ['kept', 'failed', 'dropped', 'rotated'].map((id) => ({ id })),
      dir: join(scratch.dir, 'fleet'),
    });
  });
  afterAll(async () => {
    sshPark.closeAll();
    await fleet?.stop();
    scratch.cleanup();
  });

  it("the floor write after an apply runs on the apply's own connection: one connection for both", async () => {
    const d = fleet.device('kept');
    fleet.resetCounters();
    expect((await applyToDevice(target(d), steps(), opts)).outcome).toBe('applied');
    expect(fleet.connections('kept')).toBe(1); // kept open
    const result = await raiseFloor(target(d));
    expect(result).toEqual({ confirmed: 1, failed: [] });
    expect(floorOf(d)).toMatchObject({ revision: 2, from: 1, rollout: 'rollout:parked' });
    expect(fleet.connectionsOpened('kept')).toBe(1);
    // Taken back and closed with the floor's session: nothing is left open or parked for it.
    await new Promise((r) => setTimeout(r, 100));
    expect(fleet.connections('kept')).toBe(0);
  });

  it('a failed apply closes its connection (no floor follows it)', async () => {
    fleet.resetCounters();
    const result = await applyToDevice(target(fleet.device('failed')), steps('exit 3'), opts).catch((e: unknown) => e);
    expect(result).toBeInstanceOf(Error);
    await new Promise((r) => setTimeout(r, 100));
    expect(fleet.connections('failed')).toBe(0);
  });

  it('a kept connection the device dropped is replaced: the floor is written on a new one', async () => {
    const d = fleet.device('dropped');
    fleet.resetCounters();
    expect((await applyToDevice(target(d), steps(), opts)).outcome).toBe('applied');
    // The device goes away (its connections are cut) and comes back.
    await fleet.setFaults('dropped', { offline: true });
    await fleet.setFaults('dropped', {});
    expect(await raiseFloor(target(d))).toEqual({ confirmed: 1, failed: [] });
    expect(floorOf(d)).toMatchObject({ revision: 2 });
    expect(fleet.connectionsOpened('dropped')).toBe(2);
  });

  it('a host key no longer pinned is not used again: the floor write connects anew and checks the new pin', async () => {
    const d = fleet.device('rotated');
    const oldPin = d.hostKeyFingerprint;
    fleet.resetCounters();
    expect((await applyToDevice(target(d), steps(), opts)).outcome).toBe('applied');
    fleet.rotateHostKey('rotated'); // the operator re-pins the device to its new key
    expect(fleet.device('rotated').hostKeyFingerprint).not.toBe(oldPin);
    expect(await raiseFloor(target(fleet.device('rotated')))).toEqual({ confirmed: 1, failed: [] });
    expect(fleet.connectionsOpened('rotated')).toBe(2);
    expect(existsSync(join(d.sandbox, '.wavegate/profiles/parked/floor'))).toBe(true);
  });

  it('the park is bounded: the oldest kept connection is closed when it is full; closeAll empties it', () => {
    const ended: string[] = [];
    const fake = (name: string) =>
      ({
        client: { once() {}, off() {}, end: () => ended.push(name) },
        hostKey: 'k',
        lastError: () => undefined,
        label: name,
      }) as never;
    const park = new ConnectionPark(2);
    park.park('a', fake('a'), 60_000);
    park.park('b', fake('b'), 60_000);
    park.park('c', fake('c'), 60_000);
    expect(ended).toEqual(['a']);
    expect(park.size).toBe(2);
    expect(park.take('b')).toBeDefined();
    expect(park.take('b')).toBeUndefined();
    park.closeAll();
    expect(ended).toEqual(['a', 'c']);
    expect(park.size).toBe(0);
  });
});
