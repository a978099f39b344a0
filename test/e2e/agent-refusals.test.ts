import { createHash, randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { ChildProcess } from 'node:child_process';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { authorizationHeader, parseAgentKey } from '../../core/agent-auth';
import { receiptReason } from '../../core/agent-receipt';
import {
  parseReceipt,
  RECEIPT_GENESIS,
  receiptHash,
  receiptNonce,
  receiptSignatureValid,
  type Receipt,
} from '../../core/receipt';
import { toBase64, utf8Encode } from '../../core/bytes';
import { canonicalize } from '../../core/canonical';
import { formatFloor, type FloorExemption } from '../../core/floor';
import type { Revision } from '../../core/revision';
import { cosignEnvelope, keyPairFromSeed, pinOf, signRevision, type Envelope, type KeyPair } from '../../core/signing';
import { envelopeDigestOf, requestIdOf, type DesiredRequest, type ProfileReport, type TwinView } from '../../core/twin';
import { desireOnTwin, readTwin, reverifyTwin } from '../../clients/twin';
import { gatewayClient, GatewayError } from '../../agent/gateway-client';
import { startDevServerEnv } from '../../workers/dev-server';
import { scratchDir, startTestWorker } from '../support/harness';
import { runCli, spawnCliUntil, stopChild } from '../support/cli';
import { until } from '../support/until';
import { makeTestPki } from '../support/tls-proxy';
import { twinAnswer } from '../support/twin-answer';

/**
 * The pull transport's device side end to end: a real dev server with the twin workflow on a real
 * worker, a real `wavegate gateway` process and real `wavegate agent` processes, each with its own
 * state directory and device home. Desired entries are signalled to the twin directly (what the rollout
 * side does), so every refusal here is one a compromised control plane or gateway could try: each
 * leaves the device on its revision and says why in the agent's report. Applies count their runs in
 * `$HOME/apply-runs` on the device.
 */
const DAY = 86_400_000;
const seed = () => keyPairFromSeed(randomBytes(32));

describe('gateway + agent: applies, exactly once, and the refusals', () => {
  const scratch = scratchDir('agent-e2e');
  let env: TestWorkflowEnvironment;
  let worker: Awaited<ReturnType<typeof startTestWorker>>;
  let gateway: { child: ChildProcess; output: () => string };
  let gatewayUrl: string;
  const agents = new Map<string, ChildProcess>();
  const signer: KeyPair = seed(); // pinned on the device
  const second: KeyPair = seed(); // pinned too (threshold 2 profile)
  const stranger: KeyPair = seed(); // pinned nowhere
  const devices = ['dev-a', 'dev-b'] as const;
  const identity = new Map<string, { keyFile: string; pin: string; secret: Uint8Array }>();
  const home = (d: string) => join(scratch.dir, 'homes', d);
  const stateDir = (d: string) => join(scratch.dir, 'state', d);
  const gatewayProfiles = join(scratch.dir, 'gateway-profiles');
  const devicePins = join(scratch.dir, 'device-pins');
  const runs = (d: string) =>
    existsSync(join(home(d), 'apply-runs'))
      ? readFileSync(join(home(d), 'apply-runs'), 'utf8')
          .split('\n')
          .filter(Boolean)
      : [];
  const marker = (d: string, profile = 'agentp') => {
    const f = join(home(d), '.wavegate/profiles', profile, 'revision');
    return existsSync(f) ? Number(readFileSync(f, 'utf8').trim()) : null;
  };

  /** A revision of `profile` whose apply records its run, sleeps, and copies the signed payload in place. */
  const revision = (profile: string, n: number, sleepS = 0): Revision => {
    const body = Buffer.from(`rev ${n}\n`);
    mkdirSync(join(gatewayProfiles, profile, 'payload'), { recursive: true });
    writeFileSync(join(gatewayProfiles, profile, 'payload', `app-${n}.conf`), body);
    return {
      profile,
      revision: n,
      apply: `echo "${profile} r${n}" >> "$HOME/apply-runs" && sleep ${sleepS} && cp "$WAVEGATE_STAGING/app-${n}.conf" "$HOME/${profile}.conf"`,
      verify: `grep -qx 'rev ${n}' "$HOME/${profile}.conf"`,
      payload: [
        {
          name: `app-${n}.conf`,
          sha256: createHash('sha256').update(body).digest('hex'),
          size: body.length,
          source: `payload/app-${n}.conf`,
        },
      ],
      risk: 'risky',
      health: { runtimes: [{ name: 'conf-present', command: `test -f "$HOME/${profile}.conf"` }] },
    };
  };
  let counter = 0;
  /** The requests sent (their nonce) and each device's last receipt: its answers' receipts form one chain. */
  const nonces = new Map<string, string>();
  const lastReceipt = new Map<string, Receipt>();
  /** Signal a desired entry for `envelope` (digest computed unless given) and return its requestId. */
  const desire = async (
    device: string,
    profile: string,
    n: number,
    envelope: Envelope,
    over: Partial<DesiredRequest> = {},
  ): Promise<string> => {
    const holder = { rollout: `rollout:${profile}`, run: `run-${++counter}`, activity: `${counter}`, attempt: 1 };
    const request: DesiredRequest = {
      requestId: requestIdOf(holder),
      profile,
      revision: n,
      steps: { profile, revision: n, apply: '(signed)', verify: '(signed)', payload: [], envelope },
      envelopeDigest: envelopeDigestOf(envelope),
      holder,
      rollout: holder.rollout,
      fromRevision: null,
      ...over,
    };
    await desireOnTwin(env.client, worker.taskQueue, device, request);
    nonces.set(request.requestId, receiptNonce({ ...holder, device }));
    return request.requestId;
  };
  /**
   * Every final answer carries the agent's receipt of it, signed by the device's identity key for the request it was
   * sent (its nonce, the digest the twin named), one counter after the device's last, chained to it.
   */
  const checkReceipt = (device: string, report: ProfileReport): Receipt => {
    const parsed = parseReceipt(report.receipt);
    if (!parsed.ok) throw new Error(`${device}: ${report.requestId}: ${parsed.problem}`);
    const { receipt } = parsed;
    expect(receiptSignatureValid(receipt, parseAgentKey(identity.get(device)!.pin)!), device).toBe(true);
    const last = lastReceipt.get(device);
    expect(receipt.fields, `${device}: ${report.requestId}`).toMatchObject({
      device,
      nonce: nonces.get(report.requestId!),
      result: report.state,
      counter: (last?.fields.counter ?? 0) + 1,
      prev: last ? receiptHash(last) : RECEIPT_GENESIS,
    });
    lastReceipt.set(device, receipt);
    return receipt;
  };
  /** The agent's final answer to `requestId`, read from the twin. */
  const answer = (device: string, profile: string, requestId: string, timeoutMs = 120_000): Promise<ProfileReport> =>
    twinAnswer(env.client, device, profile, requestId, timeoutMs).then((r) => {
      checkReceipt(device, r);
      return r;
    });

  const inventory = join(scratch.dir, 'inventory.yaml');
  const writeInventory = (ids: readonly string[]) =>
    writeFileSync(
      inventory,
      JSON.stringify({
        pools: { p: {} },
        devices: ids.map((id) => ({ id, pool: 'p', transport: 'agent', agentKey: identity.get(id)!.pin })),
      }),
    );
  const enroll = async (d: string) => {
    mkdirSync(home(d), { recursive: true });
    const run = await runCli(['agent', 'enroll', '--state-dir', stateDir(d)]);
    expect(run.code, run.stderr).toBe(0);
    const keyFile = join(stateDir(d), 'identity.key');
    identity.set(d, {
      keyFile,
      pin: run.stdout.trim(),
      secret: Uint8Array.from(Buffer.from(JSON.parse(readFileSync(keyFile, 'utf8')).secretKey, 'base64')),
    });
  };

  const startAgent = async (device: string) => {
    const { child } = await spawnCliUntil(
      [
        'agent',
        '--device-id',
        device,
        '--gateway',
        gatewayUrl,
        '--trust',
        devicePins,
        '--state-dir',
        stateDir(device),
        '--key',
        identity.get(device)!.keyFile,
        '--home',
        home(device),
      ],
      /syncing with the gateway/,
    );
    agents.set(device, child);
    return child;
  };

  beforeAll(async () => {
    env = await startDevServerEnv();
    worker = await startTestWorker(env);
    for (const d of devices) await enroll(d);
    // The device's own pins: agentp by `signer` (threshold 1), agentq by signer and second (threshold 2).
    for (const [profile, trust] of [
      ['agentp', { threshold: 1, pins: [pinOf(signer)] }],
      ['agentq', { threshold: 2, pins: [pinOf(signer), pinOf(second)] }],
    ] as const) {
      mkdirSync(join(devicePins, profile), { recursive: true });
      writeFileSync(join(devicePins, profile, 'trust.yaml'), JSON.stringify(trust));
    }
    writeInventory(devices);
    mkdirSync(gatewayProfiles, { recursive: true });
    gateway = await spawnCliUntil(
      [
        'gateway',
        '--listen',
        '127.0.0.1:0',
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
      ],
      /gateway listening on (http:\/\/\S+)/,
    );
    gatewayUrl = /gateway listening on (http:\/\/\S+)/.exec(gateway.output())![1]!;
    await startAgent('dev-a');
  }, 300_000);

  afterAll(async () => {
    for (const child of agents.values()) await stopChild(child);
    if (gateway) await stopChild(gateway.child);
    await worker?.stop();
    await env?.teardown();
    scratch.cleanup();
  });

  it('applies a signed desired revision: payload fetched and checked, the file and marker at the revision, runtime health reported', async () => {
    const rid = await desire('dev-a', 'agentp', 2, signRevision(revision('agentp', 2), signer, { now: Date.now() }));
    const report = await answer('dev-a', 'agentp', rid);
    expect(report).toMatchObject({ state: 'applied', revision: 2 });
    expect(readFileSync(join(home('dev-a'), 'agentp.conf'), 'utf8')).toBe('rev 2\n');
    expect(marker('dev-a')).toBe(2);
    expect(runs('dev-a')).toEqual(['agentp r2']);
    const view = await until('health reported', async () => {
      const v = await readTwin(env.client, 'dev-a');
      return v?.report?.health.some((h) => h.name === 'conf-present' && h.ok) ? v : undefined;
    });
    expect(view.report!.healthAt).not.toBeNull();
    expect(view.lastSeenAt).not.toBeNull();
  }, 180_000);

  it('SIGKILL mid-apply and a restart: the apply ran once, and the restarted agent reports it applied', async () => {
    const rid = await desire('dev-a', 'agentp', 3, signRevision(revision('agentp', 3, 6), signer, { now: Date.now() }));
    await until('the r3 apply running', async () => (runs('dev-a').includes('agentp r3') ? true : undefined));
    const child = agents.get('dev-a')!;
    const gone = new Promise((r) => child.once('exit', r));
    child.kill('SIGKILL');
    await gone;
    await startAgent('dev-a');
    const report = await answer('dev-a', 'agentp', rid);
    expect(report.state).toBe('applied');
    expect(report.steps?.[0]).toBe('reattach');
    expect(runs('dev-a').filter((r) => r === 'agentp r3')).toHaveLength(1);
    expect(marker('dev-a')).toBe(3);
  }, 180_000);

  describe('refusals: the device stays on its revision and the report says why', () => {
    const refused = async (rid: string, reason: string, profile = 'agentp') => {
      const before = runs('dev-a').length;
      const report = await answer('dev-a', profile, rid);
      expect(report).toMatchObject({ state: 'refused', reason, revision: profile === 'agentp' ? 3 : null });
      // The refusal is the device's decision: signed, naming the digest the twin asked for, nothing observed.
      expect(lastReceipt.get('dev-a')!.fields).toMatchObject({ reason: receiptReason(reason), observed: null });
      expect(runs('dev-a')).toHaveLength(before);
      expect(marker('dev-a', profile)).toBe(profile === 'agentp' ? 3 : null);
      return report;
    };

    it('an envelope tampered on the way (body changed, signature kept): BAD_SIGNATURE', async () => {
      const good = signRevision(revision('agentp', 4), signer, { now: Date.now() });
      const evil = {
        ...revision('agentp', 4),
        apply: 'echo pwned >> "$HOME/apply-runs"',
        issuedAt: new Date().toISOString(),
        expiresAt: new Date(Date.now() + DAY).toISOString(),
      };
      const tampered: Envelope = { ...good, body: toBase64(utf8Encode(canonicalize(evil))) };
      await refused(await desire('dev-a', 'agentp', 4, tampered), 'BAD_SIGNATURE');
    }, 180_000);

    it('an envelope other than the one the twin names: DIGEST', async () => {
      const envelope = signRevision(revision('agentp', 4), signer, { now: Date.now() });
      await refused(await desire('dev-a', 'agentp', 4, envelope, { envelopeDigest: 'ab'.repeat(32) }), 'DIGEST');
    }, 180_000);

    it('signed by a key the device does not pin: UNPINNED_KEY', async () => {
      await refused(
        await desire('dev-a', 'agentp', 4, signRevision(revision('agentp', 4), stranger, { now: Date.now() })),
        'UNPINNED_KEY',
      );
    }, 180_000);

    it("under the device's threshold (one of two required signers): BELOW_THRESHOLD; with both it applies", async () => {
      const one = signRevision(revision('agentq', 1), signer, { now: Date.now() });
      await refused(await desire('dev-a', 'agentq', 1, one), 'BELOW_THRESHOLD', 'agentq');
      const both = cosignEnvelope(one, second);
      const report = await answer('dev-a', 'agentq', await desire('dev-a', 'agentq', 1, both));
      expect(report).toMatchObject({ state: 'applied', revision: 1 });
    }, 180_000);

    it('expired: EXPIRED', async () => {
      const old = signRevision(revision('agentp', 4), signer, { now: Date.now() - 10 * DAY, validityDays: 1 });
      await refused(await desire('dev-a', 'agentp', 4, old), 'EXPIRED');
    }, 180_000);

    it("below the device's own floor (the SSH path's floor file): BELOW_FLOOR", async () => {
      // r3 is in place; a completed rollout confirmed r5 as this device's floor (written as the worker does).
      writeFileSync(
        join(home('dev-a'), '.wavegate/profiles/agentp/floor'),
        formatFloor({ revision: 5, from: 3, revertUntil: 0, rollout: 'rollout:done' }),
      );
      const report = await refused(
        await desire('dev-a', 'agentp', 4, signRevision(revision('agentp', 4), signer, { now: Date.now() })),
        'BELOW_FLOOR',
      );
      expect(report.detail).toContain('floor r5');
    }, 180_000);
  });

  describe("the gateway refuses requests that are not the device's own", () => {
    const raw = async (device: string, secret: Uint8Array, path: string, body: unknown, header?: string) => {
      const bytes = Buffer.from(body === undefined ? '' : JSON.stringify(body));
      const authorization =
        header ??
        authorizationHeader({
          device,
          method: body === undefined ? 'GET' : 'POST',
          path,
          body: bytes,
          now: Date.now(),
          nonce: randomBytes(16).toString('hex'),
          secretKey: secret,
        });
      const res = await fetch(`${gatewayUrl}${path}`, {
        method: body === undefined ? 'GET' : 'POST',
        headers: { authorization, 'content-type': 'application/json' },
        ...(body === undefined ? {} : { body: bytes }),
      });
      return { status: res.status, body: (await res.json()) as { code: string; message: string }, authorization };
    };
    const sync = { report: null, knownVersion: 0, waitMs: 0 };

    it("signed by another device's key: 401 naming the bad signature; the sync of the device itself passes", async () => {
      const foreign = await raw('dev-a', identity.get('dev-b')!.secret, '/v1/sync', sync);
      expect(foreign.status).toBe(401);
      expect(foreign.body).toMatchObject({
        code: 'UNAUTHENTICATED',
        message: expect.stringContaining('BAD_SIGNATURE'),
      });
      const own = await raw('dev-b', identity.get('dev-b')!.secret, '/v1/sync', sync);
      expect(own.status).toBe(200);
      expect((own.body as unknown as TwinView).deviceId).toBe('dev-b');
    }, 60_000);

    it('a replayed request: 401 REPLAY', async () => {
      const first = await raw('dev-b', identity.get('dev-b')!.secret, '/v1/report', { report: null });
      expect(first.status).toBe(200);
      const again = await raw(
        'dev-b',
        identity.get('dev-b')!.secret,
        '/v1/report',
        { report: null },
        first.authorization,
      );
      expect(again.status).toBe(401);
      expect(again.body.code).toBe('REPLAY');
    }, 60_000);

    it("another device's payload: 403; an unknown device 401; a bad field 400 naming it; logs carry no signature", async () => {
      const theirs = await raw('dev-b', identity.get('dev-b')!.secret, '/v1/payload/agentp/3/app-3.conf', undefined);
      expect(theirs.status).toBe(403);
      expect(theirs.body.code).toBe('FORBIDDEN');
      const unknown = await raw('dev-z', identity.get('dev-b')!.secret, '/v1/sync', sync);
      expect(unknown.status).toBe(401);
      expect(unknown.body.message).toContain('UNKNOWN_DEVICE');
      const bad = await raw('dev-b', identity.get('dev-b')!.secret, '/v1/sync', { ...sync, knownVersion: -1 });
      expect(bad.status).toBe(400);
      expect(bad.body).toMatchObject({ code: 'INVALID_INPUT', message: expect.stringContaining('knownVersion') });
      const sig = /sig="([^"]+)"/.exec(bad.authorization)![1]!;
      expect(gateway.output()).not.toContain(sig);
      expect(gateway.output()).not.toContain(identity.get('dev-b')!.pin);
    }, 60_000);

    it("the agent's own client: a payload of its own desired revision comes through, checked by the agent", async () => {
      const client = gatewayClient({ url: gatewayUrl, device: 'dev-a', secretKey: identity.get('dev-a')!.secret });
      const view = await client.sync({ report: null, knownVersion: 0, waitMs: 0 }).catch((e: GatewayError) => e);
      expect(view).not.toBeInstanceOf(GatewayError);
      // The desired r4 (refused for its floor) names app-4.conf: the gateway serves it, as signed.
      expect((await client.payload('agentp', 4, 'app-4.conf')).toString()).toBe('rev 4\n');
      await expect(client.payload('agentp', 4, 'other.conf')).rejects.toMatchObject({ status: 403 });
    }, 60_000);
  });
  it('twinReverify: the agent re-verifies what it applied; a drifted device is reported failed (VERIFY)', async () => {
    rmSync(join(home('dev-a'), 'agentq.conf'));
    expect(await reverifyTwin(env.client, 'dev-a')).toBe(true);
    const report = await until('the re-verify report', async () => {
      const r = (await readTwin(env.client, 'dev-a'))?.report?.profiles.agentq;
      return r?.state === 'failed' ? r : undefined;
    });
    expect(report).toMatchObject({ reason: 'VERIFY', steps: ['reverify'], revision: 1 });
    const view = await until('reverify answered', async () => {
      const v = await readTwin(env.client, 'dev-a');
      return v && !v.reverify ? v : undefined;
    });
    // agentp's answer (refused below the floor) is left as it was: only what was in place is re-verified.
    expect(view.report!.profiles.agentp).toMatchObject({ state: 'refused', reason: 'BELOW_FLOOR' });
  }, 180_000);

  it('SIGTERM stops the agent cleanly mid-apply (exit 0); the apply finishes on the device and the next start reports it, run once', async () => {
    await startAgent('dev-b');
    const rid = await desire('dev-b', 'agentp', 2, signRevision(revision('agentp', 2, 4), signer, { now: Date.now() }));
    await until('the dev-b apply running', async () => (runs('dev-b').includes('agentp r2') ? true : undefined));
    const child = agents.get('dev-b')!;
    const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
    await until(
      'the detached apply done',
      async () => (existsSync(join(home('dev-b'), 'agentp.conf')) ? true : undefined),
      60_000,
    );
    await startAgent('dev-b');
    const report = await answer('dev-b', 'agentp', rid);
    expect(report).toMatchObject({ state: 'applied', revision: 2 });
    expect(runs('dev-b')).toEqual(['agentp r2']);
  }, 180_000);

  it('the gateway reads the inventory again when it changes: a newly pinned device gets in, a removed one is refused', async () => {
    await enroll('dev-c');
    const client = gatewayClient({ url: gatewayUrl, device: 'dev-c', secretKey: identity.get('dev-c')!.secret });
    await expect(client.sync({ report: null, knownVersion: 0, waitMs: 0 })).rejects.toMatchObject({
      status: 401,
      message: expect.stringContaining('UNKNOWN_DEVICE'),
    });
    writeInventory([...devices, 'dev-c']);
    const view = await until('dev-c let in', () =>
      client.sync({ report: null, knownVersion: 0, waitMs: 0 }).catch(() => undefined),
    );
    expect(view.deviceId).toBe('dev-c');
    writeInventory(devices);
    gateway.child.kill('SIGHUP');
    await until('dev-c refused again', () =>
      client.sync({ report: null, knownVersion: 0, waitMs: 0 }).then(
        () => undefined,
        (e: GatewayError) => (e.status === 401 ? e : undefined),
      ),
    );
    expect(gateway.output()).toMatch(/reloaded \(SIGHUP\)|reloaded \(the file changed\)/);
  }, 120_000);

  it('gateway errors back off (1 s, 2 s, 4 s ...) and SIGTERM ends the wait at once (exit 0)', async () => {
    await enroll('dev-z'); // never pinned: every sync is 401
    const { child, output } = await spawnCliUntil(
      [
        'agent',
        '--device-id',
        'dev-z',
        '--gateway',
        gatewayUrl,
        '--trust',
        devicePins,
        '--state-dir',
        stateDir('dev-z'),
        '--key',
        identity.get('dev-z')!.keyFile,
        '--home',
        home('dev-z'),
      ],
      /retrying in 4 s/,
      60_000,
    );
    const waits = [
      ...output().matchAll(/sync failed: gateway 401 UNAUTHENTICATED: UNKNOWN_DEVICE.*; retrying in (\d+) s/g),
    ].map((m) => Number(m[1]));
    expect(waits.slice(0, 3)).toEqual([1, 2, 4]);
    const started = Date.now();
    const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
    expect(Date.now() - started).toBeLessThan(8_000);
  }, 120_000);

  it('HTTPS: a gateway with --https-cert/--https-key; the agent trusts it with --gateway-ca, and not without', async () => {
    const pki = makeTestPki(join(scratch.dir, 'pki'));
    const tls = await spawnCliUntil(
      [
        'gateway',
        '--listen',
        '127.0.0.1:0',
        '--https-cert',
        pki.serverCert,
        '--https-key',
        pki.serverKey,
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
        '--max-long-polls',
        '1',
      ],
      /gateway listening on (https:\/\/\S+)/,
    );
    try {
      const url = /gateway listening on (https:\/\/\S+)/.exec(tls.output())![1]!;
      const secretKey = identity.get('dev-b')!.secret;
      const trusted = gatewayClient({ url, device: 'dev-b', secretKey, ca: readFileSync(pki.caCert) });
      expect((await trusted.sync({ report: null, knownVersion: 0, waitMs: 0 })).deviceId).toBe('dev-b');
      await expect(
        gatewayClient({ url, device: 'dev-b', secretKey }).sync({ report: null, knownVersion: 0, waitMs: 0 }),
      ).rejects.toThrow(/certificate/);
      // --max-long-polls 1: one sync waits, the next waiting one is refused BUSY; a body above 256 KB is 413.
      const view = await trusted.sync({ report: null, knownVersion: 0, waitMs: 0 });
      const waiting = trusted.sync({ report: null, knownVersion: view.version, waitMs: 8_000 });
      await new Promise((r) => setTimeout(r, 1_000));
      await expect(trusted.sync({ report: null, knownVersion: view.version, waitMs: 8_000 })).rejects.toMatchObject({
        status: 503,
        code: 'BUSY',
      });
      await waiting;
      // An agent that gives up mid long-poll frees its slot at once (the gateway stops waiting for it).
      const slow = Buffer.from(JSON.stringify({ report: null, knownVersion: view.version, waitMs: 8_000 }));
      await expect(trusted.send('POST', '/v1/sync', slow, 1_000)).rejects.toThrow(/no answer/);
      await new Promise((r) => setTimeout(r, 500));
      expect((await trusted.sync({ report: null, knownVersion: view.version, waitMs: 1_000 })).deviceId).toBe('dev-b');
      await expect(trusted.send('POST', '/v1/sync', Buffer.alloc(300 * 1024, 32), 10_000)).rejects.toMatchObject({
        status: 413,
        code: 'TOO_LARGE',
      });
    } finally {
      await stopChild(tls.child);
    }
  }, 120_000);
  it("a floor raised at apply by a rollout run: the agent lets only that run's compensation (the exemption in the steps) back to its from; otherwise BELOW_FLOOR naming the floor", async () => {
    // agentp r3 is in place; rollout:up (run run-up) then confirmed r5 over it, tagged as the apply writes it.
    expect(marker('dev-a')).toBe(3);
    writeFileSync(
      join(home('dev-a'), '.wavegate/profiles/agentp/floor'),
      formatFloor({
        revision: 5,
        from: 3,
        revertUntil: 0,
        rollout: 'rollout:up',
        run: 'run-up',
        window: 0,
        at: Date.now(),
      }),
    );
    const r3 = signRevision(revision('agentp', 3), signer, { now: Date.now() });
    const steps = (below?: FloorExemption): DesiredRequest['steps'] => ({
      profile: 'agentp',
      revision: 3,
      apply: '(signed)',
      verify: '(signed)',
      payload: [],
      envelope: r3,
      ...(below ? { floor: { rollout: below.rollout, run: below.run, below } } : {}),
    });
    const before = runs('dev-a').length;
    const plain = await answer('dev-a', 'agentp', await desire('dev-a', 'agentp', 3, r3, { steps: steps() }));
    expect(plain).toMatchObject({ state: 'refused', reason: 'BELOW_FLOOR', revision: 3 });
    expect(plain.detail).toContain(
      "r3 is below the device's floor r5, confirmed by rollout:up (run run-up) (only that rollout's own compensation",
    );
    const otherRun = await answer(
      'dev-a',
      'agentp',
      await desire('dev-a', 'agentp', 3, r3, {
        steps: steps({ kind: 'compensation', rollout: 'rollout:up', run: 'run-other' }),
      }),
    );
    expect(otherRun).toMatchObject({ state: 'refused', reason: 'BELOW_FLOOR' });
    expect(otherRun.detail).toContain(
      'this compensation is for rollout:up run run-other, not for the rollout that raised the floor',
    );
    const compensation = await answer(
      'dev-a',
      'agentp',
      await desire('dev-a', 'agentp', 3, r3, {
        steps: steps({ kind: 'compensation', rollout: 'rollout:up', run: 'run-up' }),
      }),
    );
    expect(compensation.state, JSON.stringify(compensation)).not.toBe('refused');
    expect(compensation).toMatchObject({ state: 'already-applied', revision: 3 });
    expect(marker('dev-a')).toBe(3);
    expect(runs('dev-a'), 'r3 was in place: nothing ran again').toHaveLength(before);
  }, 180_000);
});
