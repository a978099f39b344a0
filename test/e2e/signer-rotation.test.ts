import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { ChildProcess } from 'node:child_process';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Revision } from '../../core/revision';
import { signRotationDocument } from '../../core/rotation';
import { keyPairFromSeed, pinOf, signRevision, type Envelope, type KeyPair } from '../../core/signing';
import type { ProfileReport } from '../../core/twin';
import { desireOnTwin, readTwin } from '../../clients/twin';
import { startDevServerEnv } from '../../workers/dev-server';
import { scratchDir, startTestWorker } from '../support/harness';
import { runCli, spawnCliUntil, stopChild } from '../support/cli';
import { writeKeyFile } from '../support/key-file';
import { until } from '../support/until';
import { twinAnswer } from '../support/twin-answer';
import { desiredRequestOf } from '../../device/twin/apply';

/**
 * A signer key rotated on the signed schedule (issue 45 item 4, kind signer), end to end: a real dev server with the
 * twin on a real worker, a real `wavegate gateway` serving the profile's trust roots from the profiles root the CLI
 * publishes into, and two real `wavegate agent`s pinned to the profile's trust.yaml. Signer B is replaced by D: the
 * overlap root (A, B, D) is published while dev-b is stopped; `rotation status` shows dev-b not active, and publishing
 * the root that drops B is refused naming it; restarted, dev-b takes the overlap root, the retire goes ahead, and
 * the agents take the dropping root: a revision signed by B is then refused, one signed by D applies.
 */
const seed = (): KeyPair => keyPairFromSeed(randomBytes(32));
const PROFILE = 'sr';

