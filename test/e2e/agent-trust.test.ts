import { randomBytes } from 'node:crypto';
import { copyFileSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import type { ChildProcess } from 'node:child_process';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { HeldVersions } from '../../core/held-trust';
import { REVOCATIONS_TYPE } from '../../core/revocation';
import type { Revision } from '../../core/revision';
import { signDocument } from '../../core/signed-document';
import { cosignEnvelope, keyPairFromSeed, pinOf, signRevision, type Envelope, type KeyPair } from '../../core/signing';
import { timestampContent } from '../../core/timestamp';
import { ROOT_TYPE } from '../../core/trust-root';
import { envelopeDigestOf, requestIdOf, type DesiredRequest, type ProfileReport } from '../../core/twin';
import { desireOnTwin, readTwin } from '../../clients/twin';
import { agentBoardAnswer } from '../../device/twin/board';
import { startDevServerEnv } from '../../workers/dev-server';
import { scratchDir, startTestWorker } from '../support/harness';
import { runCli, spawnCliUntil, stopChild } from '../support/cli';
import { writeKeyFile } from '../support/key-file';
import { until } from '../support/until';
import { twinAnswer } from '../support/twin-answer';
import { desiredRequestOf } from '../../device/twin/apply';

/**
 * Trust that reaches agents on the pull path (issue 45 items 1-3), end to end: a real dev server with the twin on a
 * real worker, a real `wavegate gateway` serving the profile's trust root, revocation list and (with
 * --timestamp-key) each device's timestamps from its profiles root, and a real `wavegate agent` pinned only to
 * the profile's trust.yaml (version 0). Desired entries are signalled to the twin as a rollout's apply would.
 * Then an attacker's gateway (a plain HTTP server here, answering whatever it is told) feeds a second real agent
 * forged roots, lists and timestamps: each is refused and named, and what the agent held stays.
 */
const seed = (): KeyPair => keyPairFromSeed(randomBytes(32));
const PROFILE = 'tp';

describe('agents learn trust roots, revocations and freshness through the gateway', () => {
  const scratch = scratchDir('agent-trust');
  let env: TestWorkflowEnvironment;
  let worker: Awaited<ReturnType<typeof startTestWorker>>;
  let gateway: { child: ChildProcess; output: () => string } | undefined;
  let gatewayPort = 0;
  const agents = new Map<string, { child: ChildProcess; output: () => string }>();
  // trust.yaml (v0): 2 of A, B, C. Root v1: the same, with a timestamp role T. Root v2: B replaced by D.
  const [A, B, C, D, T] = [seed(), seed(), seed(), seed(), seed()];
  const home = (d: string) => join(scratch.dir, 'homes', d);
  const stateDir = (d: string) => join(scratch.dir, 'state', d);
  const gatewayProfiles = join(scratch.dir, 'gateway-profiles');
  const devicePins = join(scratch.dir, 'device-pins');
  const tsKey = join(scratch.dir, 'timestamp.key');
  const inventory = join(scratch.dir, 'inventory.yaml');
  const layout = join(gatewayProfiles, PROFILE);

  const root = (version: number, pins: KeyPair[], signers: KeyPair[], removes: KeyPair[] = []) =>
    signDocument(
      {
        type: ROOT_TYPE,
        profile: PROFILE,
        version,
        threshold: 2,
        pins: pins.map((k) => pinOf(k)),
        timestamp: { threshold: 1, pins: [pinOf(T)] },
        issuedAt: new Date().toISOString(),
        ...(removes.length ? { removes: removes.map((k) => k.kid) } : {}),
      },
      signers,
    );
  const v1 = root(1, [A, B, C], [A, B]);
  const v2 = root(2, [A, C, D], [A, C, D], [B]);
  const list = (version: number, revisions: number[], keys: KeyPair[] = []) =>
    signDocument(
      {
        type: REVOCATIONS_TYPE,
        profile: PROFILE,
        version,
        revisions: revisions.map((revision) => ({ revision, reason: 'bad release' })),
        keys: keys.map((k) => ({ kid: k.kid, reason: 'key lost' })),
        issuedAt: new Date().toISOString(),
      },
      [A, C],
    );
  const stamp = (device: string, root: number, revocations: number, now = Date.now()) =>
    signDocument(
      timestampContent({ device, profile: PROFILE, root, revocations, desired: null, now, expiryMs: 3_600_000 }),
      [T],
    );

  /** A revision whose apply makes `$HOME/tp-r<n>` (its verify reads it back) and records its run in `$HOME/apply-runs`. */
  const revision = (n: number): Revision => ({
    profile: PROFILE,
    revision: n,
    apply: `touch "$HOME/${PROFILE}-r${n}" && echo "${PROFILE} r${n}" >> "$HOME/apply-runs"`,
    verify: `test -f "$HOME/${PROFILE}-r${n}"`,
    payload: [],
    risk: 'risky',
  });
  const signed = (n: number, signers: KeyPair[]): Envelope =>
    signers
      .slice(1)
      .reduce((e, k) => cosignEnvelope(e, k), signRevision(revision(n), signers[0]!, { now: Date.now() }));
  const runs = (d: string) =>
    existsSync(join(home(d), 'apply-runs'))
      ? readFileSync(join(home(d), 'apply-runs'), 'utf8')
          .split('\n')
          .filter(Boolean)
      : [];

  let counter = 0;
  const desire = async (device: string, n: number, envelope: Envelope): Promise<string> => {
    const holder = { rollout: `rollout:${PROFILE}`, run: `run-${++counter}`, activity: `${counter}`, attempt: 1 };
    const steps = { profile: PROFILE, revision: n, apply: '(signed)', verify: '(signed)', payload: [], envelope };
    const request = desiredRequestOf(steps, holder, holder.rollout, null);
    await desireOnTwin(env.client, worker.taskQueue, device, request);
    return request.requestId;
  };
  const answer = (device: string, requestId: string, timeoutMs = 90_000): Promise<ProfileReport> =>
    twinAnswer(env.client, device, PROFILE, requestId, timeoutMs);
  const trustOf = async (device: string) => (await readTwin(env.client, device))?.report?.trust?.[PROFILE];

  const startGateway = async (withTimestamps: boolean) => {
    gateway = await spawnCliUntil(
      [
        'gateway',
        '--listen',
        `127.0.0.1:${gatewayPort}`,
        '--inventory',
        inventory,
        '--profiles',
        gatewayProfiles,
        '--address',
        env.address,
        '--namespace',
        env.namespace ?? 'default',
        '--task-queue',
        worker.taskQueue,
        ...(withTimestamps ? ['--timestamp-key', tsKey, '--timestamp-expiry', '4s'] : []),
      ],
      /gateway listening on (http:\/\/\S+)/,
    );
    gatewayPort = Number(/gateway listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(gateway.output())![1]);
    // The secret never shows: the gateway names its key by kid only.
    if (withTimestamps) {
      expect(gateway.output()).toContain(`timestamps: signed with ${T.kid}, valid 4s`);
      expect(gateway.output()).not.toContain(JSON.parse(readFileSync(tsKey, 'utf8')).secretKey);
    }
  };
  const enroll = async (d: string) => {
    mkdirSync(home(d), { recursive: true });
    const run = await runCli(['agent', 'enroll', '--state-dir', stateDir(d)]);
    expect(run.code, run.stderr).toBe(0);
    return run.stdout.trim();
  };
  const agentArgs = (device: string, url: string) => [
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
  ];
  const startAgent = async (device: string, url: string) => {
    const started = await spawnCliUntil(agentArgs(device, url), /syncing with the gateway/);
    agents.set(device, started);
    return started;
  };

  beforeAll(async () => {
    env = await startDevServerEnv();
    worker = await startTestWorker(env);
    const pin = await enroll('dev-a');
    writeFileSync(
      inventory,
      JSON.stringify({ pools: { p: {} }, devices: [{ id: 'dev-a', pool: 'p', transport: 'agent', agentKey: pin }] }),
    );
    const v0 = JSON.stringify({ threshold: 2, pins: [pinOf(A), pinOf(B), pinOf(C)] });
    for (const dir of [join(devicePins, PROFILE), layout]) {
      mkdirSync(dir, { recursive: true });
      writeFileSync(join(dir, 'trust.yaml'), v0);
    }
    mkdirSync(join(layout, 'root'), { recursive: true });
    writeFileSync(join(layout, 'root', '1.json'), JSON.stringify(v1));
    writeKeyFile(tsKey, T);
    await startGateway(true);
    await startAgent('dev-a', `http://127.0.0.1:${gatewayPort}`);
  }, 300_000);

  afterAll(async () => {
    for (const { child } of agents.values()) await stopChild(child);
    if (gateway) await stopChild(gateway.child);
    await worker?.stop();
    await env?.teardown();
    scratch.cleanup();
  });

  it('root v1 (with a timestamp role) comes with the first desired entry: taken, the entry vouched for by a fresh timestamp applies', async () => {
    const report = await answer('dev-a', await desire('dev-a', 2, signed(2, [A, B])));
    expect(report).toMatchObject({ state: 'applied', revision: 2 });
    expect(await trustOf('dev-a')).toEqual({ root: 1, revocations: 0 });
    expect(agents.get('dev-a')!.output()).toContain(`${PROFILE}: trust root v1 taken (held v0)`);
    const kept = JSON.parse(readFileSync(join(stateDir('dev-a'), 'trust', `${PROFILE}.json`), 'utf8'));
    expect(kept.root).toEqual(v1);
    expect(kept.timestamp).not.toBeNull();
  }, 180_000);

  it('a root rotation replacing signer B by D reaches the running agent within one sync: B and C are refused, A and D apply', async () => {
    writeFileSync(join(layout, 'root', '2.json'), JSON.stringify(v2));
    // Desired at once: the sync answer carrying r3 carries v2 too, and the agent takes the root first. Under v1
    // (2 of A, B, C) B and C would make the threshold.
    const refused = await answer('dev-a', await desire('dev-a', 3, signed(3, [B, C])));
    expect(refused).toMatchObject({ state: 'refused', reason: 'BELOW_THRESHOLD', revision: 2 });
    expect(refused.receipt).toBeDefined();
    expect(runs('dev-a')).not.toContain(`${PROFILE} r3`);
    const applied = await answer('dev-a', await desire('dev-a', 3, signed(3, [A, D])));
    expect(applied).toMatchObject({ state: 'applied', revision: 3 });
    expect(await until('root v2 reported', async () => ((await trustOf('dev-a'))?.root === 2 ? true : undefined)));
  }, 180_000);

  it('a revocation reaches the agent within one sync: the revoked revision is refused REVOKED (signed receipt); a revoked key counts no more', async () => {
    writeFileSync(join(layout, 'revocations.json'), JSON.stringify(list(1, [4])));
    const revoked = await answer('dev-a', await desire('dev-a', 4, signed(4, [A, C])));
    expect(revoked).toMatchObject({ state: 'refused', reason: 'REVOKED', revision: 3 });
    expect(revoked.receipt).toBeDefined();
    writeFileSync(join(layout, 'revocations.json'), JSON.stringify(list(2, [4], [C])));
    const byRevokedKey = await answer('dev-a', await desire('dev-a', 5, signed(5, [A, C])));
    expect(byRevokedKey).toMatchObject({ state: 'refused', reason: 'REVOKED_KEY', revision: 3 });
    expect(runs('dev-a').filter((r) => r === `${PROFILE} r4` || r === `${PROFILE} r5`)).toEqual([]);
    expect(
      await until('list v2 reported', async () => ((await trustOf('dev-a'))?.revocations === 2 ? true : undefined)),
    );
  }, 180_000);

  it('with no fresh timestamp (the gateway restarted without its key, 4 s expiry) the agent reports stale and applies nothing new; fresh timestamps bring it back', async () => {
    await stopChild(gateway!.child);
    await startGateway(false);
    const stale = await until('stale reported', async () => (await trustOf('dev-a'))?.stale, 60_000);
    expect(stale).toMatch(/the newest timestamp expired at/);
    // The board says so, with the reason.
    const view = await readTwin(env.client, 'dev-a');
    expect(agentBoardAnswer(view, PROFILE, 6, true, Date.now()).reason).toContain(`stale: ${stale}`);
    const rid = await desire('dev-a', 6, signed(6, [A, D]));
    await until('the entry held back', async () =>
      agents.get('dev-a')!.output().includes(`r6 (request ${rid}) not taken: stale`) ? true : undefined,
    );
    await new Promise((r) => setTimeout(r, 6_000));
    expect(runs('dev-a')).not.toContain(`${PROFILE} r6`);
    expect((await readTwin(env.client, 'dev-a'))?.report?.profiles[PROFILE]?.requestId).not.toBe(rid);
    await stopChild(gateway!.child);
    await startGateway(true);
    expect(await answer('dev-a', rid)).toMatchObject({ state: 'applied', revision: 6 });
    await until('fresh again', async () => {
      const t = await trustOf('dev-a');
      return t && !t.stale ? t : undefined;
    });
    expect(agents.get('dev-a')!.output()).toContain(`${PROFILE}: fresh again`);
  }, 240_000);

  describe("an attacker's gateway: every forged root, list and timestamp refused and named, what was held kept", () => {
    let server: Server;
    let url = '';
    /** The sync bodies the agent sent, and the news the next answer carries. */
    const bodies: {
      held?: Record<string, HeldVersions>;
      report?: { trust?: Record<string, Record<string, unknown>> };
    }[] = [];
    let pending: Record<string, unknown> | undefined;
    let served = -1;
    /** What the attacker's gateway says is desired (a real signed revision, as a replay would carry). */
    let desired: Record<string, unknown> = {};

    beforeAll(async () => {
      await enroll('dev-f');
      server = createServer((req, res) => {
        const chunks: Buffer[] = [];
        req.on('data', (c: Buffer) => chunks.push(c));
        req.on('end', () => {
          const body = JSON.parse(Buffer.concat(chunks).toString('utf8') || '{}');
          const view = { deviceId: 'dev-f', version: 1, desired, report: null, lastSeenAt: null, reverify: false };
          if (req.url !== '/v1/sync') return res.end(JSON.stringify(view));
          bodies.push(body);
          const news = pending;
          pending = undefined;
          if (news) served = bodies.length;
          setTimeout(() => res.end(JSON.stringify({ ...view, ...(news ? { trust: { [PROFILE]: news } } : {}) })), 200);
        });
      });
      await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
      url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
      await startAgent('dev-f', url);
    }, 120_000);
    afterAll(async () => {
      await stopChild(agents.get('dev-f')!.child);
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    });

    /** Offer `news` in the next answer; the report of the sync after it says what the agent made of it. */
    const offer = async (news: Record<string, unknown>, entry?: DesiredRequest) => {
      if (entry) desired = { [PROFILE]: { ...entry, setAt: new Date().toISOString() } };
      pending = news;
      await until('the news served', async () => (pending === undefined ? true : undefined));
      const after = await until('the next sync', async () => (bodies.length > served ? bodies.at(-1) : undefined));
      return {
        trust: after.report?.trust?.[PROFILE],
        held: after.held?.[PROFILE],
        answer: (after.report as { profiles?: Record<string, ProfileReport> } | undefined)?.profiles?.[PROFILE],
      };
    };
    const log = () => agents.get('dev-f')!.output();

    it('takes the real roots and a timestamp, then refuses each forgery by name and keeps what it held', async () => {
      const ok = await offer({ roots: [v1, v2], timestamp: stamp('dev-f', 2, 0) });
      expect(ok.trust).toEqual({ root: 2, revocations: 0 });
      expect(ok.held).toEqual({ root: 2, revocations: 0 });
      const early = join(scratch.dir, 'tp-held-early.json');
      copyFileSync(join(stateDir('dev-f'), 'trust', `${PROFILE}.json`), early);

      // A valid revision desired in the answer that brings a forged root is refused with it (signed), nothing runs.
      const r7 = signed(7, [A, C]);
      const holder = { rollout: 'rollout:forged', run: 'run-f', activity: '7', attempt: 1 };
      const entry: DesiredRequest = {
        requestId: requestIdOf(holder),
        profile: PROFILE,
        revision: 7,
        steps: { profile: PROFILE, revision: 7, apply: '(signed)', verify: '(signed)', payload: [], envelope: r7 },
        envelopeDigest: envelopeDigestOf(r7),
        holder,
        rollout: holder.rollout,
        fromRevision: null,
      };
      const withEntry = await offer({ roots: [root(3, [A, C, D], [A])] }, entry);
      const refusedAnswer = withEntry.answer ?? (await offer({})).answer;
      expect(refusedAnswer).toMatchObject({ state: 'refused', reason: 'BELOW_THRESHOLD', requestId: entry.requestId });
      expect(refusedAnswer?.receipt).toBeDefined();
      expect(runs('dev-f')).toEqual([]);

      const cases: [string, Record<string, unknown>, RegExp][] = [
        ['a root signed below the threshold', { roots: [root(3, [A, C, D], [A])] }, /BELOW_THRESHOLD: trust root v3/],
        ['a lower root version', { roots: [v1] }, /ROOT_ROLLBACK: trust root v1 offered, not above v2/],
        [
          'an endless list of roots',
          { roots: Array.from({ length: 100 }, (_, i) => root(i + 3, [A, C, D], [A, C])) },
          /ROOT_GAP: 100 trust roots offered in one answer, at most 64/,
        ],
      ];
      for (const [what, news, named] of cases) {
        const seen = await offer(news);
        expect(seen.trust?.refused, what).toMatch(named);
        expect(seen.held, what).toEqual({ root: 2, revocations: 0 });
      }
      expect((await offer({ revocations: list(2, []) })).held).toEqual({ root: 2, revocations: 2 });
      const rollback = await offer({ revocations: list(1, [4]) });
      expect(rollback.trust?.refused).toMatch(
        /METADATA_ROLLBACK: revocation list: revocation list v1 is older than v2|METADATA_ROLLBACK: revocation list v1 is older than v2/,
      );
      expect(rollback.held).toEqual({ root: 2, revocations: 2 });
      const other = await offer({ timestamp: stamp('dev-other', 2, 2) });
      expect(other.trust?.refused).toMatch(/WRONG_SUBJECT: timestamp is for dev-other\/tp, not dev-f\/tp/);
      const issued = Date.now();
      expect((await offer({ timestamp: stamp('dev-f', 2, 2, issued) })).trust?.refused).toBeUndefined();
      const replay = await offer({ timestamp: stamp('dev-f', 2, 2, issued - 60_000) });
      expect(replay.trust?.refused).toMatch(/METADATA_ROLLBACK: timestamp issued at .* is older than the one held/);
      for (const line of ['BELOW_THRESHOLD', 'ROOT_ROLLBACK', 'ROOT_GAP', 'METADATA_ROLLBACK', 'WRONG_SUBJECT'])
        expect(log()).toContain(`${PROFILE}: trust news refused: ${line}`);

      // Its state directory holds what it verified: an older copy put back, or a corrupt file, refuses the start.
      await stopChild(agents.get('dev-f')!.child);
      const file = join(stateDir('dev-f'), 'trust', `${PROFILE}.json`);
      copyFileSync(early, file);
      const older = await runCli(agentArgs('dev-f', url), { timeoutMs: 60_000 });
      expect(older.code).toBe(2);
      expect(older.stdout + older.stderr).toMatch(
        /trust\/tp\.json: holds root v2 and revocations v0, but this agent held root v2 and revocations v2 \(report\.json\): it is older than what was verified/,
      );
      writeFileSync(file, '{"profile":');
      const corrupt = await runCli(agentArgs('dev-f', url), { timeoutMs: 60_000 });
      expect(corrupt.code).toBe(2);
      expect(corrupt.stdout + corrupt.stderr).toMatch(/trust\/tp\.json: not JSON; refusing to start/);
    }, 240_000);
  });
});
