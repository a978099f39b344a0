import { randomBytes } from 'node:crypto';
import { request } from 'node:http';
import { connect } from 'node:net';
import { ed25519 } from '@noble/curves/ed25519.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { authorizationHeader } from '../../core/agent-auth';
import { closeFlood, openFlood, startGatewayChild, type GatewayChild } from '../support/gateway-flood';
import { until } from '../support/until';

/**
 * The gateway under attack (issue 22), each against a real gateway HTTP server in its own process on
 * 127.0.0.1 (test/support/gateway-child.ts): memory is measured in that process. Its Temporal client is
 * a stand-in whose twins desire nothing: a long-poll is held in the gateway's own memory until the request
 * goes away, a payload asked for is not the device's (403), and no unauthenticated request reaches it;
 * what is checked here is the gateway's own bounds. (The gateway with a real Temporal and real agents:
 * test/e2e/agent-refusals.test.ts, agent-rollout.test.ts, gateway-fleet.test.ts.)
 */
const MB = 1024 * 1024;
const keyPair = () => {
  const secret = randomBytes(32);
  return { secret, pub: Buffer.from(ed25519.getPublicKey(secret)).toString('base64') };
};
const devA = keyPair();
const devB = keyPair();
const stranger = keyPair();
const devices = { 'dev-a': devA.pub, 'dev-b': devB.pub };
const sign = (device: string, secret: Uint8Array, method: string, path: string, body: Buffer) =>
  authorizationHeader({
    device,
    method,
    path,
    body,
    now: Date.now(),
    nonce: randomBytes(16).toString('hex'),
    secretKey: secret,
  });

