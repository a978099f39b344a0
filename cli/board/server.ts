import { readFileSync } from 'node:fs';
import type { Role } from '../../core/approval';
import { createServer as createHttpServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { WavegateError } from '../../core/errors';
import { HttpRefusal, sendJson } from '../../http/answer';
import { askedOf, dispatch } from '../../http/routes';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { firstLineOf } from '../client';
import { BoardAccess } from './access';
import type { BoardSources } from './data';
import type { FleetSource } from './fleet';
import { BOARD_LIMITS } from './limits';
import { boardRoutes } from './routes';
import { LiveStreams } from './stream';

/**
 * The board's HTTP server (`wavegate board`, docs/cli.md): static files from board/static/ (no build
 * step), a JSON API, and server-sent events for live updates, as one route table (./routes.ts) answered
 * through http/. Thin: every decision is in core/board.ts, every read and control in ./data.ts, who may
 * ask in ./access.ts. Security (SECURITY.md, "The board"): who is asking (a token or a client
 * certificate, on loopback too), wrong tokens slowed, logged and limited per source, sessions per
 * operator, no API answer to another site, a per-session CSRF token and a same-origin check on every
 * state-changing request, bounded bodies, headers, URLs, streams and time (Temporal's included).
 */

export interface BoardServerOptions {
  sources: BoardSources;
  /** The fleet view's inventory and profiles (`--inventory`); without it the view says how to enable it. */
  fleet?: FleetSource;
  listen: { host: string; port: number; tls?: { cert: Buffer; key: Buffer; clientCa?: Buffer } };
  /**
   * `<name> <token>` pairs (--token-file, or the board's own token file): the name is the identity
   * recorded in controls. A board has tokens, client certificates (listen.tls.clientCa) or both.
   */
  tokens?: ReadonlyArray<{ name: string; token: string; role?: Role }>;
  /** `cert:<CN> <role>` lines of the token file: a client certificate's role (none: operator). */
  certRoles?: ReadonlyMap<string, Role>;
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

const STATUS_OF_CODE: Record<string, number> = {
  INVALID_INPUT: 400,
  NOT_FOUND: 404,
  CONFLICT: 409,
  INVALID_STATE: 409,
  UNAVAILABLE: 503,
  FAILED: 502,
};

export async function startBoard(opts: BoardServerOptions): Promise<BoardServer> {
  const tls = opts.listen.tls;
  const tokens = opts.tokens ?? [];
  // Never a board that asks nobody: on loopback every local account can reach the port (SECURITY.md).
  if (tokens.length === 0 && !tls?.clientCa)
    throw new WavegateError('INVALID_INPUT', 'the board needs tokens or client certificates to know its operators', {
      field: '--token-file',
    });
  const access = new BoardAccess({
    tokens,
    ...(opts.certRoles ? { certRoles: opts.certRoles } : {}),
    clientCa: !!tls?.clientCa,
    address: () => ({
      listenHost: opts.listen.host,
      port: (server.address() as AddressInfo).port,
      tls: !!tls,
      ...(opts.publicUrl ? { publicUrl: opts.publicUrl } : {}),
    }),
    log: opts.log,
  });
  const streams = new LiveStreams({
    sources: opts.sources,
    log: opts.log,
    pollMs: opts.pollMs ?? BOARD_LIMITS.pollMs,
    maxStreams: opts.maxStreams ?? BOARD_LIMITS.maxStreams,
    streamMs: opts.streamMs ?? BOARD_LIMITS.streamMs,
    streamBufferBytes: opts.streamBufferBytes ?? BOARD_LIMITS.streamBufferBytes,
  });
  const table = boardRoutes({
    sources: opts.sources,
    fleet: opts.fleet,
    access,
    streams,
    pages: readPages(opts.staticDir ?? join(PROJECT_ROOT, 'board', 'static')),
    pollMs: opts.pollMs ?? BOARD_LIMITS.pollMs,
    log: opts.log,
  });
  // Requests in flight, so that close() lets them end before the caller closes the Temporal client.
  const inFlight = new Set<Promise<void>>();
  const listener = (req: IncomingMessage, res: ServerResponse) => {
    for (const [k, v] of Object.entries(SECURITY_HEADERS)) res.setHeader(k, v);
    const done = dispatch(table, askedOf(table, req, res))
      .catch((err: unknown) => refuse(res, err, opts.log))
      .finally(() => inFlight.delete(done));
    inFlight.add(done);
  };
  const server = await listen(opts.listen, tokens.length > 0, listener);
  const address = server.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  return {
    url: `${tls ? 'https' : 'http'}://${host}:${address.port}`,
    async close() {
      streams.closeAll();
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeAllConnections();
      await closed;
      const settled = Promise.allSettled([...inFlight]);
      await Promise.race([settled, new Promise((r) => setTimeout(r, 5_000).unref())]);
    },
  };
}

/** The page's files, read once at start: a missing one is found now, not on a user's first visit. */
function readPages(staticDir: string): Map<string, { body: Buffer; type: string }> {
  return new Map(
    Object.entries(STATIC_FILES).map(([path, f]) => [
      path,
      { body: readFileSync(join(staticDir, f.file)), type: f.type },
    ]),
  );
}

/** The board's server, bounded (BOARD_LIMITS), listening: HTTPS with client certificates when asked. */
async function listen(
  at: BoardServerOptions['listen'],
  hasTokens: boolean,
  listener: (req: IncomingMessage, res: ServerResponse) => void,
): Promise<Server> {
  const serverOptions = {
    maxHeaderSize: BOARD_LIMITS.maxHeaderBytes,
    headersTimeout: BOARD_LIMITS.headersTimeoutMs,
    requestTimeout: BOARD_LIMITS.requestTimeoutMs,
    keepAliveTimeout: BOARD_LIMITS.keepAliveMs,
  };
  const tls = at.tls;
  const server: Server = tls
    ? createHttpsServer(
        {
          ...serverOptions,
          cert: tls.cert,
          key: tls.key,
          // With tokens too, a browser without a certificate still reaches the login form.
          ...(tls.clientCa ? { ca: tls.clientCa, requestCert: true, rejectUnauthorized: !hasTokens } : {}),
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
    server.listen(at.port, at.host, () => resolve());
  });
  return server;
}

/** A refusal as JSON `{ code, message }`: no stack trace, ever; an unexpected error only logged. */
function refuse(res: ServerResponse, err: unknown, log: (line: string) => void): void {
  let status = 500;
  let code = 'INTERNAL';
  let message = "an unexpected error; the board's log says more";
  if (err instanceof HttpRefusal) ({ status, code, message } = err);
  else if (err instanceof WavegateError) {
    status = STATUS_OF_CODE[err.code] ?? 500;
    code = err.code;
    message = err.message;
  } else log(`board: unexpected error: ${firstLineOf(err)}`);
  if (res.headersSent) {
    res.end();
    return;
  }
  sendJson(res, status, { code, message });
}
