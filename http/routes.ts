import type { IncomingMessage, ServerResponse } from 'node:http';
import { HttpRefusal } from './answer';
import { parseJsonObject, readBody } from './body';

/**
 * A server's routes as a table, and the one place their checks run. A route names the checks it needs;
 * `dispatch` applies them in one fixed order, whatever order the route lists them in, so no route can skip
 * or reorder one:
 *
 *   bounds      the server's bounds of every request (URL, Host, requests in flight), before any route
 *   site        no other site's page is answered (the board: 403 before anything is read or checked)
 *   auth        who is asking (401, 429) — before the method is looked at: a stranger learns no more from
 *               a 404 or a 405 than from a real route
 *   origin      a state change comes from the server's own page (403, 415)
 *   csrf        with its session's token (403); the session's operator is the caller from here
 *   body        read only now, bounded in size (413) and in time (408): no byte is read for a stranger
 *   signedBody  the body is the one the caller signed (the gateway's digest, 401)
 *   handler
 *
 * The checks themselves are the server's (`Guards`); their decisions are pure functions in core/.
 */
export type Check = 'site' | 'auth' | 'origin' | 'csrf' | 'signedBody';

/** The checks run before a route's method is looked at; the rest run after it. */
const WHO: readonly Check[] = ['site', 'auth'];
const STATE_CHANGE: readonly Check[] = ['origin', 'csrf'];

/** One request on its way through the table. */
export interface Asked<C> {
  readonly req: IncomingMessage;
  readonly res: ServerResponse;
  readonly method: string;
  /** The path routed on (see RouteTable.pathAsSent), without the query. */
  readonly path: string;
  readonly query: URLSearchParams;
  /** When the request's headers were in: a body's time bound counts from here. */
  readonly since: number;
  /** The route's path pattern groups, still percent-encoded. */
  params: string[];
  /** Who is asking, once `auth` said so (after `csrf`: its session's operator). */
  caller?: C;
  /** A body a check had to read before its route's turn (the gateway's agents that declare no digest). */
  body?: Buffer;
  /** The body has been read whole: the connection can carry the next request. */
  bodyRead: boolean;
  /** The body as a JSON object, for a route that reads one as JSON. */
  json: Record<string, unknown>;
}

export interface BodyBound {
  /** Past this many bytes: 413 TOO_LARGE. */
  maxBytes: number;
  /** The whole body within this of its headers, else 408 BODY_TIMEOUT (no bound: the server's requestTimeout). */
  timeoutMs?: number;
  /** Parsed into `Asked.json` (400 when it is not a JSON object); false: read for its checks only. */
  json: boolean;
}

/** What answers a request: its checks, its body, its handler. */
export interface Answerer<C> {
  checks: readonly Check[];
  /** Without: no byte of the body is read. */
  body?: BodyBound;
  handle(asked: Asked<C>): Promise<void> | void;
}

export interface Route<C> extends Answerer<C> {
  /** 'GET' answers HEAD only when the route lists HEAD too. */
  method: string | readonly string[];
  /** An exact path, or a pattern whose groups are `Asked.params`. */
  path: string | RegExp;
}

/** The server's own checks, each run where the fixed order puts it, for a route that declares it. */
export interface Guards<C> {
  site?(asked: Asked<C>): void;
  auth?(asked: Asked<C>): C | Promise<C>;
  origin?(asked: Asked<C>): void;
  /** Returns the session's caller (who the state change is recorded as). */
  csrf?(asked: Asked<C>): C;
  signedBody?(asked: Asked<C>, body: Buffer): void;
}

export interface RouteTable<C> {
  routes: readonly Route<C>[];
  /** A request no route takes (its own checks run first: the board's unknown API path is 401 before it is 404). */
  otherwise(path: string): Answerer<C>;
  /** A known path asked with another method: 405 naming its methods (true), or `otherwise` answers (false). */
  methodNotAllowed: boolean;
  guards: Guards<C>;
  bounds?(asked: Asked<C>): void;
  /** Told of every body chunk the table's routes read (the gateway counts them: only authenticated bodies). */
  onBodyChunk?: (chunk: Buffer) => void;
  /**
   * Route on the path exactly as sent (the gateway: its signature covers that path) rather than as a URL
   * parser normalizes it (the board: what a browser's address bar means).
   */
  pathAsSent?: boolean;
}

/** A request without a query: one shared object, which no handler writes to. */
const NO_QUERY = new URLSearchParams();

/** The request as the table sees it; dispatch(table, asked) answers it. */
export function askedOf<C>(table: RouteTable<C>, req: IncomingMessage, res: ServerResponse): Asked<C> {
  const sent = req.url ?? '/';
  const q = sent.indexOf('?');
  let path = q < 0 ? sent : sent.slice(0, q);
  let query = q < 0 ? NO_QUERY : new URLSearchParams(sent.slice(q + 1));
  if (!table.pathAsSent) {
    try {
      const url = new URL(sent, 'http://host');
      path = url.pathname;
      query = url.searchParams;
    } catch {
      // Not a URL (`//`): routed as sent, to the table's `otherwise`.
    }
  }
  return {
    req,
    res,
    method: req.method ?? 'GET',
    path,
    query,
    since: Date.now(),
    params: [],
    bodyRead: false,
    json: {},
  };
}

