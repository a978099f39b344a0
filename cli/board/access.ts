import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { TLSSocket } from 'node:tls';
import {
  boardHostAllowed,
  boardOriginOf,
  crossSiteProblem,
  GuessBudget,
  jsonTypeProblem,
  stateChangeProblem,
  DEFAULT_ROLE,
  type BoardAddress,
  type PageHeaders,
} from '../../core/board';
import { HttpRefusal, sendJson } from '../../http/answer';
import type { Asked, Guards } from '../../http/routes';
import { BOARD_LIMITS } from './limits';
import type { Role } from '../../core/approval';

/**
 * Who may ask the board (SECURITY.md, "The board"): a token or a client certificate, on loopback too; wrong
 * tokens slowed, logged and limited per source; sessions per operator; no answer to another site's page;
 * a same-origin check and the session's CSRF token on every state change. These are the route table's
 * guards (http/routes.ts runs them, in its one order); their decisions are core/board.ts.
 */

const COOKIE = 'wavegate_board';

interface Session {
  operator: string;
  csrf: string;
  expires: number;
}

export interface BoardAccessOptions {
  /** `<name> <token> [role]` lines: the name is the identity recorded in controls; the role (default operator) what it may send. */
  tokens: ReadonlyArray<{ name: string; token: string; role?: Role }>;
  /** `cert:<CN> <role>` lines: a client certificate's role; a CN with none is an operator (DEFAULT_ROLE). */
  certRoles?: ReadonlyMap<string, Role>;
  /** Client certificates are asked for (their CN is the operator). */
  clientCa: boolean;
  /** The address the board listens at, read once it listens (its port). */
  address: () => BoardAddress;
  log: (line: string) => void;
}

const digest = (text: string) => createHash('sha256').update(text).digest();
const sourceOf = (req: IncomingMessage) => req.socket.remoteAddress ?? 'unknown';

export class BoardAccess {
  private readonly tokens: Array<{ name: string; digest: Buffer; role: Role }>;
  private readonly sessions = new Map<string, Session>();
  private readonly guesses = new GuessBudget(BOARD_LIMITS.guessBurst, BOARD_LIMITS.guessRefillMs);

  constructor(private readonly opts: BoardAccessOptions) {
    this.tokens = opts.tokens.map((t) => ({ name: t.name, digest: digest(t.token), role: t.role ?? DEFAULT_ROLE }));
  }

  /** An operator's role on this board: its token's, else its certificate line's, else operator (DEFAULT_ROLE). */
  roleOf(name: string): Role {
    return this.tokens.find((t) => t.name === name)?.role ?? this.opts.certRoles?.get(name) ?? DEFAULT_ROLE;
  }

  /** The route table's checks, in the names http/routes.ts runs them by. */
  guards(): Guards<string> {
    return {
      site: (a) => this.checkNotCrossSite(a.req),
      auth: (a) => this.callerOf(a.req, a.res),
      origin: (a) => this.checkSameOrigin(a.req),
      csrf: (a) => this.checkMayChange(this.checkCsrf(a.req).operator),
    };
  }

  /** Bounds of every request: its URL's length, and a Host the board answers to. */
  bounds(asked: Asked<string>): void {
    const { req } = asked;
    const rawUrl = req.url ?? '/';
    if (rawUrl.length > BOARD_LIMITS.maxUrlChars)
      throw new HttpRefusal(
        414,
        'INVALID_INPUT',
        `the URL is ${rawUrl.length} characters, above the limit of ${BOARD_LIMITS.maxUrlChars}`,
      );
    if (!boardHostAllowed(req.headers.host, this.opts.address())) {
      const publicUrl = this.opts.address().publicUrl;
      throw new HttpRefusal(
        421,
        'FORBIDDEN',
        `Host ${JSON.stringify(req.headers.host ?? null)}: this board answers to its loopback address${publicUrl ? ` and ${publicUrl.host}` : ''} only${publicUrl ? '' : ' (behind a proxy: --public-url)'}`,
      );
    }
  }

  /** POST /api/login: a token from the login form, for a session. */
  async login(asked: Asked<string>): Promise<void> {
    const { req, res, json } = asked;
    if (typeof json.token !== 'string' || json.token.length > 256)
      throw new HttpRefusal(400, 'INVALID_INPUT', 'token: a string of at most 256 characters is required');
    this.checkGuessBudget(req, res);
    const name = this.tokenName(json.token) ?? (await this.wrongToken(req, 'a login'));
    const s = this.newSession(res, name);
    sendJson(res, 200, { operator: s.operator, csrf: s.csrf, role: this.roleOf(s.operator) });
  }

  /** POST /api/logout: the caller's own session only, the one its cookie names. */
  logout(asked: Asked<string>): void {
    const found = this.sessionOf(asked.req);
    if (found) this.sessions.delete(found.id);
    asked.res.setHeader('set-cookie', `${COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0`);
    sendJson(asked.res, 200, { ok: true });
  }

  /** GET /api/session: a certificate's or a bearer token's page gets a session now (its cookie a random id, no secret of the operator's). */
  session(asked: Asked<string>, pollMs: number): void {
    const operator = asked.caller!;
    const found = this.sessionOf(asked.req)?.session;
    const s = found?.operator === operator ? found : this.newSession(asked.res, operator);
    sendJson(asked.res, 200, { operator: s.operator, csrf: s.csrf, pollMs, role: this.roleOf(s.operator) });
  }

  /** The token's name, comparing digests in constant time against every token (no early exit on a match). */
  private tokenName(token: string): string | undefined {
    const d = digest(token);
    let found: string | undefined;
    for (const t of this.tokens) if (timingSafeEqual(d, t.digest)) found ??= t.name;
    return found;
  }

