import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { join } from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { resolveAuditLocation } from '../../audit/file';
import { WavegateProfile, WavegateState } from '../../contracts/search-attributes';
import { startBoard, type BoardServer } from '../../cli/board/server';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { freePort } from '../../sim/ports';
import { startDevServer, type DevServer } from '../../workers/dev-server';
import { runCli } from '../support/cli';
import { scratchDir } from '../support/harness';
import { until } from '../support/until';
import { makeTestPki } from '../support/tls-proxy';

/**
 * The board's endpoints refuse what they must, each with a JSON `{code, message}` naming the field and
 * the value (no stack trace): no token, a wrong token, another origin, no CSRF token, a body that is not
 * JSON or too large, an unknown or malformed rollout id, a bad device query, a foreign Host, a converge
 * with no completed rollout (its stale-set and nothing-behind refusals need a fleet: board.test.ts). Against a
 * real Temporal dev server (no worker: nothing here runs a rollout); `wavegate board` itself refuses a
 * listen address beyond loopback without HTTPS and a login (exit 2).
 */
const scratch = scratchDir('board-endpoints');
const TOKEN = 'alice-token-0123456789abcdef-0123456789';
let server: DevServer | undefined;
let client: Client | undefined;
let board: BoardServer | undefined;
const logged: string[] = [];

beforeAll(async () => {
  server = await startDevServer({
    dbFile: join(scratch.dir, 'temporal.db'),
    logFile: join(scratch.dir, 'temporal.log'),
    port: await freePort(),
    uiPort: await freePort(),
  });
  client = new Client({ connection: await Connection.connect({ address: server.address }) });
  mkdirSync(join(scratch.dir, 'audit'), { recursive: true });
  board = await startBoard({
    sources: {
      client,
      audit: { where: resolveAuditLocation({ auditDir: join(scratch.dir, 'audit') }, { env: {} }) },
      transports: new Map(),
      taskQueue: 'board-endpoints-none',
      profilesRoot: join(PROJECT_ROOT, 'profiles'),
      // No worker answers a listed rollout's status here: the list does not wait long for one.
      listDetailMs: 300,
    },
    listen: { host: '127.0.0.1', port: 0 },
    tokens: [{ name: 'alice', token: TOKEN }],
    log: (line) => logged.push(line),
  });
}, 120_000);

afterAll(async () => {
  await board?.close();
  await client?.connection.close();
  await server?.stop();
  scratch.cleanup();
});

interface Answer {
  status: number;
  body: { code?: string; message?: string; [k: string]: unknown };
  headers: Headers;
}

async function call(path: string, init: RequestInit = {}): Promise<Answer> {
  const res = await fetch(`${board!.url}${path}`, init);
  const text = await res.text();
  let body: Answer['body'];
  try {
    body = JSON.parse(text);
  } catch {
    body = { text };
  }
  return { status: res.status, body, headers: res.headers };
}

const bearer = { authorization: `Bearer ${TOKEN}` };

/** A logged-in page's session: its cookie and CSRF token, by the login form's request. */
async function login(): Promise<{ cookie: string; csrf: string }> {
  const res = await fetch(`${board!.url}/api/login`, {
    method: 'POST',
    headers: { origin: board!.url, 'content-type': 'application/json' },
    body: JSON.stringify({ token: TOKEN }),
  });
  expect(res.status).toBe(200);
  const cookie = res.headers.get('set-cookie')!.split(';')[0]!;
  expect(res.headers.get('set-cookie')).toMatch(/HttpOnly; SameSite=Strict/);
  const { csrf, operator } = (await res.json()) as { csrf: string; operator: string };
  expect(operator).toBe('alice');
  return { cookie, csrf };
}

