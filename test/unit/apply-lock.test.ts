import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DeviceTarget } from '../../core/rollout-state';
import { applyToDevice, type ApplyHolder, type RevisionSteps } from '../../device/steps';
import { TransportError } from '../../device/transport';
import { startFleet, type Fleet } from '../../sim';
import { scratchDir } from '../support/harness';
import { rejection } from '../support/refusal';

/**
 * The device-side apply unit (docs/formats.md, "The apply lock") over SSH to the fleet simulator: an
 * apply is taken under a lock, runs detached, records its outcome on the device, and a retry of the
 * same unit reattaches to it instead of starting a second one. Every apply here counts its own runs
 * in `$HOME/apply-runs` on the device: that file, not the worker, says how often it ran.
 */
describe('the apply lock: one exclusive, resumable apply per device', () => {
  const scratch = scratchDir('apply-lock');
  let fleet: Fleet;
  const ids = [
    'drop',
    'hang',
    'conflict',
    'same-run',
    'stale',
    'finished',
    'failing',
    'ownerless',
    'ownerless-launched',
  ];

  const target = (id: string): DeviceTarget => {
    const d = fleet.device(id);
    return {
      id,
      host: d.host,
      port: d.port,
      user: fleet.user,
      pool: 'pool-a',
      class: 'server',
      ssh: { hostKey: d.hostKeyFingerprint, key: fleet.clientKeyPath },
    };
  };
  /** An apply that records each run, takes `seconds`, then puts the fact verify reads in place. */
  const steps = (seconds: number, revision = 3): RevisionSteps => ({
    profile: 'lock',
    revision,
    apply: `echo run >> "$HOME/apply-runs" && sleep ${seconds} && echo "applied r${revision}" && touch "$HOME/applied-r${revision}"`,
    verify: `test -f "$HOME/applied-r${revision}"`,
    payload: [],
  });
  const runs = (id: string): number => {
    const file = join(fleet.device(id).sandbox, 'apply-runs');
    return existsSync(file) ? readFileSync(file, 'utf8').split('\n').filter(Boolean).length : 0;
  };
  const profileFile = (id: string, rel: string) => join(fleet.device(id).sandbox, '.wavegate/profiles/lock', rel);
  const unit = (rollout: string, attempt: number): ApplyHolder => ({
    rollout,
    run: `${rollout}-run`,
    activity: '7',
    attempt,
  });
  const failure = (p: Promise<unknown>) => rejection(p, Error);

  beforeAll(async () => {
    fleet = await startFleet({ devices: ids.map((id) => ({ id })), dir: join(scratch.dir, 'fleet') });
  });
  afterAll(async () => {
    await fleet?.stop();
    scratch.cleanup();
  });

  it('a connection dropped mid-apply: the retry reattaches to the running apply, which ran once, and the device records holder and outcome', async () => {
    // The apply runs, and the connection dies under it half a second later (the retry comes at once).
    await fleet.setFaults('drop', { dropConnection: 'apply-runs', dropAfterMs: 500 });
    const first = await failure(
      applyToDevice(target('drop'), steps(2), {
        commandTimeoutMs: 20_000,
        holder: unit('rollout:a', 1),
        heartbeatIntervalMs: 200,
      }),
    );
    expect(first).toBeInstanceOf(TransportError);
    expect((first as TransportError).kind).toBe('dropped');
    await fleet.setFaults('drop', {});
    const sent = fleet.commands('drop').length;

    const retry = await applyToDevice(target('drop'), steps(2), {
      commandTimeoutMs: 20_000,
      holder: unit('rollout:a', 2),
      heartbeatIntervalMs: 200,
    });
    expect(retry).toEqual({ device: 'drop', outcome: 'applied', steps: ['reattach', 'verify', 'marker'] });
    expect(runs('drop')).toBe(1); // launched once: the retry's unit found it and started nothing
    expect(fleet.commands('drop').length - sent).toBe(1); // the retry is one remote command (apply-script.ts)
    // The released lock is the device's record of the unit: who, which attempt finished it, the outcome.
    const owner = readFileSync(profileFile('drop', 'last-apply/owner'), 'utf8');
    expect(owner).toMatch(/^rollout=rollout:a$/m);
    expect(owner).toMatch(/^run=rollout:a-run$/m);
    expect(owner).toMatch(/^attempt=2$/m);
    expect(readFileSync(profileFile('drop', 'last-apply/exitcode'), 'utf8').trim()).toBe('0');
    expect(readFileSync(profileFile('drop', 'last-apply/out'), 'utf8')).toContain('applied r3');
    expect(readFileSync(profileFile('drop', 'last-apply/released'), 'utf8')).toMatch(
      /apply of r3 done: verified, marker written/,
    );
    expect(existsSync(profileFile('drop', 'apply.lock'))).toBe(false);
    expect(readFileSync(profileFile('drop', 'revision'), 'utf8')).toBe('3\n');
  });

  it('a session that never reports the exit: the attempt times out, the retry reattaches to the recorded outcome, the apply ran once', async () => {
    // The command runs but its channel never closes (a child holding the output, a stuck session).
    await fleet.setFaults('hang', { hangCommand: 'apply-runs', hangAfterRunning: true });
    const first = await failure(
      applyToDevice(target('hang'), steps(3), {
        commandTimeoutMs: 1_500,
        holder: unit('rollout:h', 1),
        heartbeatIntervalMs: 200,
      }),
    );
    expect((first as TransportError).kind).toBe('timeout');
    await fleet.setFaults('hang', {});
    // Still running when the retry arrives: the retry waits for it rather than applying again.
    expect(runs('hang')).toBe(1);
    const retry = await applyToDevice(target('hang'), steps(3), {
      commandTimeoutMs: 20_000,
      holder: unit('rollout:h', 2),
      heartbeatIntervalMs: 200,
    });
    expect(retry.steps).toEqual(['reattach', 'verify', 'marker']);
    expect(runs('hang')).toBe(1);
    expect(readFileSync(profileFile('hang', 'last-apply/exitcode'), 'utf8').trim()).toBe('0');
  });

  it('a lock held by another rollout whose apply still runs is a non-retryable CONFLICT naming the holder; nothing runs, not even verify', async () => {
    await fleet.setFaults('conflict', { dropConnection: 'apply-runs', dropAfterMs: 300 });
    await failure(
      applyToDevice(target('conflict'), steps(4), { commandTimeoutMs: 20_000, holder: unit('rollout:first', 1) }),
    );
    await fleet.setFaults('conflict', {});
    const before = fleet.commands('conflict').length;

    const err = await failure(
      applyToDevice(target('conflict'), steps(4), {
        commandTimeoutMs: 20_000,
        holder: unit('rollout:second', 1),
        holderClosed: async () => false,
      }),
    );
    expect(err.name).toBe('ApplyLockHeld');
    expect(err.message).toMatch(
      /^conflict: CONFLICT: the apply lock for profile "lock" is held by rollout rollout:first \(run rollout:first-run, activity 7, attempt 1\), taken \S+; its apply of r3 is running \(pid \d+\)/,
    );
    // One remote command (the unit's script), which stopped at the lock: the apply ran once, the first
    // rollout still holds the lock.
    const all = fleet
      .commands('conflict')
      .slice(before)
      .map((r) => r.command);
    expect(all).toHaveLength(1);
    expect(all[0]).toContain('apply.lock');
    expect(runs('conflict')).toBe(1);
    expect(readFileSync(profileFile('conflict', 'apply.lock/owner'), 'utf8')).toMatch(/^rollout=rollout:first$/m);
  });

  it("a unit whose own run's earlier unit was cut off mid-apply (a cancel) waits for that apply to end, then takes the lock: its compensation runs after, never beside it", async () => {
    // The apply of this run's activity 7 is started, and its connection dies under it (the activity cancelled).
    await fleet.setFaults('same-run', { dropConnection: 'apply-runs', dropAfterMs: 300 });
    await failure(
      applyToDevice(target('same-run'), steps(3), { commandTimeoutMs: 20_000, holder: unit('rollout:same', 1) }),
    );
    await fleet.setFaults('same-run', {});
    expect(existsSync(profileFile('same-run', 'apply.lock/owner'))).toBe(true);
    // Its compensation, activity 8 of the same run, arrives while the apply still runs.
    const back: RevisionSteps = {
      profile: 'lock',
      revision: 2,
      apply: 'echo back >> "$HOME/rollback-runs" && rm -f "$HOME/applied-r3" && touch "$HOME/applied-r2"',
      verify: 'test -f "$HOME/applied-r2" && ! test -f "$HOME/applied-r3"',
      payload: [],
    };
    const beats: string[] = [];
    const result = await applyToDevice(target('same-run'), back, {
      commandTimeoutMs: 20_000,
      holder: { rollout: 'rollout:same', run: 'rollout:same-run', activity: '8', attempt: 1 },
      heartbeat: (d) => beats.push(d),
      heartbeatIntervalMs: 200,
    });
    expect(result.outcome).toBe('applied');
    expect(beats).toContain('waiting for activity 7 of this run to end its apply');
    // Run after the apply ended: had it run beside it, the apply's late touch would have put r3 back.
    expect(runs('same-run')).toBe(1);
    expect(existsSync(join(fleet.device('same-run').sandbox, 'applied-r3'))).toBe(false);
    expect(existsSync(join(fleet.device('same-run').sandbox, 'applied-r2'))).toBe(true);
    expect(readFileSync(join(fleet.device('same-run').sandbox, 'rollback-runs'), 'utf8')).toBe('back\n');
    expect(readFileSync(profileFile('same-run', 'last-apply/owner'), 'utf8')).toMatch(/^activity=8$/m);
  });

  it('an earlier unit of the same run is waited for only up to the command bound: then CONFLICT, nothing runs', async () => {
    const lock = profileFile('same-run', 'apply.lock');
    mkdirSync(lock, { recursive: true });
    // Held by activity 9 of this run, its apply "running" (the pid of this test process, alive throughout).
    writeFileSync(
      join(lock, 'owner'),
      'rollout=rollout:same\nrun=rollout:same-run\nactivity=9\nattempt=1\nrevision=3\nstep=apply\ntaken=2024-01-01T00:00:00.000Z\n',
    );
    writeFileSync(join(lock, 'launched'), '');
    writeFileSync(join(lock, 'pid'), `${process.pid}\n`);
    const err = await failure(
      applyToDevice(target('same-run'), steps(0, 4), {
        commandTimeoutMs: 2_500,
        holder: { rollout: 'rollout:same', run: 'rollout:same-run', activity: '10', attempt: 1 },
      }),
    );
    expect(err.name).toBe('ApplyLockHeld');
    expect(runs('same-run')).toBe(1);
  });

  it('a stale lock (its apply gone without an outcome) is broken with the reason recorded, and verify decides', async () => {
    // Another rollout's apply that died with the device: launched, its pid no longer running, no exit code.
    const dead = spawnSync('sh', ['-c', 'echo $$']).stdout.toString().trim();
    const lock = profileFile('stale', 'apply.lock');
    mkdirSync(lock, { recursive: true });
    writeFileSync(
      join(lock, 'owner'),
      'rollout=rollout:old\nrun=old-run\nactivity=3\nattempt=2\nrevision=3\nstep=apply\ntaken=2024-01-01T00:00:00.000Z\n',
    );
    writeFileSync(join(lock, 'launched'), '');
    writeFileSync(join(lock, 'pid'), `${dead}\n`);

    const result = await applyToDevice(target('stale'), steps(0), {
      commandTimeoutMs: 20_000,
      holder: unit('rollout:new', 1),
    });
    expect(result).toEqual({ device: 'stale', outcome: 'applied', steps: ['verify', 'apply', 'verify', 'marker'] });
    expect(runs('stale')).toBe(1);
    expect(readFileSync(profileFile('stale', 'last-apply/owner'), 'utf8')).toMatch(/^rollout=rollout:new$/m);
  });

  it('a lock cut off before it named its owner (its claimer killed right after mkdir) is broken after a grace, recorded, and the apply runs once', async () => {
    // What a worker SIGKILLed between `mkdir apply.lock` and writing `owner` leaves: an empty lock dir.
    mkdirSync(profileFile('ownerless', 'apply.lock'), { recursive: true });
    const began = Date.now();
    const result = await applyToDevice(target('ownerless'), steps(0), {
      commandTimeoutMs: 20_000,
      holder: unit('rollout:after-kill', 2),
      heartbeatIntervalMs: 200,
    });
    expect(result).toEqual({ device: 'ownerless', outcome: 'applied', steps: ['verify', 'apply', 'verify', 'marker'] });
    expect(runs('ownerless')).toBe(1);
    // It waited out a live claimer's moment before breaking the lock.
    expect(Date.now() - began).toBeGreaterThanOrEqual(3_000);
    expect(readFileSync(profileFile('ownerless', 'last-apply/owner'), 'utf8')).toMatch(/^rollout=rollout:after-kill$/m);
  });

  it('an ownerless lock under which something was launched is never broken: CONFLICT, nothing runs', async () => {
    const lock = profileFile('ownerless-launched', 'apply.lock');
    mkdirSync(lock, { recursive: true });
    writeFileSync(join(lock, 'launched'), '');
    const err = await failure(
      applyToDevice(target('ownerless-launched'), steps(0), {
        commandTimeoutMs: 20_000,
        holder: unit('rollout:careful', 1),
      }),
    );
    expect(err.name).toBe('ApplyLockHeld');
    expect(runs('ownerless-launched')).toBe(0);
    expect(existsSync(lock)).toBe(true);
  });

  it('the break of a stale lock is recorded on the device with its reason', async () => {
    const dead = spawnSync('sh', ['-c', 'echo $$']).stdout.toString().trim();
    const lock = profileFile('stale', 'apply.lock');
    mkdirSync(lock, { recursive: true });
    writeFileSync(
      join(lock, 'owner'),
      'rollout=rollout:old2\nrun=old2-run\nactivity=3\nattempt=1\nrevision=4\nstep=apply\ntaken=2024-01-01T00:00:00.000Z\n',
    );
    writeFileSync(join(lock, 'launched'), '');
    writeFileSync(join(lock, 'pid'), `${dead}\n`);
    // The new unit's own release replaces last-apply at its end, so its verify-first copies the record
    // the break left there (and fails, so the unit goes on to its failing apply and stops).
    const check: RevisionSteps = {
      profile: 'lock',
      revision: 4,
      apply: 'exit 9',
      verify: `cp "$HOME/.wavegate/profiles/lock/last-apply/released" "$HOME/break-record" && false`,
      payload: [],
    };
    await failure(applyToDevice(target('stale'), check, { commandTimeoutMs: 20_000, holder: unit('rollout:new2', 1) }));
    expect(readFileSync(join(fleet.device('stale').sandbox, 'break-record'), 'utf8')).toMatch(
      new RegExp(
        `^stale, broken by rollout:new2 activity 7 attempt 1: its pid ${dead} is not running and wrote no outcome$`,
        'm',
      ),
    );
  });

  it("another rollout's finished apply holds the lock until Temporal says its run is closed; then the lock is broken", async () => {
    const lock = profileFile('finished', 'apply.lock');
    mkdirSync(lock, { recursive: true });
    writeFileSync(
      join(lock, 'owner'),
      'rollout=rollout:done\nrun=done-run\nactivity=4\nattempt=1\nrevision=3\nstep=apply\ntaken=2024-01-01T00:00:00.000Z\n',
    );
    writeFileSync(join(lock, 'launched'), '');
    writeFileSync(join(lock, 'exitcode'), '0\n');
    writeFileSync(join(lock, 'out'), 'done\n');

    const asked: ApplyHolder[] = [];
    const held = await failure(
      applyToDevice(target('finished'), steps(0), {
        commandTimeoutMs: 20_000,
        holder: unit('rollout:next', 1),
        holderClosed: async (h) => {
          asked.push(h);
          return false;
        },
      }),
    );
    expect(held.name).toBe('ApplyLockHeld');
    expect(held.message).toContain('its apply of r3 ended with exit 0');
    expect(asked).toEqual([{ rollout: 'rollout:done', run: 'done-run', activity: '4', attempt: 1 }]);
    expect(runs('finished')).toBe(0);

    const result = await applyToDevice(target('finished'), steps(0), {
      commandTimeoutMs: 20_000,
      holder: unit('rollout:next', 2),
      holderClosed: async () => true,
    });
    expect(result.outcome).toBe('applied');
    expect(runs('finished')).toBe(1);
  });

  it("a failing apply's exit code and output tail are recorded on the device and the lock is released", async () => {
    const failing: RevisionSteps = {
      profile: 'lock',
      revision: 5,
      apply: 'echo run >> "$HOME/apply-runs"; echo "disk full" >&2; exit 3',
      verify: 'false',
      payload: [],
    };
    const err = await failure(
      applyToDevice(target('failing'), failing, { commandTimeoutMs: 20_000, holder: unit('rollout:f', 1) }),
    );
    expect(err.name).toBe('StepFailed');
    expect(err.message).toBe('failing: apply exited 3: disk full');
    expect(readFileSync(profileFile('failing', 'last-apply/exitcode'), 'utf8').trim()).toBe('3');
    expect(readFileSync(profileFile('failing', 'last-apply/released'), 'utf8').trim()).toBe('apply exited 3');
    expect(existsSync(profileFile('failing', 'apply.lock'))).toBe(false);
    // A retry of a unit that said no is not made (non-retryable); a new unit may try again.
    await failure(
      applyToDevice(target('failing'), failing, { commandTimeoutMs: 20_000, holder: unit('rollout:f2', 1) }),
    );
    expect(runs('failing')).toBe(2);
  });
});
