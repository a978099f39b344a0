import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { MockActivityEnvironment } from '@temporalio/testing';
import type { Logger } from '@temporalio/common';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createActivities } from '../../activities';
import type { ApplyResult } from '../../device/steps';
import { QUIET_START_MS, quietStartHeartbeat } from '../../activities/quiet-heartbeat';
import type { DeviceSnapshot } from '../../core/rollout-state';
import { startFleet, type Fleet, type SimDevice } from '../../sim';
import { scratchDir } from '../support/harness';

/**
 * A device apply's heartbeat stays quiet for its first seconds (activities/quiet-heartbeat.ts): an
 * apply that ends quickly costs the server no heartbeat write, and a long one still heartbeats well
 * inside its heartbeat timeout, with the step it is in.
 */
describe('quiet-start heartbeat', () => {
  const scratch = scratchDir('quiet-heartbeat');
  let fleet: Fleet;
  const quiet: Logger = { log() {}, trace() {}, debug() {}, info() {}, warn() {}, error() {} };
  const device = (d: SimDevice): DeviceSnapshot => ({
    id: d.id,
    host: d.host,
    port: d.port,
    user: fleet.user,
    pool: 'p',
    class: 'c',
    updateClass: 'required',
    os: 'linux',
    current: null,
    reachable: true,
    ssh: { hostKey: d.hostKeyFingerprint, key: fleet.clientKeyPath },
  });
  const steps = (apply: string) => ({
    profile: 'quiet',
    revision: 2,
    apply,
    verify: 'test -f "$HOME/applied"',
    payload: [],
  });

  beforeAll(async () => {
    mkdirSync(join(scratch.dir, 'profiles'), { recursive: true });
    fleet = await startFleet({ devices: ['quick', 'slow'].map((id) => ({ id })), dir: join(scratch.dir, 'fleet') });
  });
  afterAll(async () => {
    await fleet?.stop();
    scratch.cleanup();
  });

  /** Runs the real applyRevision activity with a 6 s heartbeat timeout; the heartbeats it sent, with when. */
  async function applyRecordingBeats(d: SimDevice, apply: string) {
    const env = new MockActivityEnvironment({ heartbeatTimeoutMs: 6_000 }, { logger: quiet });
    const beats: { at: number; detail: unknown }[] = [];
    const started = Date.now();
    env.on('heartbeat', (detail: unknown) => beats.push({ at: Date.now() - started, detail }));
    const acts = createActivities({ allowUnsigned: true, profilesRoot: join(scratch.dir, 'profiles') });
    const result: ApplyResult = await env.run(acts.applyRevision, {
      device: device(d),
      steps: steps(apply),
      commandTimeoutMs: 20_000,
    });
    return { result, beats };
  }

  it('an apply that ends within the quiet start sends no heartbeat at all', async () => {
    const { result, beats } = await applyRecordingBeats(fleet.device('quick'), 'touch "$HOME/applied"');
    expect(result.outcome).toBe('applied');
    expect(beats).toEqual([]);
  });

  it('a longer apply heartbeats after the quiet start, inside its heartbeat timeout, naming its step', async () => {
    const { result, beats } = await applyRecordingBeats(fleet.device('slow'), 'sleep 3.5 && touch "$HOME/applied"');
    expect(result.outcome).toBe('applied');
    expect(beats.length).toBeGreaterThan(0);
    expect(beats[0]!.at).toBeGreaterThanOrEqual(QUIET_START_MS);
    expect(beats[0]!.at).toBeLessThan(6_000 / 2);
    expect(String(beats[0]!.detail)).toMatch(/apply/);
  });

  it('the quiet start is a third of a short heartbeat timeout, and no heartbeat timeout means the default', () => {
    let clock = 0;
    const sent: unknown[] = [];
    const beat = quietStartHeartbeat(
      { heartbeat: (d) => sent.push(d), info: { heartbeatTimeoutMs: 900 } as never },
      () => clock,
    );
    clock = 299;
    beat('early');
    clock = 300;
    beat('on time');
    expect(sent).toEqual(['on time']);
    const sentDefault: unknown[] = [];
    clock = 0;
    const beatDefault = quietStartHeartbeat({ heartbeat: (d) => sentDefault.push(d), info: {} as never }, () => clock);
    clock = QUIET_START_MS - 1;
    beatDefault('early');
    clock = QUIET_START_MS;
    beatDefault('on time');
    expect(sentDefault).toEqual(['on time']);
  });
});
