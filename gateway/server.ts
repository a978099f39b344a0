import { createServer as createHttpServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo, Socket } from 'node:net';
import type { Client } from '@temporalio/client';
import { NonceCache } from '../core/agent-auth';
import { HttpRefusal, sendError } from '../http/answer';
import { askedOf, dispatch, type Asked } from '../http/routes';
import {
  DEFAULT_LIMITS,
  GATEWAY_TIMEOUTS,
  KeyedCounter,
  LISTEN_BACKLOG,
  RefusalLog,
  type GatewayLimits,
} from './limits';
import type { AgentPins } from './pins';
import { gatewayRoutes } from './routes';
import { signedRequestGuards, type AgentCaller } from './signed-request';
import { DeviceViews, type DeviceViewsStats } from './views';
import { AnswerDelivery } from './answers';
import { TrustNews } from './trust-news';
import type { IdentityRotations } from './identity-rotation';
import type { KeyPair } from '../core/signing';
import type { TwinFeedLateness } from '../clients/twin-feed';

/**
 * `wavegate gateway`: the device side's only Temporal client (docs/formats.md, "Gateway HTTP API").
 * Every request is authenticated with the device's own identity key (gateway/signed-request.ts) and
 * reaches only that device's twin; its routes are a table (gateway/routes.ts) answered through http/.
 *
 * Bounded before anyone is known (gateway/limits.ts): a request is authenticated from its headers alone
 * (the body's digest is declared and signed there), so no byte of a body is read for a request that is
 * not a pinned device's; such a refusal closes the connection. Connections and requests in flight are
 * capped per source address and in all, long-polls per device and in all, and slow or idle connections
 * are timed out. Refusal lines are rate-limited.
 *
 * Logs name the device, the route, the status and the time taken: never a key, a signature or a body.
 */
export interface GatewayOptions {
  client: Client;
  taskQueue: string;
  pins: AgentPins;
  /** The gateway's profiles root: payload files are served from `<root>/<profile>/payload/` only. */
  profilesRoot: string;
  /** Long-polls (syncs that may wait) held at once; more are refused 503 BUSY with Retry-After. (Same as limits.maxLongPolls.) */
  maxLongPolls?: number;
  limits?: Partial<GatewayLimits>;
  /**
   * `--accept-agents-without-digest`, for the upgrade only: a request whose header declares no body digest
   * (an agent older than this gateway) is accepted as that agent signed it, when it names a pinned device.
   * Its body (bounded) is then read before the signature is checked, which is what the digest exists to
   * avoid: turn it off once every agent sends the digest (each such device is logged once).
   */
  acceptAgentsWithoutDigest?: boolean;
  log?: (line: string) => void;
  now?: () => number;
  /** Run when a device's first sync starts its twin (gateway/enrolled.ts: converge to the latest completed rollouts). */
  onFirstSync?: (deviceId: string) => Promise<boolean>;
  /** What the gateway knows of each device's twin (default: its own, following the twin change feed). */
  views?: DeviceViews;
  /** The timestamp role keys it signs agents' timestamps with (`--timestamp-key`; none: no timestamps). */
  timestampKeys?: readonly KeyPair[];
  /** How long a timestamp it signs is valid (`--timestamp-expiry`; default 24 h). */
  timestampExpiryMs?: number;
  /** The agent identity key rotations it takes part in (`--rotation`; ./identity-rotation.ts); `pins` are then rotatingPins. */
  identityRotations?: IdentityRotations;
}

export const DEFAULT_MAX_LONG_POLLS = DEFAULT_LIMITS.maxLongPolls;

/** What the gateway holds right now (tests and the flood bench read it). */
export interface GatewayStats {
  connections: number;
  connectionSources: number;
  requests: number;
  requestSources: number;
  longPolls: number;
  longPollDevices: number;
  nonces: number;
  /** Request body bytes read since start: only ever bodies of authenticated requests. */
  bodyBytesRead: number;
  /** Refusal lines counted but not written yet (rate limit). */
  refusalsSuppressed: number;
  /** The twin records it holds, long-polls held in its memory, and how often it read or wrote Temporal. */
  views: DeviceViewsStats;
}

