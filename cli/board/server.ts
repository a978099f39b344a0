import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer as createHttpServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import type { TLSSocket } from 'node:tls';
import {
  BOARD_CONTROLS,
  checkRolloutId,
  parseControlBody,
  parseConvergeBody,
  parseDeviceQuery,
  parseRevertBody,
  type BoardControl,
} from '../../core/board';
import { WavegateError } from '../../core/errors';
import { HttpRefusal, parseJsonObject, readBody, sendJson } from '../../gateway/http';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { firstLineOf } from '../client';
import {
  auditView,
  liveFingerprint,
  revertPreview,
  rolloutRows,
  rolloutView,
  sendBoardControl,
  startBoardRevert,
  type BoardSources,
} from './data';
import { fleetProfiles, fleetView, startBoardConverge, type FleetSource } from './fleet';

/**
 * The board's HTTP layer (`wavegate board`, docs/cli.md): static files from board/static/ (no build
 * step), a JSON API, and server-sent events for live updates. Thin: every decision is in core/board.ts,
 * every read and control in ./data.ts. Security (SECURITY.md, "The board"): who is asking (a token, a
 * client certificate, or on loopback alone the OS user), a per-session CSRF token and a same-origin
 * check on every state-changing request, bounded bodies, headers, URLs, streams and time.
 */

/** Bounds of every request (docs/operations.md, "The board"). */
export const BOARD_LIMITS = {
  maxBodyBytes: 16 * 1024,
  maxUrlChars: 2048,
  maxHeaderBytes: 8 * 1024,
  headersTimeoutMs: 10_000,
  requestTimeoutMs: 30_000,
  keepAliveMs: 5_000,
  /** Live-update streams open at once; more are answered 503 BUSY. */
  maxStreams: 32,
  maxSessions: 1_000,
  sessionMs: 12 * 3600_000,
  /** How often a stream polls the rollout's status (one query; the whole view only when it changed). */
  pollMs: 1_000,
  heartbeatMs: 15_000,
} as const;

export interface BoardServerOptions {
  sources: BoardSources;
  /** The fleet view's inventory and profiles (`--inventory`); without it the view says how to enable it. */
  fleet?: FleetSource;
  listen: { host: string; port: number; tls?: { cert: Buffer; key: Buffer; clientCa?: Buffer } };
  /** `<name> <token>` pairs (--token-file): the name is the identity recorded in controls. */
  tokens?: ReadonlyArray<{ name: string; token: string }>;
  /** The identity of a board that asks for none (loopback without tokens): the OS user, as the CLI records. */
  localOperator: string;
  log: (line: string) => void;
  pollMs?: number;
  maxStreams?: number;
  /** The page's files (default <package>/board/static). */
  staticDir?: string;
}

export interface BoardServer {
  url: string;
  close(): Promise<void>;
}

const STATIC_FILES: Record<string, { file: string; type: string }> = {
  '/': { file: 'index.html', type: 'text/html; charset=utf-8' },
  '/board.js': { file: 'board.js', type: 'text/javascript; charset=utf-8' },
  '/board.css': { file: 'board.css', type: 'text/css; charset=utf-8' },
};

const SECURITY_HEADERS: Record<string, string> = {
  'content-security-policy':
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
  'cross-origin-opener-policy': 'same-origin',
  'cross-origin-resource-policy': 'same-origin',
};

const COOKIE = 'wavegate_board';
const STATUS_OF_CODE: Record<string, number> = {
  INVALID_INPUT: 400,
  NOT_FOUND: 404,
  CONFLICT: 409,
  INVALID_STATE: 409,
  UNAVAILABLE: 503,
  FAILED: 502,
};

interface Session {
  operator: string;
  csrf: string;
  expires: number;
}

const digest = (text: string) => createHash('sha256').update(text).digest();