/** Answers `asked` by `table`, or throws the refusal (HttpRefusal) for the server to send as it does. */
export async function dispatch<C>(table: RouteTable<C>, asked: Asked<C>): Promise<void> {
  table.bounds?.(asked);
  const { route, allowed } = routeOf(table, asked);
  if (route.checks.includes('signedBody') && !route.body)
    throw new Error('a route declares the check signedBody, and reads no body to check');
  await runChecks(table.guards, asked, route.checks, WHO);
  if (allowed) throw methodRefusal(asked.method, asked.path, allowed);
  await runChecks(table.guards, asked, route.checks, STATE_CHANGE);
  if (route.body) await readRouteBody(table, asked, route.checks, route.body);
  await route.handle(asked);
}

/**
 * The route that answers: the first whose path matches fixes the path, its method picks among that path's
 * routes. `allowed` (the path's methods) when none takes the method and the table refuses it: the WHO
 * checks of the path's first route run before that 405.
 */
function routeOf<C>(table: RouteTable<C>, asked: Asked<C>): { route: Answerer<C>; allowed?: string } {
  const first = table.routes.find((r) => matchOf(r.path, asked.path));
  if (!first) return { route: table.otherwise(asked.path) };
  const same = table.routes.filter((r) => samePath(r.path, first.path));
  const route = same.find((r) => methodsOf(r).includes(asked.method));
  if (route) {
    asked.params = matchOf(route.path, asked.path)!;
    return { route };
  }
  if (!table.methodNotAllowed) return { route: table.otherwise(asked.path) };
  // HEAD is GET without the body: named only as GET.
  const names = [...new Set(same.flatMap(methodsOf))].filter((m) => m !== 'HEAD');
  return { route: first, allowed: names.join(' or ') };
}

async function runChecks<C>(
  guards: Guards<C>,
  asked: Asked<C>,
  declared: readonly Check[],
  stage: readonly Check[],
): Promise<void> {
  for (const check of stage) {
    if (!declared.includes(check)) continue;
    if (check === 'site') guardOf(guards, check)(asked);
    else if (check === 'auth') asked.caller = await guardOf(guards, check)(asked);
    else if (check === 'origin') guardOf(guards, check)(asked);
    else if (check === 'csrf') asked.caller = guardOf(guards, check)(asked);
  }
}

/**
 * The body, bounded, then its check and its parse. Its own function, so that no frame still awaiting the
 * handler holds the bytes (a held long-poll kept its body: about 17 MiB at 10,000, bench/README.md).
 */
async function readRouteBody<C>(
  table: RouteTable<C>,
  asked: Asked<C>,
  declared: readonly Check[],
  bound: BodyBound,
): Promise<void> {
  const body = asked.body ?? (await readBodyOf(asked, bound, table.onBodyChunk));
  asked.body = undefined;
  if (declared.includes('signedBody')) guardOf(table.guards, 'signedBody')(asked, body);
  if (bound.json) asked.json = parseJsonObject(body);
}

/** The request's body within `bound` (its time counted from the headers); the one reader of the table's bodies. */
export async function readBodyOf(
  asked: Asked<unknown>,
  bound: Omit<BodyBound, 'json'>,
  onChunk?: (chunk: Buffer) => void,
): Promise<Buffer> {
  const timeout =
    bound.timeoutMs === undefined
      ? undefined
      : { ms: Math.max(0, bound.timeoutMs - (Date.now() - asked.since)), boundMs: bound.timeoutMs };
  const body = await readBody(asked.req, bound.maxBytes, timeout, onChunk);
  asked.bodyRead = true;
  return body;
}

/** A declared check the server has no guard for is a programming error: never a request let through. */
function guardOf<C, K extends Check>(guards: Guards<C>, check: K): NonNullable<Guards<C>[K]> {
  const guard = guards[check];
  if (!guard) throw new Error(`a route declares the check ${check}, and the server has no guard for it`);
  return guard as NonNullable<Guards<C>[K]>;
}

function matchOf(pattern: string | RegExp, path: string): string[] | undefined {
  if (typeof pattern === 'string') return pattern === path ? [] : undefined;
  const m = pattern.exec(path);
  return m ? m.slice(1) : undefined;
}

function samePath(a: string | RegExp, b: string | RegExp): boolean {
  return typeof a === 'string' || typeof b === 'string' ? a === b : a.source === b.source;
}

function methodsOf<C>(route: Route<C>): readonly string[] {
  return typeof route.method === 'string' ? [route.method] : route.method;
}

export function methodRefusal(method: string, path: string, allowed: string): HttpRefusal {
  return new HttpRefusal(405, 'METHOD_NOT_ALLOWED', `${method} ${path.slice(0, 100)}: only ${allowed} is allowed here`);
}

/** A path segment, percent-decoded: 400 INVALID_INPUT naming it when it is not valid percent-encoding. */
export function decodedParam(segment: string, what: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    throw new HttpRefusal(400, 'INVALID_INPUT', `${what}: not valid percent-encoding`);
  }
}
