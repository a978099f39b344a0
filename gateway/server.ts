import { createServer as createHttpServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo, Socket } from 'node:net';
import type { Client } from '@temporalio/client';
import { authenticate, bodyDigestProblem, bodyHash, NonceCache } from '../core/agent-auth';
import { syncProblem, type TwinSyncInput, type TwinView } from '../core/twin';
import { AgentGone, HttpRefusal, MAX_BODY_BYTES, parseJsonObject, readBody, sendError, sendJson } from './http';
import {
  DEFAULT_LIMITS,
  GATEWAY_TIMEOUTS,
  KeyedCounter,
  LISTEN_BACKLOG,
  RefusalLog,
  type GatewayLimits,
} from './limits';
import { openPayload, payloadEntry, sendPayload } from './payload';
import type { AgentPins } from './pins';
import { DeviceViews, type DeviceViewsStats } from './views';
import type { TwinFeedLateness } from '../clients/twin-feed';
import { nativeEd25519Verify } from '../device/ed25519-native';

/**
 * `wavegate gateway`: the device side's only Temporal client (docs/formats.md, "Gateway HTTP API").
 * Every request is authenticated with the device's own identity key (core/agent-auth.ts) and reaches
 * only that device's twin: the device id comes from the verified header, never from the path or body.
 *
 *   POST /v1/sync     { report, knownVersion, waitMs } -> TwinView (long-poll through twinSync)
 *   POST /v1/report   { report }                       -> TwinView (a sync that does not wait)
 *   GET  /v1/payload/<profile>/<revision>/<name>       -> the payload file's bytes
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
}

export const DEFAULT_MAX_LONG_POLLS = DEFAULT_LIMITS.maxLongPolls;
const PAYLOAD_ROUTE = /^\/v1\/payload\/([A-Za-z0-9][A-Za-z0-9._-]{0,63})\/([1-9][0-9]{0,15})\/([A-Za-z0-9._-]{1,255})$/;

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
  /** Devices seen without a body digest under --accept-agents-without-digest (each logged once). */
  const legacyAgents = new Set<string>();
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
      log,
    });

  const syncInput = (body: Record<string, unknown>, waits: boolean): TwinSyncInput => {
    const input = {
      report: body.report ?? null,
      knownVersion: body.knownVersion ?? 0,
      waitMs: waits ? (body.waitMs ?? 0) : 0,
    };
    const problem = syncProblem(input);
    if (problem) throw new HttpRefusal(400, 'INVALID_INPUT', problem.replace(/^twinSync: /, ''));
    return input as TwinSyncInput;
  };

  /** The sync or report a POST /v1/sync or /v1/report carries, parsed; null for any other request. */
  const bodyInput = (req: IncomingMessage, body: Buffer): TwinSyncInput | null => {
    const path = (req.url ?? '').split('?')[0]!;
    if (req.method === 'POST' && (path === '/v1/sync' || path === '/v1/report'))
      return syncInput(parseJsonObject(body), path === '/v1/sync');
    return null;
  };

  const route = async (
    req: IncomingMessage,
    res: ServerResponse,
    device: string,
    input: TwinSyncInput | null,
    gone: AgentGone,
  ): Promise<void> => {
    const path = (req.url ?? '').split('?')[0]!;
    if (input) {
      if (input.waitMs <= 0) return sendJson(res, 200, await views.sync(device, input, gone));
      const slot = longPolls.take(device);
      if (slot === 'total')
        throw new HttpRefusal(
          503,
          'BUSY',
          `the gateway holds ${longPolls.size} long-polls, its limit; retry after a few seconds`,
        );
      if (slot === 'key')
        throw new HttpRefusal(
          429,
          'DEVICE_LIMIT',
          `${device} already holds ${longPolls.of(device)} long-polls, a device's share (${limits.maxLongPollsPerDevice}); retry after the one it holds answers`,
        );
      // The wait is no idle connection: the socket's inactivity bound is lifted for it, then put back.
      req.socket.setTimeout(input.waitMs + GATEWAY_TIMEOUTS.idleMs);
      try {
        return sendJson(res, 200, await views.sync(device, input, gone));
      } finally {
        longPolls.release(device);
        if (!req.socket.destroyed) req.socket.setTimeout(GATEWAY_TIMEOUTS.idleMs);
      }
    }
    const payload = req.method === 'GET' ? PAYLOAD_ROUTE.exec(path) : null;
    if (payload) {
      const [profile, revision, name] = [payload[1]!, Number(payload[2]), payload[3]!];
      // The agent may have learned the revision from another gateway a moment before this one's feed did.
      const desires = (view: TwinView) =>
        Object.hasOwn(view.desired, profile) && view.desired[profile]!.revision === revision;
      const entry = payloadEntry(await views.view(device, desires), profile, revision, name);
      return sendPayload(res, await openPayload(opts.profilesRoot, profile, entry));
    }
    if (path.startsWith('/v1/payload/'))
      throw new HttpRefusal(400, 'INVALID_INPUT', 'path: must be /v1/payload/<profile>/<revision>/<file name>');
    throw new HttpRefusal(
      404,
      'NOT_FOUND',
      `${req.method} ${path.slice(0, 100)}: no such endpoint (POST /v1/sync, POST /v1/report, GET /v1/payload/<profile>/<revision>/<name>)`,
    );
  };

  const handle = (req: IncomingMessage, res: ServerResponse): void => {
    const started = now();
    // The body must follow the headers within GATEWAY_TIMEOUTS.bodyMs, counted from here (the headers are in).
    const headersAt = Date.now();
    const bodyTimeout = () => ({
      ms: Math.max(0, GATEWAY_TIMEOUTS.bodyMs - (Date.now() - headersAt)),
      boundMs: GATEWAY_TIMEOUTS.bodyMs,
    });
    const source = sourceOf(req.socket);
    let device = '-';
    let bodyRead = false;
    const line = (status: number | string, extra = '') =>
      `${device} ${req.method} ${(req.url ?? '').slice(0, 120)} ${status} ${now() - started}ms${extra}`;
    // The agent gone (its connection closed before the answer): stop waiting for it, and say so.
    const gone = new AgentGone();
    res.once('close', () => {
      if (!res.writableFinished) gone.abort();
    });
    const refuse = (err: HttpRefusal) => {
      // A body not read (a refusal from the headers, a 413) is never drained: the connection closes after the answer.
      const close = !bodyRead || err.status === 413;
      if (close) res.shouldKeepAlive = false;
      sendError(res, err.status, err.code, err.message, {
        ...(err.status === 503 || err.status === 429 ? { 'retry-after': '5' } : {}),
        ...(close ? { connection: 'close' } : {}),
      });
      if (close) lingerThenClose(req.socket);
      refusals.line(line(err.status, ` ${err.code}${err.status === 401 ? ` ${err.message.slice(0, 120)}` : ''}`));
    };
    const slot = requests.take(source);
    if (slot !== 'ok') {
      refuse(
        new HttpRefusal(
          503,
          'BUSY',
          slot === 'total'
            ? `the gateway is handling ${limits.maxRequests} requests, its limit; retry after a few seconds`
            : `${limits.maxRequestsPerSource} requests from ${source} are being handled, the limit per source address; retry after a few seconds`,
        ),
      );
      return;
    }
    res.once('close', () => requests.release(source));
    void (async () => {
      try {
        const header = req.headers.authorization;
        let auth = authenticate(
          { header, method: req.method ?? 'GET', path: req.url ?? '', now: now() },
          (d) => opts.pins.keyOf(d),
          nonces,
          nativeEd25519Verify,
        );
        let legacyBody: Buffer | undefined;
        if (!auth.ok && auth.reason === 'NO_DIGEST' && opts.acceptAgentsWithoutDigest) {
          // The older protocol signed the same text with the body's hash in it: read the body (bounded), then judge
          // the header as if it had declared that hash. Only for a device that has a pinned key at all.
          const claimed = /device="([^"]{1,128})"/.exec(header ?? '')?.[1];
          if (claimed !== undefined && opts.pins.keyOf(claimed)) {
            req.on('data', (chunk: Buffer) => (bodyBytesRead += chunk.length));
            legacyBody = await readBody(req, MAX_BODY_BYTES, bodyTimeout());
            bodyRead = true;
            auth = authenticate(
              {
                header: `${header}, digest="${bodyHash(legacyBody)}"`,
                method: req.method ?? 'GET',
                path: req.url ?? '',
                now: now(),
              },
              (d) => opts.pins.keyOf(d),
              nonces,
              nativeEd25519Verify,
            );
            if (auth.ok && !legacyAgents.has(auth.device)) {
              legacyAgents.add(auth.device);
              log(
                `${auth.device} sends no body digest (an agent older than this gateway): accepted under --accept-agents-without-digest; upgrade it`,
              );
            }
          }
        }
        if (!auth.ok) {
          if (auth.reason === 'BUSY') throw new HttpRefusal(503, 'BUSY', auth.message);
          if (auth.reason === 'DEVICE_BUSY') throw new HttpRefusal(429, 'DEVICE_LIMIT', auth.message);
          throw new HttpRefusal(
            401,
            auth.reason === 'REPLAY' ? 'REPLAY' : 'UNAUTHENTICATED',
            `${auth.reason}: ${auth.message}`,
          );
        }
        device = auth.device;
        // Only now, for a pinned device whose signature verified, is the body read (bounded in size and in time: bodyMs).
        if (legacyBody === undefined) req.on('data', (chunk: Buffer) => (bodyBytesRead += chunk.length));
        let body: Buffer | undefined = legacyBody ?? (await readBody(req, MAX_BODY_BYTES, bodyTimeout()));
        legacyBody = undefined;
        bodyRead = true;
        const mismatch = bodyDigestProblem(auth.digest, body);
        if (mismatch) throw new HttpRefusal(401, 'UNAUTHENTICATED', `BODY_DIGEST: ${mismatch}`);
        const input = bodyInput(req, body);
        // Parsed: the body is not kept while a long-poll waits (10,000 held kept 17 MiB: bench/README.md).
        body = undefined;
        await route(req, res, device, input, gone);
        log(line(res.statusCode));
      } catch (err) {
        if (gone.aborted || (req.socket?.destroyed ?? true)) {
          // Not the control plane's fault: the client (or a timeout on its slow request) closed the connection first.
          refusals.line(line('-', ' client closed the connection before the answer'));
        } else if (res.headersSent) {
          // A payload send cut short (the file changed under it): the agent sees a short answer.
          res.destroy();
          refusals.line(line(res.statusCode, ` cut: ${(err as Error).message.slice(0, 200)}`));
        } else if (err instanceof HttpRefusal) {
          refuse(err);
        } else {
          // Temporal unreachable, or something unforeseen: the agent backs off and retries.
          sendError(
            res,
            503,
            'UNAVAILABLE',
            `the gateway cannot reach the control plane now: ${(err as Error).message.slice(0, 200)}`,
            { 'retry-after': '5' },
          );
          refusals.line(line(503, ` UNAVAILABLE ${(err as Error).message.slice(0, 200)}`));
        }
      }
    })();
  };

  return {
    handle,
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