export async function startBoard(opts: BoardServerOptions): Promise<BoardServer> {
  const staticDir = opts.staticDir ?? join(PROJECT_ROOT, 'board', 'static');
  // Read once at start: a missing file is found now, not on a user's first visit.
  const files = new Map(
    Object.entries(STATIC_FILES).map(([path, f]) => [
      path,
      { body: readFileSync(join(staticDir, f.file)), type: f.type },
    ]),
  );
  const tokens = (opts.tokens ?? []).map((t) => ({ name: t.name, digest: digest(t.token) }));
  const tls = opts.listen.tls;
  const open = tokens.length === 0 && !tls?.clientCa;
  const sessions = new Map<string, Session>();
  const streams = new Set<ServerResponse>();
  const pollMs = opts.pollMs ?? BOARD_LIMITS.pollMs;
  const maxStreams = opts.maxStreams ?? BOARD_LIMITS.maxStreams;
  let closing = false;

  /** The token's name, comparing digests in constant time against every token (no early exit on a match). */
  function tokenName(token: string): string | undefined {
    const d = digest(token);
    let found: string | undefined;
    for (const t of tokens) if (timingSafeEqual(d, t.digest)) found ??= t.name;
    return found;
  }

  function cookieOf(req: IncomingMessage): string | undefined {
    for (const part of (req.headers.cookie ?? '').split(';')) {
      const [k, v] = part.trim().split('=');
      if (k === COOKIE && v && /^[0-9a-f]{64}$/.test(v)) return v;
    }
    return undefined;
  }

  function sessionOf(req: IncomingMessage): { id: string; session: Session } | undefined {
    const id = cookieOf(req);
    const session = id ? sessions.get(id) : undefined;
    if (!id || !session) return undefined;
    if (session.expires < Date.now()) {
      sessions.delete(id);
      return undefined;
    }
    return { id, session };
  }

  /** Who is asking, without a session: a client certificate, a bearer token, or (open board) the OS user. */
  function identityOf(req: IncomingMessage): string | undefined {
    const socket = req.socket as TLSSocket;
    if (tls?.clientCa && socket.authorized) {
      const cn = socket.getPeerCertificate()?.subject?.CN;
      if (typeof cn === 'string' && cn) return cn;
    }
    const auth = req.headers.authorization;
    if (auth?.startsWith('Bearer ') && tokens.length) return tokenName(auth.slice(7).trim());
    return open ? opts.localOperator : undefined;
  }

  function newSession(res: ServerResponse, operator: string): Session {
    if (sessions.size >= BOARD_LIMITS.maxSessions) sessions.delete(sessions.keys().next().value!);
    const id = randomBytes(32).toString('hex');
    const session = { operator, csrf: randomBytes(32).toString('hex'), expires: Date.now() + BOARD_LIMITS.sessionMs };
    sessions.set(id, session);
    res.setHeader(
      'set-cookie',
      `${COOKIE}=${id}; HttpOnly; SameSite=Strict; Path=/; Max-Age=${BOARD_LIMITS.sessionMs / 1000}${tls ? '; Secure' : ''}`,
    );
    return session;
  }

  /** The session of a request: its cookie's, or one made now for an identity the request proves. */
  function authenticated(req: IncomingMessage): Session | undefined {
    const s = sessionOf(req)?.session;
    const identity = identityOf(req);
    if (s && (identity === undefined || identity === s.operator)) return s;
    return identity ? { operator: identity, csrf: '', expires: 0 } : undefined;
  }

  const hostsAllowed = (() => {
    const port = () => (server.address() as AddressInfo).port;
    return (host: string | undefined) => {
      if (!host) return false;
      if (!LOOPBACK.has(opts.listen.host)) return true;
      // A loopback board answers only to its own names: a DNS-rebinding page cannot reach it by another.
      const p = port();
      return [`127.0.0.1:${p}`, `localhost:${p}`, `[::1]:${p}`].includes(host.toLowerCase());
    };
  })();

  /** State changes come from this board's own page: same origin, JSON, with the session's CSRF token. */
  function checkSameOrigin(req: IncomingMessage): void {
    const origin = req.headers.origin;
    const expected = `${tls ? 'https' : 'http'}://${req.headers.host}`;
    if (origin !== undefined ? origin !== expected : req.headers['sec-fetch-site'] !== 'same-origin')
      throw new HttpRefusal(
        403,
        'FORBIDDEN',
        `Origin ${JSON.stringify(origin ?? null)}: a state-changing request must come from the board's own page (${expected})`,
      );
    const type = (req.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
    if (type !== 'application/json')
      throw new HttpRefusal(415, 'INVALID_INPUT', `Content-Type ${JSON.stringify(type)}: must be application/json`);
  }

  function checkCsrf(req: IncomingMessage): Session {
    const found = sessionOf(req);
    if (!found) {
      if (identityOf(req) === undefined)
        throw new HttpRefusal(
          401,
          'UNAUTHORIZED',
          "no valid token or session: log in with a token from the board's token file",
        );
      throw new HttpRefusal(
        403,
        'FORBIDDEN',
        'X-CSRF-Token: no session to check it against; load the board page first',
      );
    }
    const sent = req.headers['x-csrf-token'];
    if (
      typeof sent !== 'string' ||
      sent.length !== 64 ||
      !timingSafeEqual(Buffer.from(sent), Buffer.from(found.session.csrf))
    )
      throw new HttpRefusal(403, 'FORBIDDEN', "X-CSRF-Token: missing or not this session's; reload the board page");
    return found.session;
  }

  async function jsonBody(req: IncomingMessage): Promise<Record<string, unknown>> {
    return parseJsonObject(await readBody(req, BOARD_LIMITS.maxBodyBytes));
  }

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    for (const [k, v] of Object.entries(SECURITY_HEADERS)) res.setHeader(k, v);
    const rawUrl = req.url ?? '/';
    if (rawUrl.length > BOARD_LIMITS.maxUrlChars)
      throw new HttpRefusal(
        414,
        'INVALID_INPUT',
        `the URL is ${rawUrl.length} characters, above the limit of ${BOARD_LIMITS.maxUrlChars}`,
      );
    if (!hostsAllowed(req.headers.host))
      throw new HttpRefusal(
        421,
        'FORBIDDEN',
        `Host ${JSON.stringify(req.headers.host ?? null)}: this board answers to its loopback address only`,
      );
    const url = new URL(rawUrl, 'http://board');
    const path = url.pathname;
    const method = req.method ?? 'GET';
    const page = files.get(path);
    if (page) {
      if (method !== 'GET' && method !== 'HEAD') throw methodRefusal(method, path, 'GET');
      res.writeHead(200, {
        'content-type': page.type,
        'content-length': page.body.length,
        'cache-control': 'no-cache',
      });
      res.end(method === 'HEAD' ? undefined : page.body);
      return;
    }
    if (!path.startsWith('/api/'))
      throw new HttpRefusal(404, 'NOT_FOUND', `no page ${JSON.stringify(path.slice(0, 100))}`);
    res.setHeader('cache-control', 'no-store');

    if (path === '/api/login') {
      if (method !== 'POST') throw methodRefusal(method, path, 'POST');
      checkSameOrigin(req);
      const body = await jsonBody(req);
      if (typeof body.token !== 'string' || body.token.length > 256)
        throw new HttpRefusal(400, 'INVALID_INPUT', 'token: a string of at most 256 characters is required');
      const name = tokens.length ? tokenName(body.token) : undefined;
      if (!name) {
        opts.log(`board: a login with an unknown token from ${req.socket.remoteAddress}`);
        await new Promise((r) => setTimeout(r, 250)); // a guess costs time
        throw new HttpRefusal(401, 'UNAUTHORIZED', "token: not one of the board's tokens");
      }
      const s = newSession(res, name);
      sendJson(res, 200, { operator: s.operator, csrf: s.csrf });
      return;
    }
    if (path === '/api/logout') {
      if (method !== 'POST') throw methodRefusal(method, path, 'POST');
      checkSameOrigin(req);
      const found = sessionOf(req);
      if (found) sessions.delete(found.id);
      res.setHeader('set-cookie', `${COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0`);
      sendJson(res, 200, { ok: true });
      return;
    }

    const who = authenticated(req);
    if (!who)
      throw new HttpRefusal(
        401,
        'UNAUTHORIZED',
        "no valid token or session: log in with a token from the board's token file",
      );

    if (path === '/api/session') {
      if (method !== 'GET') throw methodRefusal(method, path, 'GET');
      // A page without a session gets one now (its cookie carries no secret of the operator's: a random id).
      const s = sessionOf(req)?.session ?? newSession(res, who.operator);
      sendJson(res, 200, { operator: s.operator, csrf: s.csrf, open, pollMs });
      return;
    }
    if (path === '/api/rollouts') {
      if (method !== 'GET') throw methodRefusal(method, path, 'GET');
      sendJson(res, 200, { rollouts: await rolloutRows(opts.sources) });
      return;
    }
    const converge = /^\/api\/fleet\/([^/]+)\/converge$/.exec(path);
    if (converge) {
      if (method !== 'POST') throw methodRefusal(method, path, 'POST');
      checkSameOrigin(req);
      const session = checkCsrf(req);
      if (!opts.fleet) throw noFleet();
      const body = parseConvergeBody(await jsonBody(req));
      const done = await startBoardConverge(
        opts.fleet,
        opts.sources.taskQueue,
        decoded(converge[1]!, 'profile'),
        body,
        session.operator,
      );
      // The converge's reason: its rollout records who started it, this log what they said.
      opts.log(`board: ${done.message}: ${body.reason}`);
      return sendJson(res, 200, done);
    }
    if (path === '/api/fleet' || path.startsWith('/api/fleet/')) {
      if (method !== 'GET') throw methodRefusal(method, path, 'GET');
      if (!opts.fleet) throw noFleet();
      if (path === '/api/fleet') return sendJson(res, 200, fleetProfiles(opts.fleet));
      const fresh = url.searchParams.get('fresh') === '1';
      return sendJson(
        res,
        200,
        await fleetView(opts.fleet, decoded(path.slice('/api/fleet/'.length), 'profile'), fresh),
      );
    }
    const m = /^\/api\/rollouts\/([^/]+)(?:\/([a-z]+))?$/.exec(path);
    if (!m) throw new HttpRefusal(404, 'NOT_FOUND', `no endpoint ${JSON.stringify(path.slice(0, 100))}`);
    const id = checkRolloutId(decoded(m[1]!, 'rollout id'));
    const action = m[2];
    if (action === undefined || action === 'events' || action === 'audit') {
      if (method !== 'GET') throw methodRefusal(method, path, 'GET');
      if (action === 'audit') return sendJson(res, 200, await auditView(opts.sources, id));
      const query = parseDeviceQuery(url.searchParams);
      if (action === undefined) return sendJson(res, 200, await rolloutView(opts.sources, id, query));
      return stream(req, res, id, query);
    }
    if (action === 'revert') {
      if (method === 'GET') return sendJson(res, 200, await revertPreview(opts.sources, id));
      if (method !== 'POST') throw methodRefusal(method, path, 'GET or POST');
      checkSameOrigin(req);
      const session = checkCsrf(req);
      const body = parseRevertBody(await jsonBody(req));
      const done = await startBoardRevert(opts.sources, id, body, session.operator);
      opts.log(`board: ${done.message}`);
      return sendJson(res, 200, done);
    }
    if ((BOARD_CONTROLS as readonly string[]).includes(action)) {
      if (method !== 'POST') throw methodRefusal(method, path, 'POST');
      checkSameOrigin(req);
      const session = checkCsrf(req);
      const body = parseControlBody(action as BoardControl, await jsonBody(req));
      const done = await sendBoardControl(opts.sources, id, action as BoardControl, body, session.operator);
      opts.log(`board: ${action} of ${id} by ${session.operator}: ${body.reason}`);
      return sendJson(res, 200, done);
    }
    throw new HttpRefusal(404, 'NOT_FOUND', `no endpoint ${JSON.stringify(path.slice(0, 100))}`);
  }

  /** Server-sent events: the rollout's view each time its status changes, until it has closed. */
  async function stream(
    req: IncomingMessage,
    res: ServerResponse,
    id: string,
    query: ReturnType<typeof parseDeviceQuery>,
  ): Promise<void> {
    if (streams.size >= maxStreams)
      throw new HttpRefusal(
        503,
        'BUSY',
        `${maxStreams} live streams are open, the limit; close a board tab or try again`,
      );
    // Unknown ids are refused as JSON before the stream starts.
    let view = await rolloutView(opts.sources, id, query);
    streams.add(res);
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-store', connection: 'keep-alive' });
    req.socket.setTimeout(0);
    let ended = false;
    const end = () => {
      ended = true;
      streams.delete(res);
    };
    req.on('close', end);
    const send = (event: string, data: unknown) => res.write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
    send('view', view);
    let last = '';
    let lastWrite = Date.now();
    while (!ended && !closing) {
      await new Promise((r) => setTimeout(r, pollMs));
      if (ended || closing) break;
      try {
        const print = await liveFingerprint(opts.sources, id);
        if (print !== last) {
          last = print;
          view = await rolloutView(opts.sources, id, query);
          send('view', view);
          lastWrite = Date.now();
        }
        if (view.temporalStatus !== 'RUNNING') {
          send('end', { state: view.state });
          break;
        }
      } catch (err) {
        // Temporal away for longer than a read's retries: say so on the page and keep polling.
        send('problem', { message: err instanceof WavegateError ? err.message : firstLineOf(err) });
        lastWrite = Date.now();
        await new Promise((r) => setTimeout(r, 5 * pollMs));
      }
      if (Date.now() - lastWrite > BOARD_LIMITS.heartbeatMs) {
        res.write(': still here\n\n');
        lastWrite = Date.now();
      }
    }
    end();
    res.end();
  }

  function refuse(res: ServerResponse, err: unknown): void {
    let status = 500;
    let code = 'INTERNAL';
    let message = "an unexpected error; the board's log says more";
    if (err instanceof HttpRefusal) ({ status, code, message } = err);
    else if (err instanceof WavegateError) {
      status = STATUS_OF_CODE[err.code] ?? 500;
      code = err.code;
      message = err.message;
    } else opts.log(`board: unexpected error: ${firstLineOf(err)}`);
    if (res.headersSent) {
      res.end();
      return;
    }
    // No stack trace, ever: the code and a message naming the field and the value.
    sendJson(res, status, { code, message });
  }

  const serverOptions = {
    maxHeaderSize: BOARD_LIMITS.maxHeaderBytes,
    headersTimeout: BOARD_LIMITS.headersTimeoutMs,
    requestTimeout: BOARD_LIMITS.requestTimeoutMs,
    keepAliveTimeout: BOARD_LIMITS.keepAliveMs,
  };
  // Requests in flight, so that close() lets them end before the caller closes the Temporal client.
  const inFlight = new Set<Promise<void>>();
  const listener = (req: IncomingMessage, res: ServerResponse) => {
    const done = handle(req, res)
      .catch((err: unknown) => refuse(res, err))
      .finally(() => inFlight.delete(done));
    inFlight.add(done);
  };
  const server: Server = tls
    ? createHttpsServer(
        {
          ...serverOptions,
          cert: tls.cert,
          key: tls.key,
          ...(tls.clientCa ? { ca: tls.clientCa, requestCert: true, rejectUnauthorized: !tokens.length } : {}),
        },
        listener,
      )
    : createHttpServer(serverOptions, listener);
  server.on('clientError', (_err, socket) => {
    if (socket.writable) socket.end('HTTP/1.1 400 Bad Request\r\nconnection: close\r\n\r\n');
    else socket.destroy();
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.listen.port, opts.listen.host, () => resolve());
  });
  const address = server.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  return {
    url: `${tls ? 'https' : 'http'}://${host}:${address.port}`,
    async close() {
      closing = true;
      for (const res of streams) res.end();
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeAllConnections();
      await closed;
      const settled = Promise.allSettled([...inFlight]);
      await Promise.race([settled, new Promise((r) => setTimeout(r, 5_000).unref())]);
    },
  };
}

export const LOOPBACK = new Set(['127.0.0.1', '::1', 'localhost']);

function noFleet(): HttpRefusal {
  return new HttpRefusal(
    404,
    'NOT_FOUND',
    'the fleet view needs the inventory: start the board with --inventory <fleet.yaml> (and --profiles <dir>)',
  );
}

/** A path segment, percent-decoded: INVALID_INPUT naming it when it is not valid percent-encoding. */
function decoded(segment: string, what: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    throw new HttpRefusal(400, 'INVALID_INPUT', `${what}: not valid percent-encoding`);
  }
}

function methodRefusal(method: string, path: string, allowed: string): HttpRefusal {
  return new HttpRefusal(405, 'METHOD_NOT_ALLOWED', `${method} ${path.slice(0, 100)}: only ${allowed} is allowed here`);
}