describe('a signer key rotated on a schedule: overlap, per-device state, a retire gated on every agent', () => {
  const scratch = scratchDir('signer-rotation');
  let env: TestWorkflowEnvironment;
  let worker: Awaited<ReturnType<typeof startTestWorker>>;
  let gateway: { child: ChildProcess; output: () => string } | undefined;
  const agents = new Map<string, { child: ChildProcess; output: () => string }>();
  const [A, B, D] = [seed(), seed(), seed()];
  const home = (d: string) => join(scratch.dir, 'homes', d);
  const stateDir = (d: string) => join(scratch.dir, 'state', d);
  const profiles = join(scratch.dir, 'profiles');
  const devicePins = join(scratch.dir, 'device-pins');
  const inventory = join(scratch.dir, 'inventory.yaml');
  const layout = join(profiles, PROFILE);
  const schedulePath = join(scratch.dir, 'signer-rotation.json');
  const keyFile = (name: string, k: KeyPair) => writeKeyFile(join(scratch.dir, `${name}.key`), k);
  let url = '';

  const revision = (n: number): Revision => ({
    profile: PROFILE,
    revision: n,
    apply: `touch "$HOME/${PROFILE}-r${n}"`,
    verify: `test -f "$HOME/${PROFILE}-r${n}"`,
    payload: [],
    risk: 'risky',
  });
  const signed = (n: number, by: KeyPair): Envelope => signRevision(revision(n), by, { now: Date.now() });
  let counter = 0;
  const desire = async (device: string, n: number, envelope: Envelope): Promise<string> => {
    const holder = { rollout: `rollout:${PROFILE}`, run: `run-${++counter}`, activity: `${counter}`, attempt: 1 };
    const steps = { profile: PROFILE, revision: n, apply: '(signed)', verify: '(signed)', payload: [], envelope };
    const request = desiredRequestOf(steps, holder, holder.rollout, null);
    await desireOnTwin(env.client, worker.taskQueue, device, request);
    return request.requestId;
  };
  const answer = (device: string, requestId: string): Promise<ProfileReport> =>
    twinAnswer(env.client, device, PROFILE, requestId, 90_000);
  const heldRoot = (device: string, version: number) =>
    until(`${device} holding root v${version}`, async () =>
      (await readTwin(env.client, device))?.report?.trust?.[PROFILE]?.root === version ? true : undefined,
    );
  const temporal = () => ['--address', env.address, '--namespace', env.namespace ?? 'default'];
  const cli = (args: string[]) => runCli([...args, '--profiles', profiles], { timeoutMs: 90_000 });
  /** The next root's draft: `pins` at threshold 1, signed by A (in both the current root and the next). */
  const draft = async (name: string, pins: KeyPair[]) => {
    const next = join(scratch.dir, `${name}.trust.json`);
    writeFileSync(next, JSON.stringify({ threshold: 1, pins: pins.map((k) => pinOf(k)) }));
    const out = join(scratch.dir, `${name}.json`);
    const run = await cli([
      'trust',
      'rotate',
      '--profile',
      PROFILE,
      '--trust',
      next,
      '--key',
      keyFile('a', A),
      '--out',
      out,
    ]);
    expect(run.code, run.stderr).toBe(0);
    return out;
  };
  const startAgent = async (device: string) => {
    const started = await spawnCliUntil(
      [
        'agent',
        '--device-id',
        device,
        '--gateway',
        url,
        '--trust',
        devicePins,
        '--state-dir',
        stateDir(device),
        '--key',
        join(stateDir(device), 'identity.key'),
        '--home',
        home(device),
      ],
      /syncing with the gateway/,
    );
    agents.set(device, started);
  };

  beforeAll(async () => {
    env = await startDevServerEnv();
    worker = await startTestWorker(env);
    const devices = [];
    for (const d of ['dev-a', 'dev-b']) {
      mkdirSync(home(d), { recursive: true });
      const run = await runCli(['agent', 'enroll', '--state-dir', stateDir(d)]);
      expect(run.code, run.stderr).toBe(0);
      devices.push({ id: d, pool: 'p', transport: 'agent', agentKey: run.stdout.trim() });
    }
    writeFileSync(inventory, JSON.stringify({ pools: { p: {} }, devices }));
    const v0 = JSON.stringify({ threshold: 1, pins: [pinOf(A), pinOf(B)] });
    for (const dir of [join(devicePins, PROFILE), layout]) {
      mkdirSync(dir, { recursive: true });
      writeFileSync(join(dir, 'trust.yaml'), v0);
    }
    // The schedule, signed by A under trust.yaml: B goes, D comes; every instant passed, every device required.
    const past = new Date(Date.now() - 60_000).toISOString();
    const schedule = signRotationDocument(
      {
        type: 'wavegate/rotation',
        id: 'signer-b-to-d',
        kind: 'signer',
        authority: PROFILE,
        old: B.kid,
        new: D.kid,
        publish: past,
        activate: past,
        retire: past,
        required: 'all',
      },
      A,
      Date.now(),
    );
    writeFileSync(schedulePath, JSON.stringify(schedule));
    gateway = await spawnCliUntil(
      [
        'gateway',
        '--listen',
        '127.0.0.1:0',
        '--inventory',
        inventory,
        '--profiles',
        profiles,
        ...temporal(),
        '--task-queue',
        worker.taskQueue,
      ],
      /gateway listening on (http:\/\/\S+)/,
    );
    url = /gateway listening on (http:\/\/\S+)/.exec(gateway.output())![1]!;
    for (const d of ['dev-a', 'dev-b']) await startAgent(d);
    for (const d of ['dev-a', 'dev-b'])
      expect(await answer(d, await desire(d, 1, signed(1, A)))).toMatchObject({ state: 'applied', revision: 1 });
  }, 300_000);

  afterAll(async () => {
    for (const { child } of agents.values()) await stopChild(child);
    if (gateway) await stopChild(gateway.child);
    await worker?.stop();
    await env?.teardown();
    scratch.cleanup();
  });

  it('the retire waits for the stopped agent, then goes ahead; B is refused and D applies after it', async () => {
    await stopChild(agents.get('dev-b')!.child);
    // Publish: the overlap root pins A, B and D. dev-a takes it with the next desired entry; both keys verify.
    const overlap = await draft('overlap', [A, B, D]);
    const published = await cli(['trust', 'publish', overlap, '--profile', PROFILE]);
    expect(published.code, published.stderr).toBe(0);
    expect(await answer('dev-a', await desire('dev-a', 2, signed(2, D)))).toMatchObject({ state: 'applied' });
    expect(await answer('dev-a', await desire('dev-a', 3, signed(3, B)))).toMatchObject({ state: 'applied' });
    await heldRoot('dev-a', 1);

    const status = await cli(['rotation', 'status', schedulePath, '--inventory', inventory, ...temporal()]);
    expect(status.code, status.stderr).toBe(0);
    expect(status.stdout).toContain(`trust roots of ${PROFILE}: v1 pins the new signer`);
    expect(status.stdout).toMatch(/dev-a: active \(required\)/);
    expect(status.stdout).toMatch(/dev-b: missed \(required\): its agent holds trust root v0 of sr .*not v1 or later/);
    expect(status.stdout).toContain('1 device(s) still on a root without the new signer');

    // Retire: the root dropping B is refused while dev-b holds v0, naming it; nothing written.
    const drop = await draft('drop', [A, D]);
    const publish = ['trust', 'publish', drop, '--profile', PROFILE, '--rotation', schedulePath];
    const refused = await cli([...publish, '--inventory', inventory, ...temporal()]);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toMatch(
      /retire refused: 1 required device\(s\) not active on the new key: dev-b \(missed\)/,
    );
    expect(existsSync(join(layout, 'root', '2.json'))).toBe(false);

    // dev-b comes back and takes the overlap root at its first sync: now the retire goes ahead.
    await startAgent('dev-b');
    await heldRoot('dev-b', 1);
    const retired = await cli([...publish, '--inventory', inventory, ...temporal()]);
    expect(retired.code, retired.stderr).toBe(0);
    expect(existsSync(join(layout, 'root', '2.json'))).toBe(true);
    const state = JSON.parse(readFileSync(join(scratch.dir, '.wavegate-rotations', 'signer-b-to-d.json'), 'utf8'));
    expect(state.retire).toMatchObject({ forced: false, notActive: [] });

    // After the retire: a revision signed by B alone is refused, one signed by D applies, on both agents.
    for (const d of ['dev-a', 'dev-b']) {
      const byOld = await answer(d, await desire(d, 4, signed(4, B)));
      expect(byOld.state, d).toBe('refused');
      expect(byOld.reason, d).toMatch(/UNPINNED_KEY|BELOW_THRESHOLD/);
      expect(await answer(d, await desire(d, 4, signed(4, D)))).toMatchObject({ state: 'applied', revision: 4 });
      await heldRoot(d, 2);
    }
    const after = await cli(['rotation', 'status', schedulePath, '--inventory', inventory, ...temporal()]);
    expect(after.stdout).toContain('v2 drops the old one');
    expect(after.stdout).toContain('0 device(s) still on a root without the new signer');
  }, 360_000);
});
