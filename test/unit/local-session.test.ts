import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { formatFloor } from '../../core/floor';
import type { DeviceTarget } from '../../core/rollout-state';
import { applyToDevice, EnvelopeRejected, type ApplyHolder, type RevisionSteps } from '../../device/steps';
import { TransportError } from '../../device/transport';
import { localDeviceSession } from '../../device/transport/local';
import { scratchDir } from '../support/harness';
import { until } from '../support/until';

/**
 * The agent's LOCAL DeviceSession (device/transport/local.ts) under the real applyToDevice: the same
 * marker, floor and apply-lock files as the SSH path, in the device home it is given. Every apply counts
 * its runs in `$HOME/apply-runs`: that file says how often it really ran.
 */
describe('LocalSession: applyToDevice on the device itself', () => {
  const scratch = scratchDir('local-session');
  afterAll(() => scratch.cleanup());
  let n = 0;

  const device = () => {
    const home = join(scratch.dir, `home-${++n}`);
    const profiles = join(scratch.dir, `profiles-${n}`);
    mkdirSync(home, { recursive: true });
    mkdirSync(profiles, { recursive: true });
    const target: DeviceTarget = {
      id: `dev-${n}`,
      host: '',
      port: 0,
      user: '',
      pool: 'p',
      class: 'agent',
    } as DeviceTarget;
    const connect = async () => localDeviceSession(target.id, home);
    const runs = () =>
      existsSync(join(home, 'apply-runs'))
        ? readFileSync(join(home, 'apply-runs'), 'utf8').split('\n').filter(Boolean).length
        : 0;
    return { home, profiles, target, connect, runs };
  };
  const steps = (seconds: number, revision = 3): RevisionSteps => ({
    profile: 'lock',
    revision,
    apply: `echo run >> "$HOME/apply-runs" && sleep ${seconds} && touch "$HOME/applied-r${revision}"`,
    verify: `test -f "$HOME/applied-r${revision}"`,
    payload: [],
  });
  const unit = (attempt: number): ApplyHolder => ({ rollout: 'rollout:a', run: 'run-1', activity: '7', attempt });

  it('applies once: the apply runs under HOME = the device home, the marker is written, a second apply is already-applied', async () => {
    const d = device();
    const first = await applyToDevice(d.target, steps(0), {
      commandTimeoutMs: 10_000,
      profilesRoot: d.profiles,
      connect: d.connect,
      holder: unit(1),
    });
    expect(first.outcome).toBe('applied');
    expect(first.steps).toEqual(['verify', 'apply', 'verify', 'marker']);
    expect(readFileSync(join(d.home, '.wavegate/profiles/lock/revision'), 'utf8').trim()).toBe('3');
    expect(readFileSync(join(d.home, '.wavegate/profiles/lock/last-apply/released'), 'utf8')).toContain('done');
    const again = await applyToDevice(d.target, steps(0), {
      commandTimeoutMs: 10_000,
      profilesRoot: d.profiles,
      connect: d.connect,
      holder: { ...unit(1), activity: '8' },
    });
    expect(again.outcome).toBe('already-applied');
    expect(d.runs()).toBe(1);
  });

  it('a session closed mid-apply: the apply keeps running detached, and the retry of the same unit reattaches to it (one run)', async () => {
    const d = device();
    const abort = new AbortController();
    const first = applyToDevice(d.target, steps(2), {
      commandTimeoutMs: 10_000,
      profilesRoot: d.profiles,
      connect: d.connect,
      holder: unit(1),
      heartbeatIntervalMs: 100,
      signal: abort.signal,
    });
    // Closed once the apply has started on the device (it records its run first).
    const watch = setInterval(() => d.runs() > 0 && abort.abort(), 50);
    await expect(first).rejects.toBeInstanceOf(TransportError);
    clearInterval(watch);
    expect(existsSync(join(d.home, '.wavegate/profiles/lock/apply.lock/launched'))).toBe(true);
    const retry = await applyToDevice(d.target, steps(2), {
      commandTimeoutMs: 10_000,
      profilesRoot: d.profiles,
      connect: d.connect,
      holder: unit(2),
      heartbeatIntervalMs: 100,
    });
    expect(retry.outcome).toBe('applied');
    expect(retry.steps[0]).toBe('reattach');
    expect(d.runs()).toBe(1);
  });

  it('stages payload files into the staging directory, checked by digest, for the apply to read', async () => {
    const d = device();
    const body = Buffer.from('hello agent\n');
    mkdirSync(join(d.profiles, 'lock', 'payload'), { recursive: true });
    writeFileSync(join(d.profiles, 'lock', 'payload', 'app.conf'), body);
    const sha256 = createHash('sha256').update(body).digest('hex');
    const result = await applyToDevice(
      d.target,
      {
        ...steps(0, 4),
        apply: 'cp "$WAVEGATE_STAGING/app.conf" "$HOME/app.conf" && touch "$HOME/applied-r4"',
        payload: [{ name: 'app.conf', sha256, size: body.length, source: 'payload/app.conf' }],
      },
      { commandTimeoutMs: 10_000, profilesRoot: d.profiles, connect: d.connect },
    );
    expect(result.steps).toContain('stage');
    expect(readFileSync(join(d.home, 'app.conf'), 'utf8')).toBe('hello agent\n');
  });

  it("refuses below the floor written in the device home (the SSH path's floor file), running nothing", async () => {
    const d = device();
    mkdirSync(join(d.home, '.wavegate/profiles/lock'), { recursive: true });
    writeFileSync(
      join(d.home, '.wavegate/profiles/lock/floor'),
      formatFloor({ revision: 5, from: 4, revertUntil: 0, rollout: 'rollout:done' }),
    );
    const refused = applyToDevice(d.target, steps(0), {
      commandTimeoutMs: 10_000,
      profilesRoot: d.profiles,
      connect: d.connect,
    });
    await expect(refused).rejects.toBeInstanceOf(EnvelopeRejected);
    await expect(refused).rejects.toThrow(/BELOW_FLOOR/);
    expect(d.runs()).toBe(0);
  });

  it('the agent process killed (SIGKILL) mid-command: the command is hung up, as sshd does to a dropped session', async () => {
    const d = device();
    const script = join(d.home, '..', `exec-${n}.cjs`);
    writeFileSync(
      script,
      `require(${JSON.stringify(require.resolve('tsx/cjs'))});
const { localDeviceSession } = require(${JSON.stringify(join(__dirname, '../../device/transport/local.ts'))});
localDeviceSession('d', ${JSON.stringify(d.home)}).exec('echo started > "$HOME/started"; sleep 2; echo after > "$HOME/after"', { timeoutMs: 20000 });`,
    );
    const child = spawn(process.execPath, [script], { stdio: 'ignore' });
    await until('the command running', async () => (existsSync(join(d.home, 'started')) ? true : undefined), 30_000);
    child.kill('SIGKILL');
    await new Promise((r) => setTimeout(r, 3_500));
    expect(existsSync(join(d.home, 'after'))).toBe(false);
  }, 60_000);

  it('exec: a non-zero exit is a result; a command past its timeout is killed with its process group', async () => {
    const d = device();
    const session = localDeviceSession(d.target.id, d.home);
    try {
      const res = await session.exec('echo "$HOME"; echo oops >&2; exit 3');
      expect(res).toEqual({ code: 3, stdout: `${d.home}\n`, stderr: 'oops\n' });
      await expect(session.exec('sleep 5 & wait', { timeoutMs: 300 })).rejects.toThrow(/timed out/);
      expect((await session.exec('cat', { stdin: Buffer.from('streamed\n') })).stdout).toBe('streamed\n');
      expect((await session.exec('cat')).stdout).toBe('');
    } finally {
      session.close();
    }
  });
});
