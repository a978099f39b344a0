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
  GuessBudget,
  parseControlBody,
  parseConvergeBody,
  parseDeviceQuery,
  parseRevertBody,
  type BoardControl,
} from '../../core/board';
import { WavegateError } from '../../core/errors';
import { HttpRefusal, parseJsonObject, readBody, sendJson } from '../../gateway/http';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { firstLineOf, isTransientFailure } from '../client';
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
import { fleetProfiles, fleetRevisionParam, fleetView, startBoardConverge, type FleetSource } from './fleet';

/**
 * The board's HTTP layer (`wavegate board`, docs/cli.md): static files from board/static/ (no build
 * step), a JSON API, and server-sent events for live updates. Thin: every decision is in core/board.ts,
 * every read and control in ./data.ts. Security (SECURITY.md, "The board"): who is asking (a token or a
 * client certificate, on loopback too), wrong tokens slowed, logged and limited per source, sessions per
 * operator, no API answer to another site, a per-session CSRF token and a same-origin check on every
 * state-changing request, bounded bodies, headers, URLs, streams and time (Temporal's included).
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
  /** A live stream ends after this long (the page's EventSource opens another): none is held for ever. */
  streamMs: 10 * 60_000,
  /** A stream's bytes waiting for a client that does not read them: past this the stream is dropped. */
  streamBufferBytes: 1024 * 1024,
  maxSessions: 1_000,
  /** Sessions of one operator: a new one ends that operator's oldest, never another operator's. */
  sessionsPerOperator: 16,
  sessionMs: 12 * 3600_000,
  /** An answer that needs Temporal comes within this, else 503 UNAVAILABLE (docs/operations.md). */
  temporalMs: 10_000,
  /** A control, once Temporal answered: the workflow takes it (a worker's task, slower on a busy host). */
  controlMs: 30_000,
  /** A revert or converge start, once Temporal answered: its checks and the worker preflight (30 s). */
  startMs: 60_000,
  /** What a wrong token costs: this long, and a log line (without the token). */
  wrongTokenMs: 250,
  /** Wrong tokens from one client address: a burst of this many, then one per guessRefillMs (429 beyond). */
  guessBurst: 10,
  guessRefillMs: 6_000,
  /** How often a stream polls the rollout's status (one query; the whole view only when it changed). */
  pollMs: 1_000,
  heartbeatMs: 15_000,
} as const;

export interface BoardServerOptions {
  sources: BoardSources;
  /** The fleet view's inventory and profiles (`--inventory`); without it the view says how to enable it. */
  fleet?: FleetSource;
  listen: { host: string; port: number; tls?: { cert: Buffer; key: Buffer; clientCa?: Buffer } };
  /**
   * `<name> <token>` pairs (--token-file, or the board's own token file): the name is the identity
   * recorded in controls. A board has tokens, client certificates (listen.tls.clientCa) or both.
   */
  tokens?: ReadonlyArray<{ name: string; token: string }>;
  /**
   * The origin browsers reach the board at through a proxy (--public-url): its Host is answered beside the
   * loopback names, and a request sent to it must come from that origin.
   */
  publicUrl?: URL;
  log: (line: string) => void;
  pollMs?: number;
  maxStreams?: number;
  /** Test knobs: BOARD_LIMITS.streamMs and streamBufferBytes. */
  streamMs?: number;
  streamBufferBytes?: number;
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
  // Never a board that asks nobody: on loopback every local account can reach the port (SECURITY.md).
  if (tokens.length === 0 && !tls?.clientCa)
    throw new WavegateError('INVALID_INPUT', 'the board needs tokens or client certificates to know its operators', {
      field: '--token-file',
    });
  const sessions = new Map<string, Session>();
  const streams = new Set<ServerResponse>();
  let streamsOpen = 0;
  const guesses = new GuessBudget(BOARD_LIMITS.guessBurst, BOARD_LIMITS.guessRefillMs);
  const pollMs = opts.pollMs ?? BOARD_LIMITS.pollMs;
  const maxStreams = opts.maxStreams ?? BOARD_LIMITS.maxStreams;
  const streamMs = opts.streamMs ?? BOARD_LIMITS.streamMs;
  const streamBufferBytes = opts.streamBufferBytes ?? BOARD_LIMITS.streamBufferBytes;
  const publicUrl = opts.publicUrl;
  const connection = opts.sources.client.connection;
  // The cookie is Secure wherever the browser speaks HTTPS: to the board, or to the proxy before it.
  const secure = !!tls || publicUrl?.protocol === 'https:';
  let closing = false;