function control(
  path: string,
  s: { cookie: string; csrf: string },
  body: unknown,
  headers: Record<string, string> = {},
) {
  return call(path, {
    method: 'POST',
    headers: {
      cookie: s.cookie,
      origin: board!.url,
      'content-type': 'application/json',
      'x-csrf-token': s.csrf,
      ...headers,
    },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
}

function expectRefusal(a: Answer, status: number, code: string, mentions: RegExp): void {
  expect({ status: a.status, code: a.body.code }).toEqual({ status, code });
  expect(a.body.message).toMatch(mentions);
  expect(JSON.stringify(a.body)).not.toMatch(/\n\s+at |\.ts:\d+/); // no stack trace
}

describe('the board endpoints', () => {
  it('serve the page with a strict content policy, and no data without a token', async () => {
    const page = await call('/');
    expect(page.status).toBe(200);
    expect(page.headers.get('content-security-policy')).toMatch(/script-src 'self'/);
    expect(page.headers.get('x-frame-options')).toBe('DENY');
    expectRefusal(await call('/api/rollouts'), 401, 'UNAUTHORIZED', /token/);
    expectRefusal(
      await call('/api/rollouts', { headers: { authorization: 'Bearer wrong-token-0000000000' } }),
      401,
      'UNAUTHORIZED',
      /token/,
    );
    expect(logged.join('\n')).not.toContain('wrong-token-0000000000');
    const listed = await call('/api/rollouts', { headers: bearer });
    expect(listed.status).toBe(200);
    expect(listed.body.rollouts).toEqual([]);
    expectRefusal(await call('/nope'), 404, 'NOT_FOUND', /"\/nope"/);
    // A board started without --inventory says how to get the fleet view.
    expectRefusal(await call('/api/fleet/demo', { headers: bearer }), 404, 'NOT_FOUND', /--inventory <fleet\.yaml>/);
  });

  it('log in only with a known token, from the same origin', async () => {
    const login = (token: string, origin: string) =>
      call('/api/login', {
        method: 'POST',
        headers: { origin, 'content-type': 'application/json' },
        body: JSON.stringify({ token }),
      });
    expectRefusal(await login(TOKEN, 'http://evil.example'), 403, 'FORBIDDEN', /Origin "http:\/\/evil\.example"/);
    expectRefusal(await login('not-a-token-at-all-000', board!.url), 401, 'UNAUTHORIZED', /token/);
    // The token is never logged, a refused one neither.
    expect(logged.join('\n')).not.toContain('not-a-token-at-all-000');
    const s = await (async () => {
      const ok = await login(TOKEN, board!.url);
      expect(ok.status).toBe(200);
      return ok;
    })();
    expect(s.headers.get('set-cookie')).not.toContain(TOKEN);
  });

  it('refuse unknown and malformed rollout ids, naming them', async () => {
    const unknown = await call(`/api/rollouts/${encodeURIComponent('rollout:demo:20990101-000000')}`, {
      headers: bearer,
    });
    expectRefusal(unknown, 404, 'NOT_FOUND', /no rollout with id "rollout:demo:20990101-000000"/);
    const events = await call(`/api/rollouts/${encodeURIComponent('rollout:demo:20990101-000000')}/events`, {
      headers: bearer,
    });
    expectRefusal(events, 404, 'NOT_FOUND', /rollout:demo:20990101-000000/);
    expectRefusal(
      await call('/api/rollouts/%2E%2E%2Fetc', { headers: bearer }),
      400,
      'INVALID_INPUT',
      /rollout id "\.\.\/etc"/,
    );
    expectRefusal(await call('/api/rollouts/%E0%A4%A', { headers: bearer }), 400, 'INVALID_INPUT', /percent-encoding/);
    expectRefusal(
      await call('/api/rollouts/rollout:demo:x?state=exploded', { headers: bearer }),
      400,
      'INVALID_INPUT',
      /state "exploded": must be one of failed/,
    );
    expectRefusal(
      await call('/api/rollouts/rollout:demo:x?limit=100000', { headers: bearer }),
      400,
      'INVALID_INPUT',
      /limit "100000": must be a whole number 0-500/,
    );
    expectRefusal(
      await call(`/api/rollouts/${'a'.repeat(3000)}`, { headers: bearer }),
      414,
      'INVALID_INPUT',
      /above the limit of 2048/,
    );
    // A page of another site that resolves its own name to 127.0.0.1 (DNS rebinding) is not answered.
    const rebound = await new Promise<Answer>((resolve, reject) => {
      // fetch will not send another Host: a raw request does, as a rebound page's would.
      const r = request(`${board!.url}/api/rollouts`, { headers: { ...bearer, host: 'evil.example' } }, (res) => {
        let text = '';
        res.on('data', (c: Buffer) => (text += c.toString()));
        res.on('end', () => resolve({ status: res.statusCode!, body: JSON.parse(text), headers: new Headers() }));
      });
      r.on('error', reject);
      r.end();
    });
    expectRefusal(rebound, 421, 'FORBIDDEN', /Host "evil\.example"/);
  });

  it('refuse a control without a CSRF token, from another origin, not JSON, oversized or without a reason', async () => {
    const s = await login();
    const path = `/api/rollouts/${encodeURIComponent('rollout:demo:20990101-000000')}/pause`;
    expectRefusal(await control(path, { ...s, csrf: '' }, { reason: 'r' }), 403, 'FORBIDDEN', /X-CSRF-Token/);
    expectRefusal(
      await control(path, { ...s, csrf: 'f'.repeat(64) }, { reason: 'r' }),
      403,
      'FORBIDDEN',
      /X-CSRF-Token/,
    );
    expectRefusal(
      await control(path, s, { reason: 'r' }, { origin: 'http://evil.example' }),
      403,
      'FORBIDDEN',
      /Origin/,
    );
    expectRefusal(
      await control(path, s, { reason: 'r' }, { 'content-type': 'text/plain' }),
      415,
      'INVALID_INPUT',
      /Content-Type "text\/plain"/,
    );
    expectRefusal(await control(path, s, { reason: 'x'.repeat(20_000) }), 413, 'TOO_LARGE', /limit of 16384/);
    expectRefusal(await control(path, s, '{"reason":'), 400, 'INVALID_INPUT', /not JSON/);
    expectRefusal(await control(path, s, { reason: '  ' }), 400, 'INVALID_INPUT', /reason: pause needs a reason/);
    expectRefusal(await control(path, s, { reason: 'x'.repeat(501) }), 400, 'INVALID_INPUT', /reason: at most 500/);
    expectRefusal(
      await control(path, s, { reason: 'ok', rollback: false }),
      400,
      'INVALID_INPUT',
      /rollback: not a field of pause/,
    );
    expectRefusal(
      await control(path, s, { reason: 'ok' }),
      404,
      'NOT_FOUND',
      /no rollout with id "rollout:demo:20990101-000000"/,
    );
    // A revert names the devices the page showed (their number and digest); an unknown rollout is named.
    const revert = path.replace(/pause$/, 'revert');
    const digest = 'ab'.repeat(32);
    expectRefusal(
      await control(revert, s, { fast: true, digest }),
      400,
      'INVALID_INPUT',
      /devices: the number of devices the page showed/,
    );
    expectRefusal(
      await control(revert, s, { devices: 2 }),
      400,
      'INVALID_INPUT',
      /digest: the fingerprint of the devices the page showed/,
    );
    expectRefusal(
      await control(revert, s, { devices: 2, digest, fast: 'yes' }),
      400,
      'INVALID_INPUT',
      /fast: must be true or false/,
    );
    expectRefusal(
      await control(revert, s, { devices: 2, digest }),
      404,
      'NOT_FOUND',
      /no rollout with id "rollout:demo:20990101-000000"/,
    );
    expectRefusal(await call(revert, { headers: bearer }), 404, 'NOT_FOUND', /rollout:demo:20990101-000000/);
    expectRefusal(await control(revert, { ...s, csrf: '' }, { devices: 2, digest }), 403, 'FORBIDDEN', /X-CSRF-Token/);
    // Without a session or a token: 401, not a CSRF complaint.
    expectRefusal(await control(path, { cookie: '', csrf: s.csrf }, { reason: 'ok' }), 401, 'UNAUTHORIZED', /token/);
    expectRefusal(await call(path, { headers: bearer }), 405, 'METHOD_NOT_ALLOWED', /only POST/);
  });

  it('refuse a converge without a token or CSRF token, without the inventory, with a bad body, or with no completed rollout', async () => {
    const s = await login();
    const path = '/api/fleet/demo/converge';
    const body = { devices: 1, digest: 'a'.repeat(64), reason: 'bring edge-05 to r2' };
    expectRefusal(await control(path, { cookie: '', csrf: '' }, body), 401, 'UNAUTHORIZED', /token/);
    expectRefusal(await control(path, { ...s, csrf: '' }, body), 403, 'FORBIDDEN', /X-CSRF-Token/);
    expectRefusal(await control(path, s, body, { origin: 'http://evil.example' }), 403, 'FORBIDDEN', /Origin/);
    expectRefusal(await call(path, { headers: bearer }), 405, 'METHOD_NOT_ALLOWED', /only POST/);
    expectRefusal(await control(path, s, body), 404, 'NOT_FOUND', /--inventory <fleet\.yaml>/);
    // A board with the fleet view: the body is checked, then the command's own refusal.
    const fleet = await startBoard({
      sources: {
        client: client!,
        audit: { where: resolveAuditLocation({ auditDir: join(scratch.dir, 'audit') }, { env: {} }) },
        transports: new Map(),
        taskQueue: 'board-endpoints-none',
        profilesRoot: join(PROJECT_ROOT, 'profiles'),
      },
      fleet: {
        client: client!,
        inventory: join(PROJECT_ROOT, 'examples', 'fleet-ssh.yaml'),
        profiles: join(PROJECT_ROOT, 'profiles'),
        temporal: { address: server!.address, taskQueue: 'board-endpoints-none' },
      },
      listen: { host: '127.0.0.1', port: 0 },
      tokens: [{ name: 'alice', token: TOKEN }],
      log: () => {},
    });
    try {
      const res = await fetch(`${fleet.url}/api/login`, {
        method: 'POST',
        headers: { origin: fleet.url, 'content-type': 'application/json' },
        body: JSON.stringify({ token: TOKEN }),
      });
      const f = {
        cookie: res.headers.get('set-cookie')!.split(';')[0]!,
        csrf: ((await res.json()) as { csrf: string }).csrf,
      };
      const post = async (to: string, sent: unknown) => {
        const r = await fetch(`${fleet.url}${to}`, {
          method: 'POST',
          headers: { cookie: f.cookie, origin: fleet.url, 'content-type': 'application/json', 'x-csrf-token': f.csrf },
          body: JSON.stringify(sent),
        });
        return { status: r.status, body: (await r.json()) as Answer['body'], headers: r.headers };
      };
      expectRefusal(await post(path, { ...body, digest: 'abc' }), 400, 'INVALID_INPUT', /digest: the fingerprint/);
      expectRefusal(await post(path, { ...body, devices: 0 }), 400, 'INVALID_INPUT', /devices: the number of devices/);
      expectRefusal(
        await post(path, { ...body, reason: ' ' }),
        400,
        'INVALID_INPUT',
        /reason: converge needs a reason/,
      );
      expectRefusal(await post(path, { ...body, fast: true }), 400, 'INVALID_INPUT', /fast: not a field of converge/);
      expectRefusal(await post('/api/fleet/nope/converge', body), 404, 'NOT_FOUND', /profile "nope"/);
      expectRefusal(
        await post(path, body),
        404,
        'NOT_FOUND',
        /^profile "demo" has no completed rollout to converge to; use `wavegate start`$/,
      );
    } finally {
      await fleet.close();
    }
  });

  it('`wavegate board` refuses to listen beyond loopback without HTTPS and a login (exit 2)', async () => {
    const env = { TEMPORAL_ADDRESS: '', TEMPORAL_PROFILE: '', TEMPORAL_CONFIG_FILE: join(scratch.dir, 'none.toml') };
    const open = await runCli(['board', '--listen', '0.0.0.0:0', '--address', server!.address], { env });
    expect(open.code).toBe(2);
    expect(open.stderr).toMatch(/--listen 0\.0\.0\.0:0: beyond 127\.0\.0\.1.*needs HTTPS/);
    const tokens = join(scratch.dir, 'tokens');
    writeFileSync(tokens, 'alice short token\n', { mode: 0o600 });
    const bad = await runCli(['board', '--token-file', tokens, '--address', server!.address], { env });
    expect(bad.code).toBe(2);
    // A third word is a role (viewer, operator, approver): this one is none, named.
    expect(bad.stderr).toMatch(
      /--token-file .*line 1: the role of "alice" is "token": one of viewer, operator, approver/,
    );
    const cert = await runCli(['board', '--https-cert', tokens, '--address', server!.address], { env });
    expect(cert.code).toBe(2);
    expect(cert.stderr).toMatch(/--https-cert and --https-key: give both/);
    const ca = await runCli(['board', '--client-ca', tokens, '--address', server!.address], { env });
    expect(ca.code).toBe(2);
    expect(ca.stderr).toMatch(/--client-ca: client certificates need HTTPS/);
  });
  it('search and page the rollout list, and refuse a page size over the bound or a malformed search naming it', async () => {
    // Three listed rollouts (no worker runs them: the list reads visibility and their search attributes).
    const ids = ['list:alpha:1', 'list:alpha:2', 'list:beta:1'];
    for (const id of ids)
      await client!.workflow.start('rolloutWorkflow', {
        workflowId: id,
        taskQueue: 'board-endpoints-none',
        args: [],
        typedSearchAttributes: [
          { key: WavegateProfile, value: id.split(':')[1]! },
          { key: WavegateState, value: id === 'list:beta:1' ? 'paused' : 'running' },
        ],
      });
    type Listed = { rollouts: { workflowId: string }[]; matching: number; page: number; pages: number };
    const list = async (query: string) => {
      const a = await call(`/api/rollouts?${query}`, { headers: bearer });
      expect(a.status).toBe(200);
      return a.body as unknown as Listed;
    };
    const listedIds = (l: Listed) => l.rollouts.map((r) => r.workflowId).sort();
    await until('the three rollouts listed', async () => ((await list('q=list:')).matching === 3 ? true : undefined));
    const first = await list('q=list:&limit=2');
    expect({ matching: first.matching, pages: first.pages, rows: first.rollouts.length }).toEqual({
      matching: 3,
      pages: 2,
      rows: 2,
    });
    const second = await list('q=list:&limit=2&page=1');
    expect(second.rollouts).toHaveLength(1);
    expect([...listedIds(first), ...listedIds(second)].sort()).toEqual(ids);
    // The search matches an id, a profile or a state, in any case; state and profile filter exactly.
    expect(listedIds(await list('q=BETA'))).toEqual(['list:beta:1']);
    expect(listedIds(await list('q=paused'))).toEqual(['list:beta:1']);
    expect(listedIds(await list('profile=alpha'))).toEqual(['list:alpha:1', 'list:alpha:2']);
    expect(listedIds(await list('state=paused&q=list'))).toEqual(['list:beta:1']);
    expect((await list('q=nothing-like-it')).matching).toBe(0);

    const refused = async (query: string, mentions: RegExp) =>
      expectRefusal(await call(`/api/rollouts?${query}`, { headers: bearer }), 400, 'INVALID_INPUT', mentions);
    await refused('limit=101', /limit "101": must be a whole number 0-100/);
    await refused('page=-1', /page "-1": must be a whole number/);
    await refused(
      `q=${encodeURIComponent("x' OR WorkflowId != '")}`,
      /q "x' OR WorkflowId != '": a search is 1-100 letters/,
    );
    await refused('state=bogus', /state "bogus": must be one of running, paused/);
    await refused(`profile=${encodeURIComponent("a' OR 1=1")}`, /profile: must be lowercase letters.*"a' OR 1=1"/);
    await refused('pagesize=10', /"pagesize": not a parameter of the rollout list/);
    for (const id of ids) await client!.workflow.getHandle(id).terminate('listed for the test');

    // A device's history: its id checked as the inventory's are; the terminated runs (no worker to answer
    // their status here) are counted as not readable, not guessed at.
    expectRefusal(
      await call(`/api/devices/${encodeURIComponent('web 1;rm')}/history`, { headers: bearer }),
      400,
      'INVALID_INPUT',
      /device id "web 1;rm": must be 1-128 letters/,
    );
    expectRefusal(
      await call(`/api/devices/${'d'.repeat(129)}/history`, { headers: bearer }),
      400,
      'INVALID_INPUT',
      /device id/,
    );
    expectRefusal(await call('/api/devices/web-1/history'), 401, 'UNAUTHORIZED', /token/);
    const history = await call('/api/devices/web-1/history', { headers: bearer });
    expect(history.status).toBe(200);
    expect(history.body).toMatchObject({ device: 'web-1', rollouts: [], read: 3, unread: 3, scanLimit: 200 });
  });
  it('answers 503 UNAVAILABLE, not a crash, while Temporal is away, and goes on serving', async () => {
    // A client of a port nothing listens on: every read fails UNAVAILABLE, retried by the board for
    // readRetryMs (the SDK's own ~20 s of retries left out: `interceptors: []`).
    const away = new Client({
      connection: Connection.lazy({ address: `127.0.0.1:${await freePort()}`, interceptors: [] }),
    });
    const lonely = await startBoard({
      sources: {
        client: away,
        audit: { where: resolveAuditLocation({ auditDir: join(scratch.dir, 'audit') }, { env: {} }) },
        transports: new Map(),
        taskQueue: 'board-endpoints-none',
        profilesRoot: join(PROJECT_ROOT, 'profiles'),
        readRetryMs: 1_000,
      },
      listen: { host: '127.0.0.1', port: 0 },
      tokens: [{ name: 'alice', token: TOKEN }],
      log: () => {},
    });
    try {
      const started = Date.now();
      const res = await fetch(`${lonely.url}/api/rollouts`, { headers: bearer });
      const body = (await res.json()) as { code: string; message: string };
      expect({ status: res.status, code: body.code }).toEqual({ status: 503, code: 'UNAVAILABLE' });
      expect(body.message).toMatch(/the rollout list failed for \d+ s, giving up/);
      expect(Date.now() - started).toBeGreaterThanOrEqual(1_000);
      // Still serving: the page and the next request are answered.
      expect((await fetch(`${lonely.url}/`)).status).toBe(200);
      expect((await fetch(`${lonely.url}/api/session`, { headers: bearer })).status).toBe(200);
    } finally {
      await lonely.close();
      await away.connection.close().catch(() => {});
    }
  });
  it("over HTTPS with client certificates: the certificate's CN is the operator; no certificate, no answer", async () => {
    const pki = makeTestPki(join(scratch.dir, 'pki'));
    const secure = await startBoard({
      sources: {
        client: client!,
        audit: { where: resolveAuditLocation({ auditDir: join(scratch.dir, 'audit') }, { env: {} }) },
        transports: new Map(),
        taskQueue: 'board-endpoints-none',
        profilesRoot: join(PROJECT_ROOT, 'profiles'),
      },
      listen: {
        host: '127.0.0.1',
        port: 0,
        tls: {
          cert: readFileSync(pki.serverCert),
          key: readFileSync(pki.serverKey),
          clientCa: readFileSync(pki.caCert),
        },
      },
      log: () => {},
    });
    const get = (path: string, withCert: boolean) =>
      new Promise<{ status: number; body: string }>((resolve, reject) => {
        const r = httpsRequest(
          `${secure.url}${path}`,
          {
            ca: readFileSync(pki.caCert),
            ...(withCert ? { cert: readFileSync(pki.clientCert), key: readFileSync(pki.clientKey) } : {}),
          },
          (res) => {
            let text = '';
            res.on('data', (c: Buffer) => (text += c.toString()));
            res.on('end', () => resolve({ status: res.statusCode!, body: text }));
          },
        );
        r.on('error', reject);
        r.end();
      });
    try {
      expect(secure.url).toMatch(/^https:\/\/127\.0\.0\.1:/);
      const session = await get('/api/session', true);
      expect(session.status).toBe(200);
      expect(JSON.parse(session.body).operator).toBe('wavegate worker');
      // Without a client certificate the TLS handshake itself is refused: nothing is answered.
      await expect(get('/api/session', false)).rejects.toThrow();
    } finally {
      await secure.close();
    }
  });
});
