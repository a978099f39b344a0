import { createServer, request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { resolveAuditLocation } from '../../audit/file';
import { BoardAccess } from '../../cli/board/access';
import { boardRoutes, CONTROL } from '../../cli/board/routes';
import { startBoard, type BoardServer } from '../../cli/board/server';
import { HttpRefusal, sendError, sendJson } from '../../http/answer';
import { askedOf, dispatch, type Check, type Guards, type RouteTable } from '../../http/routes';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { freePort } from '../../sim/ports';
import { scratchDir } from '../support/harness';

/**
 * http/routes.ts: a route's checks run in one fixed order whatever order the route lists them in, a
 * refused check stops the request before anything after it (the body is not read, the handler not run),
 * and 404/405/413/408 are answered as the servers answer them. Then the board's own table: every state
 * change it declares is a CONTROL, and a real board refuses each without its CSRF token (403) before
 * the handler runs, which answers the same request with the token.
 */
const ALL: readonly Check[] = ['csrf', 'signedBody', 'origin', 'auth', 'site']; // listed out of order on purpose

interface Run {
  ran: string[];
  refuse?: Check;
}

/** A table whose guards record their turn (and refuse when told to), over one route that declares every check. */
function recordingTable(run: Run): RouteTable<string> {
  const turn = (check: Check): void => {
    run.ran.push(check);
    if (run.refuse === check) throw new HttpRefusal(403, 'FORBIDDEN', `${check} refused`);
  };
  const guards: Guards<string> = {
    site: () => turn('site'),
    auth: () => {
      turn('auth');
      return 'alice';
    },
    origin: () => turn('origin'),
    csrf: () => {
      turn('csrf');
      return 'alice';
    },
    signedBody: (_a, body) => {
      run.ran.push(`body read: ${body.length} bytes`);
      turn('signedBody');
    },
  };
  return {
    routes: [
      {
        method: 'POST',
        path: /^\/things\/([a-z]+)$/,
        checks: ALL,
        body: { maxBytes: 64, timeoutMs: 300, json: true },
        handle: (a) => {
          run.ran.push(`handler ${a.params[0]} ${JSON.stringify(a.json)} by ${a.caller}`);
          sendJson(a.res, 200, { ok: true });
        },
      },
      {
        method: 'GET',
        path: /^\/things\/([a-z]+)$/,
        checks: ['site', 'auth'],
        handle: (a) => sendJson(a.res, 200, {}),
      },
    ],
    methodNotAllowed: true,
    otherwise: (path) => ({
      checks: ['auth'],
      handle: () => {
        throw new HttpRefusal(404, 'NOT_FOUND', `no ${path}`);
      },
    }),
    guards,
  };
}

describe('http/routes dispatch', () => {
  let server: Server;
  let url: string;
  let run: Run = { ran: [] };
  beforeAll(async () => {
    server = createServer((req, res) => {
      const table = recordingTable(run);
      dispatch(table, askedOf(table, req, res)).catch((err: HttpRefusal) =>
        sendError(res, err.status, err.code, err.message),
      );
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(() => new Promise<void>((r) => server.close(() => r())));

  const ask = async (path: string, init: RequestInit = {}, refuse?: Check) => {
    run = { ran: [], ...(refuse ? { refuse } : {}) };
    const res = await fetch(`${url}${path}`, init);
    return { status: res.status, body: (await res.json()) as { code?: string; message?: string }, ran: run.ran };
  };
  const post = { method: 'POST', body: '{"n":1}' };

  it('runs the declared checks in the fixed order (site, auth, origin, csrf, body, signedBody), then the handler', async () => {
    const a = await ask('/things/box', post);
    expect(a.status).toBe(200);
    expect(a.ran).toEqual([
      'site',
      'auth',
      'origin',
      'csrf',
      'body read: 7 bytes',
      'signedBody',
      'handler box {"n":1} by alice',
    ]);
  });

  it('a refused check stops the request there: no later check, no body read, no handler', async () => {
    const order: Check[] = ['site', 'auth', 'origin', 'csrf'];
    for (const [i, check] of order.entries()) {
      const a = await ask('/things/box', post, check);
      expect({ check, status: a.status, message: a.body.message }).toEqual({
        check,
        status: 403,
        message: `${check} refused`,
      });
      expect(a.ran).toEqual(order.slice(0, i + 1));
    }
    const signed = await ask('/things/box', post, 'signedBody');
    expect(signed.status).toBe(403);
    expect(signed.ran).toEqual([...order, 'body read: 7 bytes', 'signedBody']);
  });

  it('404 and 405 come after the caller is known; 405 names the path methods', async () => {
    expect((await ask('/nothing', {}, 'auth')).status).toBe(403);
    expect(await ask('/nothing')).toMatchObject({ status: 404, body: { code: 'NOT_FOUND' }, ran: ['auth'] });
    expect((await ask('/things/box', { method: 'DELETE' }, 'auth')).status).toBe(403);
    const wrong = await ask('/things/box', { method: 'DELETE' });
    expect(wrong).toMatchObject({ status: 405, body: { code: 'METHOD_NOT_ALLOWED' }, ran: ['site', 'auth'] });
    expect(wrong.body.message).toBe('DELETE /things/box: only POST or GET is allowed here');
  });

  it('bounds the body: 413 past its size, 408 past its time, 400 when it is not a JSON object', async () => {
    const big = await ask('/things/box', { method: 'POST', body: 'x'.repeat(65) });
    expect(big).toMatchObject({ status: 413, body: { code: 'TOO_LARGE' } });
    expect(big.ran).not.toContain('handler');
    expect((await ask('/things/box', { method: 'POST', body: '[1]' })).status).toBe(400);
    // A body that stops short of its Content-Length: 408 within its bound (300 ms), counted from the headers.
    run = { ran: [] };
    const started = Date.now();
    const slow = await new Promise<{ status: number; text: string }>((resolve, reject) => {
      const req = request(`${url}/things/box`, { method: 'POST', headers: { 'content-length': 10 } }, (res) => {
        let text = '';
        res.on('data', (c: Buffer) => (text += c.toString()));
        res.on('end', () => {
          req.destroy();
          resolve({ status: res.statusCode!, text });
        });
      });
      req.on('error', reject);
      req.write('{');
    });
    expect({ status: slow.status, code: JSON.parse(slow.text).code }).toEqual({ status: 408, code: 'BODY_TIMEOUT' });
    expect(Date.now() - started).toBeLessThan(3_000);
    expect(run.ran).not.toContain('signedBody');
  });

  it('a declared check the server has no guard for never lets the request through', async () => {
    const table: RouteTable<string> = {
      routes: [{ method: 'GET', path: '/x', checks: ['csrf'], handle: () => expect.unreachable() }],
      methodNotAllowed: true,
      otherwise: () => ({ checks: [], handle: () => expect.unreachable() }),
      guards: {},
    };
    const asked = askedOf(table, { url: '/x', method: 'GET', headers: {} } as never, {} as never);
    await expect(dispatch(table, asked)).rejects.toThrow(/declares the check csrf, and the server has no guard/);
  });
});

describe("the board's table: every state change is a CONTROL, refused without its CSRF token", () => {
  const scratch = scratchDir('http-routes-board');
  const TOKEN = 'alice-token-0123456789abcdef-0123456789';
  let board: BoardServer;
  let client: Client;
  // One sample path per state-changing route of the table (a new one without a sample fails the first test).
  const SAMPLES = [
    '/api/rollouts/rollout:demo:20990101-000000/pause',
    '/api/rollouts/rollout:demo:20990101-000000/resume',
    '/api/rollouts/rollout:demo:20990101-000000/approve',
    '/api/rollouts/rollout:demo:20990101-000000/abort',
    '/api/rollouts/rollout:demo:20990101-000000/revert',
    '/api/fleet/demo/converge',
    '/api/freezes/freeze-1/lift',
  ];
  const sources = () => ({
    client,
    audit: { where: resolveAuditLocation({ auditDir: join(scratch.dir, 'audit') }, { env: {} }) },
    transports: new Map<string, string>(),
    taskQueue: 'http-routes-none',
    profilesRoot: join(PROJECT_ROOT, 'profiles'),
    readRetryMs: 500,
  });

  beforeAll(async () => {
    // Temporal is away (nothing listens): no answer here needs it, and a handler that reached it would say so.
    client = new Client({
      connection: Connection.lazy({ address: `127.0.0.1:${await freePort()}`, interceptors: [] }),
    });
    board = await startBoard({
      sources: sources(),
      listen: { host: '127.0.0.1', port: 0 },
      tokens: [{ name: 'alice', token: TOKEN }],
      log: () => {},
    });
  });
  afterAll(async () => {
    await board?.close();
    await client?.connection.close().catch(() => {});
    scratch.cleanup();
  });

  it('declares every POST but signing in and out with the CONTROL checks, and each has a sample here', () => {
    const table = boardRoutes({
      sources: sources(),
      fleet: undefined,
      access: new BoardAccess({
        tokens: [],
        clientCa: false,
        address: () => ({ listenHost: '127.0.0.1', port: 1, tls: false }),
        log: () => {},
      }),
      streams: {} as never,
      pages: new Map(),
      pollMs: 1_000,
      log: () => {},
    });
    const changes = table.routes.filter(
      (r) => r.method === 'POST' && r.path !== '/api/login' && r.path !== '/api/logout',
    );
    expect(changes.length).toBe(SAMPLES.length);
    for (const route of changes) {
      expect({ path: String(route.path), checks: [...route.checks].sort() }).toEqual({
        path: String(route.path),
        checks: [...CONTROL].sort(),
      });
      expect(route.body?.maxBytes, String(route.path)).toBe(16 * 1024);
      expect(
        SAMPLES.some((s) => (typeof route.path === 'string' ? route.path === s : route.path.test(s))),
        String(route.path),
      ).toBe(true);
    }
  });

  it('answers each state change 403 without the CSRF token, before its handler; with the token, the handler answers', async () => {
    const login = await fetch(`${board.url}/api/login`, {
      method: 'POST',
      headers: { origin: board.url, 'content-type': 'application/json' },
      body: JSON.stringify({ token: TOKEN }),
    });
    expect(login.status).toBe(200);
    const cookie = login.headers.get('set-cookie')!.split(';')[0]!;
    const { csrf } = (await login.json()) as { csrf: string };
    for (const path of SAMPLES) {
      const send = async (headers: Record<string, string>) => {
        const res = await fetch(`${board.url}${path}`, {
          method: 'POST',
          headers: { cookie, origin: board.url, 'content-type': 'application/json', ...headers },
          body: '{}',
        });
        return { path, status: res.status, ...((await res.json()) as { code: string; message: string }) };
      };
      const without = await send({});
      expect(without).toMatchObject({ path, status: 403, code: 'FORBIDDEN' });
      expect(without.message).toMatch(/^X-CSRF-Token: missing or not this session's/);
      // With it, the route's handler runs: it refuses the empty body, or names the missing inventory.
      const withToken = await send({ 'x-csrf-token': csrf });
      expect([400, 404], JSON.stringify(withToken)).toContain(withToken.status);
    }
  });
});