export interface Gateway {
  handle(req: IncomingMessage, res: ServerResponse): void;
  /** Count a new connection; false (and the socket is destroyed) when a cap is reached. */
  admitConnection(socket: Socket): boolean;
  stats(): GatewayStats;
  /** Write the summary of suppressed refusal lines now (a timer calls it every second). */
  flushRefusals(): void;
  /** Answer every held long-poll and write the seen marks (before the server closes). */
  close(): Promise<void>;
}

const sourceOf = (socket: Socket | null | undefined): string => socket?.remoteAddress ?? '-';

export function createGateway(opts: GatewayOptions): Gateway {
  const limits: GatewayLimits = {
    ...DEFAULT_LIMITS,
    ...(opts.maxLongPolls !== undefined ? { maxLongPolls: opts.maxLongPolls } : {}),
    ...opts.limits,
  };
  const nonces = new NonceCache(undefined, undefined, limits.noncesPerDevice);
  const now = opts.now ?? Date.now;
  const log = opts.log ?? (() => {});
  const refusals = new RefusalLog(log, limits.refusalLogPerSecond, now);
  const connections = new KeyedCounter(limits.maxConnectionsPerSource, limits.maxConnections);
  const requests = new KeyedCounter(limits.maxRequestsPerSource, limits.maxRequests);
  const longPolls = new KeyedCounter(limits.maxLongPollsPerDevice, limits.maxLongPolls);
  let bodyBytesRead = 0;
  const views =
    opts.views ??
    new DeviceViews({
      client: opts.client,
      taskQueue: opts.taskQueue,
      ...(opts.onFirstSync ? { onFirstSync: opts.onFirstSync } : {}),
      // An agent's receipt rides on the completion only when a key it may sign with signed it for the request
      // (during an identity key rotation's overlap either of its two: gateway/identity-rotation.ts).
      answers: new AnswerDelivery({
        client: opts.client,
        log,
        keyOf: (device) => (opts.pins.keysOf ? opts.pins.keysOf(device) : opts.pins.keyOf(device)),
      }),
      log,
    });
  const countBody = (chunk: Buffer) => {
    bodyBytesRead += chunk.length;
  };
  const guards = signedRequestGuards({
    pins: opts.pins,
    nonces,
    ...(opts.acceptAgentsWithoutDigest ? { acceptAgentsWithoutDigest: true } : {}),
    log,
    now,
    countBody,
  });
  /** Requests in flight, in all and per source address: the one bound before a request is authenticated. */
  const bounds = (asked: Asked<AgentCaller>): void => {
    const source = sourceOf(asked.req.socket);
    const slot = requests.take(source);
    if (slot !== 'ok')
      throw new HttpRefusal(
        503,
        'BUSY',
        slot === 'total'
          ? `the gateway is handling ${limits.maxRequests} requests, its limit; retry after a few seconds`
          : `${limits.maxRequestsPerSource} requests from ${source} are being handled, the limit per source address; retry after a few seconds`,
      );
    asked.res.once('close', () => requests.release(source));
  };
  const table = gatewayRoutes({
    views,
    longPolls,
    limits,
    profilesRoot: opts.profilesRoot,
    guards,
    bounds,
    countBody,
    trustNews: new TrustNews({
      profilesRoot: opts.profilesRoot,
      deviceOf: (device) => opts.pins.deviceOf(device),
      ...(opts.timestampKeys ? { timestampKeys: opts.timestampKeys } : {}),
      ...(opts.timestampExpiryMs !== undefined ? { timestampExpiryMs: opts.timestampExpiryMs } : {}),
      log,
      now,
    }),
    ...(opts.identityRotations
      ? {
          identityRotation: (device: string, raw: unknown) => opts.identityRotations!.sync(device, raw),
        }
      : {}),
  });
  const ends = new RequestEnds(log, refusals, now);

  return {
    handle(req, res) {
      const asked = askedOf(table, req, res);
      const started = now();
      void dispatch(table, asked).then(
        () => ends.done(asked, started),
        (err: unknown) => ends.failed(asked, started, err),
      );
    },
    admitConnection(socket) {
      const source = sourceOf(socket);
      const slot = connections.take(source);
      if (slot !== 'ok') {
        socket.destroy();
        refusals.line(
          `- connection from ${source} closed: ${slot === 'total' ? `${limits.maxConnections} connections open, the gateway's limit` : `${limits.maxConnectionsPerSource} connections open from ${source}, the limit per source address`}`,
        );
        return false;
      }
      socket.once('close', () => connections.release(source));
      return true;
    },
    stats: () => ({
      connections: connections.size,
      connectionSources: connections.keys,
      requests: requests.size,
      requestSources: requests.keys,
      longPolls: longPolls.size,
      longPollDevices: longPolls.keys,
      nonces: nonces.size,
      bodyBytesRead,
      refusalsSuppressed: refusals.pending,
      views: views.stats(),
    }),
    flushRefusals: () => refusals.flush(),
    close: () => views.close(),
  };
}

