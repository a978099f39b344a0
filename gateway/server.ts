import { createServer as createHttpServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import type { Client } from '@temporalio/client';
import { authenticate, NonceCache } from '../core/agent-auth';
import { syncProblem, TWIN_LIMITS, type TwinSyncInput } from '../core/twin';
import { readTwin } from '../activities/agent/twin-client';
import { HttpRefusal, MAX_BODY_BYTES, parseJsonObject, readBody, sendError, sendJson } from './http';
import { payloadFor } from './payload';
import type { AgentPins } from './pins';
import { syncTwin } from './twin';

/**
 * `wavegate gateway`: the device side's only Temporal client (docs/formats.md, "Gateway HTTP API").
 * Every request is authenticated with the device's own identity key (core/agent-auth.ts) and reaches
 * only that device's twin: the device id comes from the verified header, never from the path or body.
 *
 *   POST /v1/sync     { report, knownVersion, waitMs } -> TwinView (long-poll through twinSync)
 *   POST /v1/report   { report }                       -> TwinView (a sync that does not wait)
 *   GET  /v1/payload/<profile>/<revision>/<name>       -> the payload file's bytes
 *
 * Logs name the device, the route, the status and the time taken: never a key, a signature or a body.
 */
export interface GatewayOptions {
  client: Client;
  taskQueue: string;
  pins: AgentPins;
  /** The gateway's profiles root: payload files are served from `<root>/<profile>/payload/` only. */
  profilesRoot: string;
  /** Long-polls (syncs that may wait) held at once; more are refused 503 BUSY with Retry-After. */
  maxLongPolls?: number;
  log?: (line: string) => void;
  now?: () => number;
  /** Run when a device's first sync starts its twin (gateway/enrolled.ts: converge to the latest completed rollouts). */
  onFirstSync?: (deviceId: string) => Promise<void>;
}

export const DEFAULT_MAX_LONG_POLLS = 2_000;
const PAYLOAD_ROUTE = /^\/v1\/payload\/([A-Za-z0-9][A-Za-z0-9._-]{0,63})\/([1-9][0-9]{0,15})\/([A-Za-z0-9._-]{1,255})$/;

export function gatewayHandler(opts: GatewayOptions): (req: IncomingMessage, res: ServerResponse) => void {
  const nonces = new NonceCache();
  const now = opts.now ?? Date.now;
  const log = opts.log ?? (() => {});
  const maxLongPolls = opts.maxLongPolls ?? DEFAULT_MAX_LONG_POLLS;
  let longPolls = 0;

  const syncInput = (body: Record<string, unknown>, waits: boolean): TwinSyncInput => {
    const input = { report: body.report ?? null, knownVersion: body.knownVersion ?? 0, waitMs: waits ? (body.waitMs ?? 0) : 0 };
    const problem = syncProblem(input);
    if (problem) throw new HttpRefusal(400, 'INVALID_INPUT', problem.replace(/^twinSync: /, ''));
    return input as TwinSyncInput;
  };

  const route = async (req: IncomingMessage, res: ServerResponse, device: string, body: Buffer): Promise<void> => {
    const path = (req.url ?? '').split('?')[0]!;
    if (req.method === 'POST' && (path === '/v1/sync' || path === '/v1/report')) {
      const input = syncInput(parseJsonObject(body), path === '/v1/sync');
      // The agent gone (its connection closed before the answer): stop waiting for it.
      const gone = new AbortController();
      const onClose = () => !res.writableFinished && gone.abort();
      res.once('close', onClose);
      try {
        if (input.waitMs > 0) {
          if (longPolls >= maxLongPolls) throw new HttpRefusal(503, 'BUSY', `the gateway holds ${longPolls} long-polls, its limit; retry after a few seconds`);
          longPolls++;
          try {
            return sendJson(res, 200, await syncTwin(opts.client, opts.taskQueue, device, input, gone.signal, opts.onFirstSync));
          } finally {
            longPolls--;
          }
        }
        return sendJson(res, 200, await syncTwin(opts.client, opts.taskQueue, device, input, gone.signal, opts.onFirstSync));
      } finally {
        res.off('close', onClose);
      }
    }
    const payload = req.method === 'GET' ? PAYLOAD_ROUTE.exec(path) : null;
    if (payload) {
      const bytes = payloadFor(await readTwin(opts.client, device), opts.profilesRoot, payload[1]!, Number(payload[2]), payload[3]!);
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': bytes.length, 'cache-control': 'no-store' });
      res.end(bytes);
      return;
    }
    if (path.startsWith('/v1/payload/')) throw new HttpRefusal(400, 'INVALID_INPUT', 'path: must be /v1/payload/<profile>/<revision>/<file name>');
    throw new HttpRefusal(404, 'NOT_FOUND', `${req.method} ${path.slice(0, 100)}: no such endpoint (POST /v1/sync, POST /v1/report, GET /v1/payload/<profile>/<revision>/<name>)`);
  };

  return (req, res) => {
    const started = now();
    let device = '-';
    const done = (status: number, extra = '') => log(`${device} ${req.method} ${(req.url ?? '').slice(0, 120)} ${status} ${now() - started}ms${extra}`);
    void (async () => {
      try {
        const body = await readBody(req, MAX_BODY_BYTES);
        const auth = authenticate({ header: req.headers.authorization, method: req.method ?? 'GET', path: req.url ?? '', body, now: now() }, (d) => opts.pins.keyOf(d), nonces);
        if (!auth.ok) {
          if (auth.reason === 'BUSY') throw new HttpRefusal(503, 'BUSY', auth.message);
          throw new HttpRefusal(401, auth.reason === 'REPLAY' ? 'REPLAY' : 'UNAUTHENTICATED', `${auth.reason}: ${auth.message}`);
        }
        device = auth.device;
        await route(req, res, device, body);
        done(res.statusCode);
      } catch (err) {
        if (err instanceof HttpRefusal) {
          sendError(res, err.status, err.code, err.message, err.status === 503 ? { 'retry-after': '5' } : err.status === 413 ? { connection: 'close' } : {});
          done(err.status, ` ${err.code}`);
        } else {
          // Temporal unreachable, or something unforeseen: the agent backs off and retries.
          sendError(res, 503, 'UNAVAILABLE', `the gateway cannot reach the control plane now: ${(err as Error).message.slice(0, 200)}`, { 'retry-after': '5' });
          done(503, ` UNAVAILABLE ${(err as Error).message.slice(0, 200)}`);
        }
      }
    })();
  };
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
  close(): Promise<void>;
}

export async function startGateway(opts: GatewayOptions & { listen: ListenOptions }): Promise<RunningGateway> {
  const handler = gatewayHandler(opts);
  const server = opts.listen.tls ? createHttpsServer({ cert: opts.listen.tls.cert, key: opts.listen.tls.key }, handler) : createHttpServer(handler);
  // A long-poll lasts up to TWIN_LIMITS.waitMs: the server's own request timeout must outlast it.
  server.requestTimeout = TWIN_LIMITS.waitMs + 30_000;
  server.headersTimeout = 20_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.listen.port, opts.listen.host, () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  const host = opts.listen.host.includes(':') ? `[${opts.listen.host}]` : opts.listen.host;
  return {
    server,
    url: `${opts.listen.tls ? 'https' : 'http'}://${host}:${port}`,
    // Long-polls in flight are cut: their agents sync again (the twin keeps whatever they reported).
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