/** One request with a raw Authorization header; resolves with the status and the gateway's { code, message }. */
function send(
  port: number,
  method: string,
  path: string,
  authorization: string,
  body: Buffer,
  signal?: AbortSignal,
): Promise<{ status: number; code: string; message: string }> {
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: '127.0.0.1',
        port,
        method,
        path,
        agent: false,
        headers: { authorization, 'content-type': 'application/json', 'content-length': body.length },
        ...(signal ? { signal } : {}),
      },
      (res) => {
        let text = '';
        res.on('data', (c: Buffer) => (text += c.toString()));
        res.on('end', () => {
          const parsed = JSON.parse(text || '{}') as { code?: string; message?: string };
          resolve({ status: res.statusCode ?? 0, code: parsed.code ?? '', message: parsed.message ?? '' });
        });
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

describe('gateway under a flood of unauthenticated connections', () => {
  let gateway: GatewayChild;
  beforeAll(async () => {
    gateway = await startGatewayChild({ devices });
  }, 60_000);
  afterAll(async () => gateway?.stop());

  it('400 connections with a bad signature and 200 KB of body each, and 400 idle ones: refused 401 before the body ends, no body byte read, memory bounded and returned', async () => {
    const before = await gateway.mem();
    // Well formed, for a pinned device, signed by a key it does not pin; the body declared 250 KB, 200 KB sent, never finished.
    const head = () =>
      `POST /v1/sync HTTP/1.1\r\nhost: gateway\r\nauthorization: ${sign('dev-a', stranger.secret, 'POST', '/v1/sync', Buffer.from('{}'))}\r\n`;
    const flood = await openFlood(gateway.port, 400, head, 200 * 1024, 250 * 1024);
    const idle = await openFlood(gateway.port, 400, undefined, 0);
    // Every flooding connection is answered although its body never ended (before: the gateway waited for the body, holding it).
    await until(
      '401 on every flooding connection',
      async () => (flood.every((c) => c.received().startsWith('HTTP/1.1 401')) ? true : undefined),
      30_000,
    ).catch(() => undefined);
    const answered = flood.filter((c) => c.received().startsWith('HTTP/1.1 401')).length;
    const during = await gateway.mem();
    const stats = (await gateway.stats())!;
    await closeFlood(flood);
    await closeFlood(idle);
    await until(
      'the gateway holding no connection',
      async () => ((await gateway.stats())?.connections === 0 ? true : undefined),
      30_000,
    ).catch(() => undefined);
    const after = await gateway.mem();
    const afterStats = await gateway.stats();
    const growth = {
      rss: (during.rss - before.rss) / MB,
      heap: (during.heapUsed + during.external - before.heapUsed - before.external) / MB,
      kept: (after.heapUsed + after.external - before.heapUsed - before.external) / MB,
    };
    expect(answered).toBe(400);
    expect(stats).toMatchObject({ bodyBytesRead: 0 });
    // Measured: about +8 MB RSS and +4 MB heap+external here when written; on 2026-12-05 +9 to +31 MB RSS and
    // +19 to +33 MB heap+external with 800 connections open (the same code, 2 of 7 runs over the old bound of 30).
    // The gateway before this change: +70 MB RSS, +82 MB heap+external, 79 MB kept.
    expect(growth.rss, JSON.stringify(growth)).toBeLessThan(40);
    expect(growth.heap, JSON.stringify(growth)).toBeLessThan(45);
    expect(growth.kept, JSON.stringify(growth)).toBeLessThan(10);
    expect(afterStats).toMatchObject({ connections: 0, connectionSources: 0, requests: 0, requestSources: 0 });
  }, 120_000);
});

describe('gateway bounds per device, per source, and its log', () => {
  let gateway: GatewayChild;
  beforeAll(async () => {
    gateway = await startGatewayChild({
      devices,
      limits: { maxConnectionsPerSource: 60, maxRequestsPerSource: 60, noncesPerDevice: 5, refusalLogPerSecond: 5 },
    });
  }, 60_000);
  afterAll(async () => gateway?.stop());
  const sync = (waitMs: number) => Buffer.from(JSON.stringify({ report: null, knownVersion: 0, waitMs }));

  it('a body other than the one whose digest was signed is refused 401 BODY_DIGEST', async () => {
    const signed = sync(0);
    const other = Buffer.from(JSON.stringify({ report: null, knownVersion: 7, waitMs: 0 }));
    const res = await send(
      gateway.port,
      'POST',
      '/v1/report',
      sign('dev-b', devB.secret, 'POST', '/v1/report', signed),
      other,
    );
    expect(res).toMatchObject({
      status: 401,
      code: 'UNAUTHENTICATED',
      message: expect.stringContaining('BODY_DIGEST'),
    });
  }, 30_000);

  it('an authenticated request whose body stops short of its Content-Length is answered 408 BODY_TIMEOUT and closed within 5 s of its headers', async () => {
    const body = sync(0);
    const authorization = sign('dev-a', devA.secret, 'POST', '/v1/report', body);
    const socket = connect(gateway.port, '127.0.0.1');
    await new Promise<void>((r) => socket.once('connect', () => r()));
    let answer = '';
    socket.on('data', (c: Buffer) => (answer += c.toString()));
    const closed = new Promise<number>((r) => socket.once('close', () => r(Date.now())));
    const sentAt = Date.now();
    // The whole head and half the body it declares, then nothing: the connection stays open.
    socket.write(
      `POST /v1/report HTTP/1.1\r\nhost: gateway\r\nauthorization: ${authorization}\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n`,
    );
    socket.write(body.subarray(0, body.length >> 1));
    const closedAt = await closed;
    const answeredMs = closedAt - sentAt;
    expect(answer).toMatch(/^HTTP\/1\.1 408 /);
    expect(answer).toContain('"code":"BODY_TIMEOUT"');
    expect(answer).toContain('within 5 s of its headers');
    expect(answer.toLowerCase()).toContain('connection: close');
    // Not before the bound, and well before the request's 30 s limit (the answer, then at most the 2 s linger).
    expect(answeredMs).toBeGreaterThanOrEqual(4_900);
    expect(answeredMs).toBeLessThan(8_000);
    await until(
      'the request to be released',
      async () => ((await gateway.stats())?.requests === 0 ? true : undefined),
      5_000,
    );
  }, 45_000);

  it('an agent of the older protocol (no digest in its header) is told to upgrade', async () => {
    const old = sign('dev-b', devB.secret, 'POST', '/v1/report', sync(0)).replace(/, digest="[0-9a-f]+"/, '');
    const res = await send(gateway.port, 'POST', '/v1/report', old, sync(0));
    expect(res).toMatchObject({
      status: 401,
      message: expect.stringMatching(/NO_DIGEST.*upgrade the agent on "dev-b"/),
    });
  }, 30_000);

  it('a device holds at most 2 long-polls (the third is 429 DEVICE_LIMIT), another device still gets its own; a client that goes away is logged as such', async () => {
    const aborts = [new AbortController(), new AbortController(), new AbortController()];
    const held = [0, 1].map((i) =>
      send(
        gateway.port,
        'POST',
        '/v1/sync',
        sign('dev-a', devA.secret, 'POST', '/v1/sync', sync(30_000)),
        sync(30_000),
        aborts[i]!.signal,
      ).catch((e: Error) => e),
    );
    await until(
      'two long-polls held',
      async () => ((await gateway.stats())?.longPolls === 2 ? true : undefined),
      20_000,
    );
    const third = await send(
      gateway.port,
      'POST',
      '/v1/sync',
      sign('dev-a', devA.secret, 'POST', '/v1/sync', sync(30_000)),
      sync(30_000),
      AbortSignal.timeout(20_000),
    );
    expect(third).toMatchObject({ status: 429, code: 'DEVICE_LIMIT', message: expect.stringContaining('dev-a') });
    const other = send(
      gateway.port,
      'POST',
      '/v1/sync',
      sign('dev-b', devB.secret, 'POST', '/v1/sync', sync(30_000)),
      sync(30_000),
      aborts[2]!.signal,
    ).catch((e: Error) => e);
    await until(
      'dev-b holding its long-poll',
      async () => ((await gateway.stats())?.longPolls === 3 ? true : undefined),
      20_000,
    );
    for (const a of aborts) a.abort();
    await Promise.all([...held, other]);
    await until(
      'the long-polls released',
      async () => ((await gateway.stats())?.longPolls === 0 ? true : undefined),
      20_000,
    );
    const logs = await until(
      'the disconnects logged',
      async () => {
        const all = await gateway.logs();
        return all.filter((l) => l.includes('client closed the connection')).length >= 3 ? all : undefined;
      },
      20_000,
    ).catch(async () => gateway.logs());
    expect(
      logs.filter((l) => /^dev-[ab] POST \/v1\/sync - \d+ms client closed the connection/.test(l)),
      logs.filter((l) => l.includes('/v1/sync')).join('\n'),
    ).toHaveLength(3);
    expect(logs.join('\n')).not.toContain('cannot reach the control plane');
  }, 60_000);

  it('one device past its share of the nonce cache gets 429 DEVICE_LIMIT; the other device does not', async () => {
    const path = '/v1/payload/app/1/conf';
    const codes: number[] = [];
    for (let i = 0; i < 8; i++)
      codes.push(
        (
          await send(
            gateway.port,
            'GET',
            path,
            sign('dev-b', devB.secret, 'GET', path, Buffer.alloc(0)),
            Buffer.alloc(0),
          )
        ).status,
      );
    // The first five pass authentication (then 403: the stand-in's twin desires no app r1); the rest are dev-b's excess.
    expect(codes.filter((c) => c === 429).length).toBeGreaterThanOrEqual(3);
    const a = await send(
      gateway.port,
      'GET',
      path,
      sign('dev-a', devA.secret, 'GET', path, Buffer.alloc(0)),
      Buffer.alloc(0),
    );
    expect(a.status).not.toBe(429);
  }, 30_000);

  it('connections past the per-source cap are closed at once; the gateway never holds more', async () => {
    const idle = await openFlood(gateway.port, 90, undefined, 0);
    await until(
      'the excess closed',
      async () => (idle.filter((c) => c.isClosed()).length >= 30 ? true : undefined),
      20_000,
    ).catch(() => undefined);
    const stats = (await gateway.stats())!;
    expect(stats.connections).toBeLessThanOrEqual(60);
    expect(idle.filter((c) => c.isClosed()).length).toBe(30);
    await closeFlood(idle);
    // Counted down as the gateway sees them close: the source is let in again.
    await until(
      'the source back to no connection',
      async () => ((await gateway.stats())?.connections === 0 ? true : undefined),
      20_000,
    );
  }, 60_000);

  it('the refusal log is rate-limited: 300 refused requests write at most a few lines a second and a "suppressed" count', async () => {
    // Earlier tests' suppressed refusals summed up first (the gateway flushes the count every second).
    await until(
      'no refusal pending',
      async () => ((await gateway.stats())?.refusalsSuppressed === 0 ? true : undefined),
      20_000,
    );
    const logsBefore = (await gateway.logs()).length;
    for (let i = 0; i < 300; i++) {
      const res = await send(
        gateway.port,
        'POST',
        '/v1/report',
        sign('dev-a', stranger.secret, 'POST', '/v1/report', sync(0)),
        sync(0),
      );
      expect(res.status).toBe(401);
    }
    const lines = await until(
      'the suppressed summary',
      async () => {
        const all = (await gateway.logs()).slice(logsBefore);
        const suppressed = all
          .map((l) => /^suppressed (\d+) refusal line/.exec(l))
          .filter((m) => m)
          .reduce((a, m) => a + Number(m![1]), 0);
        const written = all.filter((l) => l.includes('BAD_SIGNATURE')).length;
        return written + suppressed >= 300 ? { written, suppressed } : undefined;
      },
      20_000,
    );
    expect(lines.written + lines.suppressed).toBe(300);
    expect(lines.written).toBeLessThan(100);
  }, 60_000);
});

describe('gateway upgrade: agents older than the digest (--accept-agents-without-digest)', () => {
  let gateway: GatewayChild;
  beforeAll(async () => {
    gateway = await startGatewayChild({ devices, acceptAgentsWithoutDigest: true });
  }, 60_000);
  afterAll(async () => gateway?.stop());
  const legacy = (device: string, secret: Uint8Array, method: string, path: string, body: Buffer) =>
    sign(device, secret, method, path, body).replace(/, digest="[0-9a-f]+"/, '');
  const path = '/v1/payload/app/1/conf';

  it('an old agent of a pinned device passes authentication (then 403 FORBIDDEN: the stand-in twin desires no app r1, a refusal only an authenticated device gets), and is logged once to upgrade', async () => {
    for (let i = 0; i < 2; i++) {
      const res = await send(
        gateway.port,
        'GET',
        path,
        legacy('dev-a', devA.secret, 'GET', path, Buffer.alloc(0)),
        Buffer.alloc(0),
      );
      expect(res, res.message).toMatchObject({
        status: 403,
        code: 'FORBIDDEN',
        message: expect.stringContaining('app r1'),
      });
    }
    const logs = await until(
      'the upgrade logged',
      async () => {
        const all = await gateway.logs();
        return all.some((l) => l.includes('sends no body digest')) ? all : undefined;
      },
      20_000,
    );
    expect(logs.filter((l) => l.startsWith('dev-a sends no body digest'))).toHaveLength(1);
  }, 30_000);

  it('still refuses what the old agent did not sign: another key, a changed body, a replay', async () => {
    const other = await send(
      gateway.port,
      'GET',
      path,
      legacy('dev-a', stranger.secret, 'GET', path, Buffer.alloc(0)),
      Buffer.alloc(0),
    );
    expect(other).toMatchObject({ status: 401, message: expect.stringContaining('BAD_SIGNATURE') });
    const signed = legacy('dev-b', devB.secret, 'POST', '/v1/report', Buffer.from('{"report":null}'));
    const changed = await send(gateway.port, 'POST', '/v1/report', signed, Buffer.from('{"report":1234}'));
    expect(changed).toMatchObject({ status: 401, message: expect.stringContaining('BAD_SIGNATURE') });
    const header = legacy('dev-b', devB.secret, 'GET', path, Buffer.alloc(0));
    // Authenticated the first time (403: not its desired revision), a replay the second.
    expect((await send(gateway.port, 'GET', path, header, Buffer.alloc(0))).status).toBe(403);
    expect(await send(gateway.port, 'GET', path, header, Buffer.alloc(0))).toMatchObject({
      status: 401,
      code: 'REPLAY',
    });
  }, 30_000);

  it('a device with no pinned key gets no body read: refused as before (NO_DIGEST)', async () => {
    const before = (await gateway.stats())?.bodyBytesRead ?? 0;
    const unknown = await send(
      gateway.port,
      'POST',
      '/v1/report',
      legacy('dev-z', stranger.secret, 'POST', '/v1/report', Buffer.from('{}')),
      Buffer.from('{}'),
    );
    expect(unknown).toMatchObject({ status: 401, message: expect.stringContaining('NO_DIGEST') });
    expect((await gateway.stats())?.bodyBytesRead ?? 0).toBe(before);
  }, 30_000);
});