  /** The token's name, comparing digests in constant time against every token (no early exit on a match). */
  function tokenName(token: string): string | undefined {
    const d = digest(token);
    let found: string | undefined;
    for (const t of tokens) if (timingSafeEqual(d, t.digest)) found ??= t.name;
    return found;
  }

  const sourceOf = (req: IncomingMessage) => req.socket.remoteAddress ?? 'unknown';

  /** A source past its budget of wrong tokens is refused any token, right or wrong, until it refills. */
  function checkGuessBudget(req: IncomingMessage, res: ServerResponse): void {
    const waitMs = guesses.waitMs(sourceOf(req), Date.now());
    if (waitMs <= 0) return;
    const s = Math.ceil(waitMs / 1000);
    res.setHeader('retry-after', String(s));
    throw new HttpRefusal(
      429,
      'TOO_MANY_REQUESTS',
      `wrong tokens from ${sourceOf(req)}: more than ${BOARD_LIMITS.guessBurst} in a row, so no token from it is checked for ${s} s`,
    );
  }

  /** A wrong token, by the login form or a bearer header: the same cost, log line and budget either way. */
  async function wrongToken(req: IncomingMessage, how: string): Promise<never> {
    guesses.spend(sourceOf(req), Date.now());
    opts.log(`board: ${how} with an unknown token from ${sourceOf(req)}`);
    await new Promise((r) => setTimeout(r, BOARD_LIMITS.wrongTokenMs));
    throw new HttpRefusal(401, 'UNAUTHORIZED', "token: not one of the board's tokens");
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

  /**
   * Who is asking: a client certificate's CN, a bearer token's name (a wrong one costs as a wrong login
   * does), or a session's operator; undefined when the request proves nothing.
   */
  async function callerOf(req: IncomingMessage, res: ServerResponse): Promise<string | undefined> {
    const socket = req.socket as TLSSocket;
    if (tls?.clientCa && socket.authorized) {
      const cn = socket.getPeerCertificate()?.subject?.CN;
      if (typeof cn === 'string' && cn) return cn;
    }
    const auth = req.headers.authorization;
    if (auth !== undefined) {
      checkGuessBudget(req, res);
      const name = auth.startsWith('Bearer ') ? tokenName(auth.slice(7).trim()) : undefined;
      return name ?? (await wrongToken(req, 'a request'));
    }
    return sessionOf(req)?.session.operator;
  }

  /**
   * A session for `operator`: expired ones dropped first; an operator's sessions beyond
   * sessionsPerOperator end its own oldest, never another operator's; a full table refuses (503).
   */
  function newSession(res: ServerResponse, operator: string): Session {
    const now = Date.now();
    for (const [id, s] of sessions) if (s.expires < now) sessions.delete(id);
    const own = [...sessions].filter(([, s]) => s.operator === operator);
    if (own.length >= BOARD_LIMITS.sessionsPerOperator) sessions.delete(own[0]![0]);
    else if (sessions.size >= BOARD_LIMITS.maxSessions)
      throw new HttpRefusal(
        503,
        'BUSY',
        `${BOARD_LIMITS.maxSessions} sessions are open, the limit; sign out elsewhere or try again later`,
      );
    const id = randomBytes(32).toString('hex');
    const session = { operator, csrf: randomBytes(32).toString('hex'), expires: now + BOARD_LIMITS.sessionMs };
    sessions.set(id, session);
    res.setHeader(
      'set-cookie',
      `${COOKIE}=${id}; HttpOnly; SameSite=Strict; Path=/; Max-Age=${BOARD_LIMITS.sessionMs / 1000}${secure ? '; Secure' : ''}`,
    );
    return session;
  }

  const port = () => (server.address() as AddressInfo).port;

  /** A loopback board answers only to its own names (and --public-url's): a DNS-rebinding page gets none. */
  function hostAllowed(host: string | undefined): boolean {
    if (!host) return false;
    if (!LOOPBACK.has(opts.listen.host)) return true;
    const h = host.toLowerCase();
    if (publicUrl && h === publicUrl.host) return true;
    const p = port();
    return [`127.0.0.1:${p}`, `localhost:${p}`, `[::1]:${p}`].includes(h);
  }

  /** The origin the request's page is at: --public-url's when asked by its Host, else the board's own. */
  function originOf(req: IncomingMessage): string {
    const host = (req.headers.host ?? '').toLowerCase();
    if (publicUrl && host === publicUrl.host) return publicUrl.origin;
    return `${tls ? 'https' : 'http'}://${host}`;
  }

  /**
   * The API answers this board's own page, scripts and the address bar, never another site's page: a
   * cross-site or same-site fetch (another port of 127.0.0.1 is the same site) or a foreign Origin is
   * 403 before anything is read or checked (a fleet check runs a command on every device).
   */
  function checkNotCrossSite(req: IncomingMessage): void {
    const site = req.headers['sec-fetch-site'];
    if (site !== undefined && site !== 'same-origin' && site !== 'none')
      throw new HttpRefusal(
        403,
        'FORBIDDEN',
        `Sec-Fetch-Site ${JSON.stringify(site)}: the board's API answers only its own page (${originOf(req)})`,
      );
    const origin = req.headers.origin;
    if (origin !== undefined && origin !== originOf(req))
      throw new HttpRefusal(
        403,
        'FORBIDDEN',
        `Origin ${JSON.stringify(origin)}: the board's API answers only its own page (${originOf(req)})`,
      );
  }

  /** State changes come from this board's own page: same origin, JSON, with the session's CSRF token. */
  function checkSameOrigin(req: IncomingMessage): void {
    const origin = req.headers.origin;
    const expected = originOf(req);
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
    if (!found)
      throw new HttpRefusal(
        403,
        'FORBIDDEN',
        'X-CSRF-Token: no session to check it against; load the board page first',
      );
    const sent = req.headers['x-csrf-token'];
    if (
      typeof sent !== 'string' ||
      sent.length !== 64 ||
      !timingSafeEqual(Buffer.from(sent), Buffer.from(found.session.csrf))
    )
      throw new HttpRefusal(403, 'FORBIDDEN', "X-CSRF-Token: missing or not this session's; reload the board page");
    return found.session;
  }

  /**
   * `fn`'s answer within `ms`, or UNAVAILABLE naming what waited: its calls to Temporal carry that
   * deadline (they end with it), and the answer does not wait for the SDK's own retries (about 20 s a
   * call) nor a read's (10 s after its first failure) to give up.
   */
  async function temporal<T>(what: string, fn: () => Promise<T>, ms: number = BOARD_LIMITS.temporalMs): Promise<T> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () =>
          reject(
            new WavegateError('UNAVAILABLE', `${what}: Temporal did not answer within ${Math.round(ms / 1000)} s`),
          ),
        ms,
      );
    });
    const deadline = Date.now() + ms;
    try {
      return await Promise.race([connection.withDeadline(deadline, fn), late]);
    } catch (err) {
      // The call's own deadline (DEADLINE_EXCEEDED) may come a moment before the timer: the same answer.
      if (!(err instanceof WavegateError) && isTransientFailure(err) && Date.now() >= deadline - 1_000)
        throw new WavegateError('UNAVAILABLE', `${what}: Temporal did not answer within ${Math.round(ms / 1000)} s`, {
          cause: err,
        });
      throw err;
    } finally {
      clearTimeout(timer);
    }
  }

  /** Before a control, revert or converge (each bound longer: a worker takes part): is Temporal there? */
  const temporalAnswers = () =>
    temporal('the check that Temporal answers', () => connection.workflowService.getSystemInfo({}));

  async function jsonBody(req: IncomingMessage): Promise<Record<string, unknown>> {
    return parseJsonObject(await readBody(req, BOARD_LIMITS.maxBodyBytes));
  }

  async function login(req: IncomingMessage, res: ServerResponse, method: string, path: string): Promise<void> {
    if (method !== 'POST') throw methodRefusal(method, path, 'POST');
    checkSameOrigin(req);
    const body = await jsonBody(req);
    if (typeof body.token !== 'string' || body.token.length > 256)
      throw new HttpRefusal(400, 'INVALID_INPUT', 'token: a string of at most 256 characters is required');
    checkGuessBudget(req, res);
    const name = tokenName(body.token) ?? (await wrongToken(req, 'a login'));
    const s = newSession(res, name);
    sendJson(res, 200, { operator: s.operator, csrf: s.csrf });
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
    if (!hostAllowed(req.headers.host))
      throw new HttpRefusal(
        421,
        'FORBIDDEN',
        `Host ${JSON.stringify(req.headers.host ?? null)}: this board answers to its loopback address${publicUrl ? ` and ${publicUrl.host}` : ''} only${publicUrl ? '' : ' (behind a proxy: --public-url)'}`,
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
    checkNotCrossSite(req);

    if (path === '/api/login') return login(req, res, method, path);
    if (path === '/api/logout') {
      if (method !== 'POST') throw methodRefusal(method, path, 'POST');
      checkSameOrigin(req);
      // The caller's own session only: the one its cookie names.
      const found = sessionOf(req);
      if (found) sessions.delete(found.id);
      res.setHeader('set-cookie', `${COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0`);
      sendJson(res, 200, { ok: true });
      return;
    }

    const operator = await callerOf(req, res);
    if (!operator)
      throw new HttpRefusal(
        401,
        'UNAUTHORIZED',
        "no valid token or session: sign in with a token from the board's token file",
      );

    if (path === '/api/session') {
      if (method !== 'GET') throw methodRefusal(method, path, 'GET');
      // A certificate's or a bearer token's page gets a session now (its cookie a random id, no secret of the operator's).
      const found = sessionOf(req)?.session;
      const s = found?.operator === operator ? found : newSession(res, operator);
      sendJson(res, 200, { operator: s.operator, csrf: s.csrf, pollMs });
      return;
    }
    if (path === '/api/rollouts') {
      if (method !== 'GET') throw methodRefusal(method, path, 'GET');
      sendJson(res, 200, { rollouts: await temporal('the rollout list', () => rolloutRows(opts.sources)) });
      return;
    }
    const converge = /^\/api\/fleet\/([^/]+)\/converge$/.exec(path);
    if (converge) {
      if (method !== 'POST') throw methodRefusal(method, path, 'POST');
      checkSameOrigin(req);
      const session = checkCsrf(req);
      if (!opts.fleet) throw noFleet();
      const fleet = opts.fleet;
      const body = parseConvergeBody(await jsonBody(req));
      await temporalAnswers();
      const done = await temporal(
        'the converge',
        () =>
          startBoardConverge(fleet, opts.sources.taskQueue, decoded(converge[1]!, 'profile'), body, session.operator),
        BOARD_LIMITS.startMs,
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
      const revision = fleetRevisionParam(url.searchParams.get('revision'));
      return sendJson(
        res,
        200,
        await fleetView(opts.fleet, decoded(path.slice('/api/fleet/'.length), 'profile'), fresh, revision),
      );
    }
    const m = /^\/api\/rollouts\/([^/]+)(?:\/([a-z]+))?$/.exec(path);
    if (!m) throw new HttpRefusal(404, 'NOT_FOUND', `no endpoint ${JSON.stringify(path.slice(0, 100))}`);
    const id = checkRolloutId(decoded(m[1]!, 'rollout id'));
    const action = m[2];
    if (action === undefined || action === 'events' || action === 'audit') {
      if (method !== 'GET') throw methodRefusal(method, path, 'GET');
      if (action === 'audit')
        return sendJson(res, 200, await temporal(`the audit of ${id}`, () => auditView(opts.sources, id)));
      const query = parseDeviceQuery(url.searchParams);
      if (action === undefined)
        return sendJson(res, 200, await temporal(`the view of ${id}`, () => rolloutView(opts.sources, id, query)));
      return stream(req, res, id, query);
    }
    if (action === 'revert') {
      if (method === 'GET')
        return sendJson(res, 200, await temporal(`the revert of ${id}`, () => revertPreview(opts.sources, id)));
      if (method !== 'POST') throw methodRefusal(method, path, 'GET or POST');
      checkSameOrigin(req);
      const session = checkCsrf(req);
      const body = parseRevertBody(await jsonBody(req));
      await temporalAnswers();
      const done = await temporal(
        `the revert of ${id}`,
        () => startBoardRevert(opts.sources, id, body, session.operator),
        BOARD_LIMITS.startMs,
      );
      opts.log(`board: ${done.message}`);
      return sendJson(res, 200, done);
    }
    if ((BOARD_CONTROLS as readonly string[]).includes(action)) {
      if (method !== 'POST') throw methodRefusal(method, path, 'POST');
      checkSameOrigin(req);
      const session = checkCsrf(req);
      const body = parseControlBody(action as BoardControl, await jsonBody(req));
      await temporalAnswers();
      const done = await temporal(
        `the ${action} of ${id}`,
        () => sendBoardControl(opts.sources, id, action as BoardControl, body, session.operator),
        BOARD_LIMITS.controlMs,
      );
      opts.log(`board: ${action} of ${id} by ${session.operator}: ${body.reason}`);
      return sendJson(res, 200, done);
    }
    throw new HttpRefusal(404, 'NOT_FOUND', `no endpoint ${JSON.stringify(path.slice(0, 100))}`);
  }

  /**
   * Server-sent events: the rollout's view each time its status changes, until it has closed. The slot
   * is taken before anything is awaited (the cap holds however many arrive at once); the stream ends
   * after streamMs (the page's EventSource opens another) or once a client leaves more than
   * streamBufferBytes unread.
   */
  async function stream(
    req: IncomingMessage,
    res: ServerResponse,
    id: string,
    query: ReturnType<typeof parseDeviceQuery>,
  ): Promise<void> {
    if (streamsOpen >= maxStreams)
      throw new HttpRefusal(
        503,
        'BUSY',
        `${maxStreams} live streams are open, the limit; close a board tab or try again`,
      );
    streamsOpen++;
    try {
      await streamView(req, res, id, query);
    } finally {
      streamsOpen--;
    }
  }

  async function streamView(
    req: IncomingMessage,
    res: ServerResponse,
    id: string,
    query: ReturnType<typeof parseDeviceQuery>,
  ): Promise<void> {
    // Unknown ids are refused as JSON before the stream starts.
    let view = await temporal(`the view of ${id}`, () => rolloutView(opts.sources, id, query));
    const opened = Date.now();
    streams.add(res);
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-store', connection: 'keep-alive' });
    req.socket.setTimeout(0);
    let ended = false;
    const end = () => {
      ended = true;
      streams.delete(res);
    };
    req.on('close', end);
    // What is still queued from earlier frames when the next is written: the kernel's socket buffers (a
    // few MiB) are full, and the client is not reading. (Just after a write its own frame is queued too.)
    const write = (text: string) => {
      if (ended) return;
      if (res.writableLength > streamBufferBytes) {
        opts.log(
          `board: a live stream of ${id} dropped: ${res.writableLength} bytes unread by ${sourceOf(req)} (limit ${streamBufferBytes})`,
        );
        end();
        res.destroy();
        return;
      }
      res.write(text);
    };
    const send = (event: string, data: unknown) => write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
    write('retry: 2000\n\n'); // a stream ended by its age is opened again by the page 2 s later
    send('view', view);
    let last = '';
    let lastWrite = Date.now();
    let away = false;
    while (!ended && !closing && Date.now() - opened < streamMs) {
      await new Promise((r) => setTimeout(r, pollMs));
      if (ended || closing) break;
      try {
        const print = await temporal(`the status of ${id}`, () => liveFingerprint(opts.sources, id));
        // Back from a problem, the view is sent again even unchanged: the page clears its notice on it.
        if (print !== last || away) {
          view = await temporal(`the view of ${id}`, () => rolloutView(opts.sources, id, query));
          last = print;
          away = false;
          send('view', view);
          lastWrite = Date.now();
        }
        if (view.temporalStatus !== 'RUNNING') {
          send('end', { state: view.state });
          break;
        }
      } catch (err) {
        // Temporal away: say so on the page and keep polling.
        away = true;
        send('problem', { message: err instanceof WavegateError ? err.message : firstLineOf(err) });
        lastWrite = Date.now();
        await new Promise((r) => setTimeout(r, 5 * pollMs));
      }
      if (Date.now() - lastWrite > BOARD_LIMITS.heartbeatMs) {
        write(': still here\n\n');
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