  /** A source past its budget of wrong tokens is refused any token, right or wrong, until it refills. */
  private checkGuessBudget(req: IncomingMessage, res: ServerResponse): void {
    const waitMs = this.guesses.waitMs(sourceOf(req), Date.now());
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
  private async wrongToken(req: IncomingMessage, how: string): Promise<never> {
    this.guesses.spend(sourceOf(req), Date.now());
    this.opts.log(`board: ${how} with an unknown token from ${sourceOf(req)}`);
    await new Promise((r) => setTimeout(r, BOARD_LIMITS.wrongTokenMs));
    throw new HttpRefusal(401, 'UNAUTHORIZED', "token: not one of the board's tokens");
  }

  private sessionOf(req: IncomingMessage): { id: string; session: Session } | undefined {
    const id = cookieOf(req);
    const session = id ? this.sessions.get(id) : undefined;
    if (!id || !session) return undefined;
    if (session.expires < Date.now()) {
      this.sessions.delete(id);
      return undefined;
    }
    return { id, session };
  }

  /**
   * Who is asking: a client certificate's CN, a bearer token's name (a wrong one costs as a wrong login
   * does), or a session's operator; 401 when the request proves nothing.
   */
  private async callerOf(req: IncomingMessage, res: ServerResponse): Promise<string> {
    const socket = req.socket as TLSSocket;
    if (this.opts.clientCa && socket.authorized) {
      const cn = socket.getPeerCertificate()?.subject?.CN;
      if (typeof cn === 'string' && cn) return cn;
    }
    const auth = req.headers.authorization;
    if (auth !== undefined) {
      this.checkGuessBudget(req, res);
      const name = auth.startsWith('Bearer ') ? this.tokenName(auth.slice(7).trim()) : undefined;
      return name ?? (await this.wrongToken(req, 'a request'));
    }
    const operator = this.sessionOf(req)?.session.operator;
    if (operator) return operator;
    throw new HttpRefusal(
      401,
      'UNAUTHORIZED',
      "no valid token or session: sign in with a token from the board's token file",
    );
  }

  /**
   * A session for `operator`: expired ones dropped first; an operator's sessions beyond
   * sessionsPerOperator end its own oldest, never another operator's; a full table refuses (503).
   */
  private newSession(res: ServerResponse, operator: string): Session {
    const now = Date.now();
    for (const [id, s] of this.sessions) if (s.expires < now) this.sessions.delete(id);
    const own = [...this.sessions].filter(([, s]) => s.operator === operator);
    if (own.length >= BOARD_LIMITS.sessionsPerOperator) this.sessions.delete(own[0]![0]);
    else if (this.sessions.size >= BOARD_LIMITS.maxSessions)
      throw new HttpRefusal(
        503,
        'BUSY',
        `${BOARD_LIMITS.maxSessions} sessions are open, the limit; sign out elsewhere or try again later`,
      );
    const id = randomBytes(32).toString('hex');
    const session = { operator, csrf: randomBytes(32).toString('hex'), expires: now + BOARD_LIMITS.sessionMs };
    this.sessions.set(id, session);
    // The cookie is Secure wherever the browser speaks HTTPS: to the board, or to the proxy before it.
    const { tls, publicUrl } = this.opts.address();
    const secure = tls || publicUrl?.protocol === 'https:';
    res.setHeader(
      'set-cookie',
      `${COOKIE}=${id}; HttpOnly; SameSite=Strict; Path=/; Max-Age=${BOARD_LIMITS.sessionMs / 1000}${secure ? '; Secure' : ''}`,
    );
    return session;
  }

  /**
   * The API answers this board's own page, scripts and the address bar, never another site's page: 403
   * before anything is read or checked (a fleet check runs a command on every device).
   */
  private checkNotCrossSite(req: IncomingMessage): void {
    const problem = crossSiteProblem(pageOf(req), boardOriginOf(req.headers.host, this.opts.address()));
    if (problem) throw new HttpRefusal(403, 'FORBIDDEN', problem);
  }

  /** State changes come from this board's own page: same origin, JSON (and the session's CSRF token: checkCsrf). */
  private checkSameOrigin(req: IncomingMessage): void {
    const problem = stateChangeProblem(pageOf(req), boardOriginOf(req.headers.host, this.opts.address()));
    if (problem) throw new HttpRefusal(403, 'FORBIDDEN', problem);
    const type = jsonTypeProblem(req.headers['content-type']);
    if (type) throw new HttpRefusal(415, 'INVALID_INPUT', type);
  }

  /** Every state change (each route with the csrf check) is refused to a viewer, before anything is read or sent. */
  private checkMayChange(operator: string): string {
    if (this.roleOf(operator) === 'viewer')
      throw new HttpRefusal(
        403,
        'FORBIDDEN',
        `${operator} is a viewer on this board: a viewer reads, and sends no control (its role in the token file)`,
      );
    return operator;
  }

  private checkCsrf(req: IncomingMessage): Session {
    const found = this.sessionOf(req);
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
}

function pageOf(req: IncomingMessage): PageHeaders {
  const site = req.headers['sec-fetch-site'];
  return {
    ...(site !== undefined ? { secFetchSite: site } : {}),
    ...(req.headers.origin !== undefined ? { origin: req.headers.origin } : {}),
  };
}

function cookieOf(req: IncomingMessage): string | undefined {
  for (const part of (req.headers.cookie ?? '').split(';')) {
    const [k, v] = part.trim().split('=');
    if (k === COOKIE && v && /^[0-9a-f]{64}$/.test(v)) return v;
  }
  return undefined;
}
