import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { formatFloor, revertUntilOf } from '../../core/floor';
import type { DeviceTarget } from '../../core/rollout-state';
import { applyToDevice, EnvelopeRejected, type RevisionSteps } from '../../device/steps';
import { startFleet, type Fleet, type SimDevice } from '../../sim';
import { scratchDir } from '../support/harness';
import { rejection } from '../support/refusal';

/**
 * The device floor over real SSH (the simulator): with a floor on the device (the one a rollout's apply
 * raised, written here as that apply leaves it), the worker refuses an apply below it — a downgrade sent
 * as an "apply" — and runs nothing on the device, except a revert to the replaced revision inside the
 * revert window. The apply raising it is test/workflow/floor-at-apply.test.ts.
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
  /** The floor r3 (replacing r2) on the device, with a revert window of `revertWindowMs` from now (0: none). */
  const confirm = (d: SimDevice, revertWindowMs: number) => {
    const dir = join(d.sandbox, '.wavegate/profiles/floored');
    mkdirSync(dir, { recursive: true });
    const revertUntil = revertUntilOf(Date.now(), revertWindowMs);
    writeFileSync(join(dir, 'floor'), formatFloor({ revision: 3, from: 2, revertUntil, rollout: 'rollout:floored' }));
  };

  beforeAll(async () => {
    mkdirSync(opts.profilesRoot, { recursive: true });
    fleet = await startFleet({
      devices: [{ id: 'f1' }, { id: 'f2' }],
      dir: join(scratch.dir, 'fleet'),
    });
  });
  afterAll(async () => {
    await fleet?.stop();
    scratch.cleanup();
  });

  it('refuses an apply below the floor (BELOW_FLOOR) and runs nothing on the device', async () => {
    const d = fleet.device('f2');
    confirm(d, 0); // no revert window
    fleet.resetCounters();
    const err = await rejection(applyToDevice(target(d), steps(1), opts), EnvelopeRejected);
    expect(err).toBeInstanceOf(EnvelopeRejected);
    expect(err.reason).toBe('BELOW_FLOOR');
    expect(err.message).toMatch(/r1 is below the device's floor r3, confirmed by rollout:floored: roll forward/);
    expect(existsSync(join(d.sandbox, 'applied-1'))).toBe(false);
    // One command (the unit's script), which stopped at the floor: no lock taken, nothing launched.
    expect(fleet.commands('f2')).toHaveLength(1);
    expect(existsSync(join(d.sandbox, '.wavegate/profiles/floored/apply.lock'))).toBe(false);
    expect(existsSync(join(d.sandbox, '.wavegate/profiles/floored/last-apply'))).toBe(false);
    // Going back to the replaced revision without a window is refused too, and says why.
    expect((await rejection(applyToDevice(target(d), steps(2), opts), Error)).message).toMatch(
      /confirmed with no revert window/,
    );
    // Rolling forward is the way: the floor revision and above apply.
    expect((await applyToDevice(target(d), steps(4), opts)).outcome).toBe('applied');
  });

  it('allows the revert to the replaced revision while the window is open', async () => {
    const d = fleet.device('f1');
    confirm(d, 60_000);
    expect((await applyToDevice(target(d), steps(2), opts)).outcome).toBe('applied');
    expect(existsSync(join(d.sandbox, 'applied-2'))).toBe(true);
    // But nothing older than that.
    writeFileSync(join(d.sandbox, 'unrelated'), '');
    expect((await rejection(applyToDevice(target(d), steps(1), opts), EnvelopeRejected)).reason).toBe('BELOW_FLOOR');
  });
});
