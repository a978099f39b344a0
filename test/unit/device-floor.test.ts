import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { MockActivityEnvironment } from '@temporalio/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseFloor } from '../../core/floor';
import type { DeviceTarget } from '../../core/rollout-state';
import { applyToDevice, EnvelopeRejected, type RevisionSteps } from '../../activities/device-steps';
import { createFloorActivities } from '../../activities/floor';
import { startFleet, type Fleet, type SimDevice } from '../../sim';
import { scratchDir } from '../support/harness';

/**
 * The device floor over real SSH (the simulator): a completed rollout raises it; the worker then refuses
 * an apply below it — a downgrade sent as an "apply" — and runs nothing on the device, except a revert
 * to the replaced revision inside the revert window.
 */
describe('device floor over SSH', () => {
  const scratch = scratchDir('floor');
  let fleet: Fleet;
  const target = (d: SimDevice): DeviceTarget => ({
    id: d.id,
    host: d.host,
    port: d.port,
    user: fleet.user,
    pool: 'p',
    class: 'c',
    ssh: { hostKey: d.hostKeyFingerprint, key: fleet.clientKeyPath },
  });
  const steps = (revision: number): RevisionSteps => ({
    profile: 'floored',
    revision,
    apply: `echo ${revision} > "$HOME/applied-${revision}"`,
    verify: `test -f "$HOME/applied-${revision}"`,
    payload: [],
  });
  const opts = { commandTimeoutMs: 10_000, profilesRoot: join(scratch.dir, 'profiles') };
  const confirm = (d: SimDevice, revertWindowMs: number) =>
    new MockActivityEnvironment().run(createFloorActivities().confirmFloor, {
      devices: [target(d)],
      profile: 'floored',
      revision: 3,
      from: 2,
      rolloutId: 'rollout:floored',
      revertWindowMs,
    });

  beforeAll(async () => {
    mkdirSync(opts.profilesRoot, { recursive: true });
    fleet = await startFleet({
      devices: [{ id: 'f1' }, { id: 'f2' }, { id: 'gone' }],
      dir: join(scratch.dir, 'fleet'),
    });
  });
  afterAll(async () => {
    await fleet?.stop();
    scratch.cleanup();
  });

  it('confirmFloor writes the floor on the device; an unreachable device is named, not passed over', async () => {
    await fleet.setFaults('gone', { offline: true });
    const result: { confirmed: number; failed: Array<{ id: string }> } = await new MockActivityEnvironment().run(
      createFloorActivities().confirmFloor,
      {
        devices: [target(fleet.device('f1')), target(fleet.device('gone'))],
        profile: 'floored',
        revision: 3,
        from: 2,
        rolloutId: 'rollout:floored',
        revertWindowMs: 60_000,
      },
    );
    expect(result.confirmed).toBe(1);
    expect(result.failed.map((f) => f.id)).toEqual(['gone']);
    const floor = parseFloor(
      readFileSync(join(fleet.device('f1').sandbox, '.wavegate/profiles/floored/floor'), 'utf8'),
    )!;
    expect(floor).toMatchObject({ revision: 3, from: 2, rollout: 'rollout:floored' });
    expect(floor.revertUntil).toBeGreaterThan(Date.now());
  });

  it('refuses an apply below the floor (BELOW_FLOOR) and runs nothing on the device', async () => {
    const d = fleet.device('f2');
    await confirm(d, 0); // no revert window
    fleet.resetCounters();
    const err = await applyToDevice(target(d), steps(1), opts).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(EnvelopeRejected);
    expect((err as EnvelopeRejected).reason).toBe('BELOW_FLOOR');
    expect((err as Error).message).toMatch(
      /r1 is below the device's floor r3, confirmed by rollout:floored: roll forward/,
    );
    expect(existsSync(join(d.sandbox, 'applied-1'))).toBe(false);
    // One command (the unit's script), which stopped at the floor: no lock taken, nothing launched.
    expect(fleet.commands('f2')).toHaveLength(1);
    expect(existsSync(join(d.sandbox, '.wavegate/profiles/floored/apply.lock'))).toBe(false);
    expect(existsSync(join(d.sandbox, '.wavegate/profiles/floored/last-apply'))).toBe(false);
    // Going back to the replaced revision without a window is refused too, and says why.
    expect(((await applyToDevice(target(d), steps(2), opts).catch((e: unknown) => e)) as Error).message).toMatch(
      /confirmed with no revert window/,
    );
    // Rolling forward is the way: the floor revision and above apply.
    expect((await applyToDevice(target(d), steps(4), opts)).outcome).toBe('applied');
  });

  it('allows the revert to the replaced revision while the window is open', async () => {
    const d = fleet.device('f1');
    await confirm(d, 60_000);
    expect((await applyToDevice(target(d), steps(2), opts)).outcome).toBe('applied');
    expect(existsSync(join(d.sandbox, 'applied-2'))).toBe(true);
    // But nothing older than that.
    writeFileSync(join(d.sandbox, 'unrelated'), '');
    expect(((await applyToDevice(target(d), steps(1), opts).catch((e: unknown) => e)) as EnvelopeRejected).reason).toBe(
      'BELOW_FLOOR',
    );
  });
});