/**
 * How a request's end is answered and logged: the device, the route, the status and the time taken (never
 * a key, a signature or a body); refusal lines rate-limited.
 */
class RequestEnds {
  constructor(
    private readonly log: (line: string) => void,
    private readonly refusals: RefusalLog,
    private readonly now: () => number,
  ) {}

  private line(asked: Asked<AgentCaller>, started: number, status: number | string, extra = ''): string {
    const device = asked.caller?.device ?? '-';
    return `${device} ${asked.method} ${(asked.req.url ?? '').slice(0, 120)} ${status} ${this.now() - started}ms${extra}`;
  }

  done(asked: Asked<AgentCaller>, started: number): void {
    this.log(this.line(asked, started, asked.res.statusCode));
  }

  failed(asked: Asked<AgentCaller>, started: number, err: unknown): void {
    const { req, res } = asked;
    if (asked.caller?.gone.aborted || (req.socket?.destroyed ?? true)) {
      // Not the control plane's fault: the client (or a timeout on its slow request) closed the connection first.
      this.refusals.line(this.line(asked, started, '-', ' client closed the connection before the answer'));
    } else if (res.headersSent) {
      // A payload send cut short (the file changed under it): the agent sees a short answer.
      res.destroy();
      this.refusals.line(this.line(asked, started, res.statusCode, ` cut: ${(err as Error).message.slice(0, 200)}`));
    } else if (err instanceof HttpRefusal) {
      this.refuse(asked, started, err);
    } else {
      // Temporal unreachable, or something unforeseen: the agent backs off and retries.
      const message = (err as Error).message.slice(0, 200);
      sendError(res, 503, 'UNAVAILABLE', `the gateway cannot reach the control plane now: ${message}`, {
        'retry-after': '5',
      });
      this.refusals.line(this.line(asked, started, 503, ` UNAVAILABLE ${message}`));
    }
  }

  private refuse(asked: Asked<AgentCaller>, started: number, err: HttpRefusal): void {
    const { req, res } = asked;
    // A body not read (a refusal from the headers, a 413) is never drained: the connection closes after the answer.
    const close = !asked.bodyRead || err.status === 413;
    if (close) res.shouldKeepAlive = false;
    sendError(res, err.status, err.code, err.message, {
      ...(err.status === 503 || err.status === 429 ? { 'retry-after': '5' } : {}),
      ...(close ? { connection: 'close' } : {}),
    });
    if (close) lingerThenClose(req.socket);
    const detail = ` ${err.code}${err.status === 401 ? ` ${err.message.slice(0, 120)}` : ''}`;
    this.refusals.line(this.line(asked, started, err.status, detail));
  }
}

/**
 * After a refusal that leaves a body unread: the answer goes out with `Connection: close` (Node ends the
 * socket once it is written); a client that keeps the connection open, or keeps sending, is cut after
 * GATEWAY_TIMEOUTS.lingerMs, so it holds nothing for longer.
 */
function lingerThenClose(socket: Socket | null): void {
  if (!socket || socket.destroyed) return;
  const timer = setTimeout(() => socket.destroy(), GATEWAY_TIMEOUTS.lingerMs);
  timer.unref();
  socket.once('close', () => clearTimeout(timer));
}

export interface ListenOptions {
  host: string;
  port: number;
  /** PEM certificate and key: HTTPS. Without: plain HTTP (the CLI allows it on loopback only unless --insecure-http). */
  tls?: { cert: Buffer; key: Buffer };
}

export interface RunningGateway {
  server: Server;
  url: string;
  stats(): GatewayStats;
  close(): Promise<void>;
}

export async function startGateway(opts: GatewayOptions & { listen: ListenOptions }): Promise<RunningGateway> {
  const gateway = createGateway(opts);
  const serverOptions = {
    maxHeaderSize: GATEWAY_TIMEOUTS.maxHeaderBytes,
    requestTimeout: GATEWAY_TIMEOUTS.requestMs,
    headersTimeout: GATEWAY_TIMEOUTS.headersMs,
    keepAliveTimeout: GATEWAY_TIMEOUTS.keepAliveMs,
    // How often Node looks for requests past headersTimeout / requestTimeout (its default is 30 s).
    connectionsCheckingInterval: 2_000,
  };
  const server = opts.listen.tls
    ? createHttpsServer(
        {
          ...serverOptions,
          cert: opts.listen.tls.cert,
          key: opts.listen.tls.key,
          handshakeTimeout: GATEWAY_TIMEOUTS.headersMs,
        },
        gateway.handle,
      )
    : createHttpServer(serverOptions, gateway.handle);
  // Set on every connection (the TLS one for HTTPS): a socket silent this long is destroyed. A long-poll lifts it for its wait.
  server.timeout = GATEWAY_TIMEOUTS.idleMs;
  server.on('connection', (socket: Socket) => gateway.admitConnection(socket));
  const flusher = setInterval(() => gateway.flushRefusals(), 1_000);
  flusher.unref();
  // How late visibility showed the desired changes: what the feed's look-back must cover (clients/twin-feed.ts).
  const lateness = (l: TwinFeedLateness) =>
    `in order ${l.inOrder}, behind the newest by ≤1 s ${l.upTo1s}, ≤2 s ${l.upTo2s}, ≤5 s ${l.upTo5s}, more ${l.later}`;
  // What the gateway spared Temporal, once a minute while anything happens (operators read it to size the fleet).
  let last = '';
  const reporter = setInterval(() => {
    const v = gateway.stats().views;
    const line = `gateway: ${v.records} devices known, ${v.held} long-polls held; since start ${v.seenMarks} syncs answered from memory, ${v.forwards} reports written to twins, ${v.reads} twin reads, ${v.presenceWrites} presence writes${v.writesOutlastingSyncs ? `, ${v.writesOutlastingSyncs} syncs answered before their report's write ended` : ''}; applies completed from reports ${v.answers.delivered}${v.answers.gone ? ` (${v.answers.gone} already answered)` : ''}${v.answers.failed ? `, ${v.answers.failed} not delivered` : ''}; desired changes seen ${lateness(v.feedLateness)}`;
    // Its memory rides along (what a held long-poll costs, docs/operations.md), but only new counts make a line.
    const m = process.memoryUsage();
    const mib = (bytes: number) => Math.round(bytes / 1048576);
    if (line !== last)
      (opts.log ?? (() => {}))(
        `${line}; memory: RSS ${mib(m.rss)} MiB, heap ${mib(m.heapUsed)} of ${mib(m.heapTotal)} MiB, external ${mib(m.external)} MiB`,
      );
    last = line;
  }, 60_000);
  reporter.unref();
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    // A fleet reconnects at once after a gateway restarts: a backlog of 511 (Node's default) dropped the SYNs of
    // some of 10,000 agents connecting together (ETIMEDOUT, retried); the kernel caps it at net.core.somaxconn.
    server.listen({ port: opts.listen.port, host: opts.listen.host, backlog: LISTEN_BACKLOG }, () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  const host = opts.listen.host.includes(':') ? `[${opts.listen.host}]` : opts.listen.host;
  return {
    server,
    url: `${opts.listen.tls ? 'https' : 'http'}://${host}:${port}`,
    stats: gateway.stats,
    // Held long-polls are answered with what is known, the seen marks written; then the server closes.
    close: async () => {
      clearInterval(flusher);
      clearInterval(reporter);
      await gateway.close();
      gateway.flushRefusals();
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
    },
  };
}
