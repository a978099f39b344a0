import { parseHeldVersions, type HeldVersions } from '../core/held-trust';
import { syncProblem, type TwinSyncInput, type TwinView } from '../core/twin';
import { HttpRefusal, sendJson } from '../http/answer';
import type { Asked, Guards, RouteTable } from '../http/routes';
import { GATEWAY_TIMEOUTS, type GatewayLimits, type KeyedCounter } from './limits';
import { openPayload, payloadEntry, sendPayload } from './payload';
import { AGENT_BODY, type AgentCaller } from './signed-request';
import type { TrustNews } from './trust-news';
import type { IdentityRotationNews } from '../core/agent-rotation';
import type { DeviceViews } from './views';

/**
 * The gateway's routes (docs/formats.md, "Gateway HTTP API"), every one a pinned device's signed request
 * whose body is the one it signed; the device comes from the verified header, never from the path or body:
 *
 *   POST /v1/sync     { report, knownVersion, waitMs, held? } -> TwinView and `trust` (long-poll; ./trust-news.ts)
 *   POST /v1/report   { report }                       -> TwinView (a sync that does not wait)
 *   GET  /v1/payload/<profile>/<revision>/<name>       -> the payload file's bytes
 */
export interface GatewayRouteDeps {
  views: DeviceViews;
  longPolls: KeyedCounter;
  limits: GatewayLimits;
  profilesRoot: string;
  guards: Guards<AgentCaller>;
  /** The bounds of every request before it is authenticated (requests in flight). */
  bounds: (asked: Asked<AgentCaller>) => void;
  /** Counts the body bytes read: only after the signature verified (the legacy path's own read counts too). */
  countBody: (chunk: Buffer) => void;
  /** The trust news added to each sync answer (roots, revocations, timestamps); absent: none. */
  trustNews?: TrustNews;
  /**
   * An identity key rotation's part of a sync (./identity-rotation.ts): the `rotationProof` a body carries taken
   * (a string: why it is refused, 400), and the `rotation` news of the answer; absent: no rotations.
   */
  identityRotation?: (device: string, rawProof: unknown) => IdentityRotationNews | string | undefined;
}

const PAYLOAD_ROUTE = /^\/v1\/payload\/([A-Za-z0-9][A-Za-z0-9._-]{0,63})\/([1-9][0-9]{0,15})\/([A-Za-z0-9._-]{1,255})$/;
const SIGNED = ['auth', 'signedBody'] as const;
const JSON_BODY = { ...AGENT_BODY, json: true };
const READ_BODY = { ...AGENT_BODY, json: false };

export function gatewayRoutes(deps: GatewayRouteDeps): RouteTable<AgentCaller> {
  const sync = (waits: boolean) => (asked: Asked<AgentCaller>) => answerSync(deps, asked, waits);
  return {
    routes: [
      { method: 'POST', path: '/v1/sync', checks: SIGNED, body: JSON_BODY, handle: sync(true) },
      { method: 'POST', path: '/v1/report', checks: SIGNED, body: JSON_BODY, handle: sync(false) },
      { method: 'GET', path: PAYLOAD_ROUTE, checks: SIGNED, body: READ_BODY, handle: (a) => answerPayload(deps, a) },
    ],
    // Another method on a known path is no endpoint either: the 404 names method and path together.
    methodNotAllowed: false,
    otherwise: (path) => ({
      checks: SIGNED,
      body: READ_BODY,
      handle: (asked) => {
        if (path.startsWith('/v1/payload/'))
          throw new HttpRefusal(400, 'INVALID_INPUT', 'path: must be /v1/payload/<profile>/<revision>/<file name>');
        throw new HttpRefusal(
          404,
          'NOT_FOUND',
          `${asked.method} ${path.slice(0, 100)}: no such endpoint (POST /v1/sync, POST /v1/report, GET /v1/payload/<profile>/<revision>/<name>)`,
        );
      },
    }),
    guards: deps.guards,
    bounds: deps.bounds,
    onBodyChunk: deps.countBody,
    pathAsSent: true,
  };
}

/** A sync's `held` (the trust versions the agent holds per profile), or 400 naming the field. */
function heldInput(body: Record<string, unknown>): Record<string, HeldVersions> {
  const held = parseHeldVersions(body.held);
  if (typeof held === 'string') throw new HttpRefusal(400, 'INVALID_INPUT', held);
  return held;
}

function syncInput(body: Record<string, unknown>, waits: boolean): TwinSyncInput {
  const input = {
    report: body.report ?? null,
    knownVersion: body.knownVersion ?? 0,
    waitMs: waits ? (body.waitMs ?? 0) : 0,
  };
  const problem = syncProblem(input);
  if (problem) throw new HttpRefusal(400, 'INVALID_INPUT', problem.replace(/^twinSync: /, ''));
  return input as TwinSyncInput;
}

/** A sync (or a report: a sync that does not wait); one that waits holds a long-poll slot, its device's and the gateway's. */
async function answerSync(deps: GatewayRouteDeps, asked: Asked<AgentCaller>, waits: boolean): Promise<void> {
  const { device, gone } = asked.caller!;
  const input = syncInput(asked.json, waits);
  const held = heldInput(asked.json);
  // The proof is taken before any wait: the answer (even a long-poll's) says whether it was.
  const proven =
    asked.json.rotationProof !== undefined ? deps.identityRotation?.(device, asked.json.rotationProof) : undefined;
  if (typeof proven === 'string') throw new HttpRefusal(400, 'INVALID_INPUT', proven);
  asked.json = {};
  // The news is made from the view the answer carries: a timestamp names exactly the desired entry sent with it.
  const answer = (view: TwinView) => {
    const trust = deps.trustNews?.answer(device, held, view);
    const rotation = deps.identityRotation?.(device, undefined);
    return {
      ...view,
      ...(trust && Object.keys(trust).length > 0 ? { trust } : {}),
      ...(rotation && typeof rotation !== 'string' ? { rotation } : {}),
    };
  };
  if (input.waitMs <= 0) return sendJson(asked.res, 200, answer(await deps.views.sync(device, input, gone)));
  const slot = deps.longPolls.take(device);
  if (slot === 'total')
    throw new HttpRefusal(
      503,
      'BUSY',
      `the gateway holds ${deps.longPolls.size} long-polls, its limit; retry after a few seconds`,
    );
  if (slot === 'key')
    throw new HttpRefusal(
      429,
      'DEVICE_LIMIT',
      `${device} already holds ${deps.longPolls.of(device)} long-polls, a device's share (${deps.limits.maxLongPollsPerDevice}); retry after the one it holds answers`,
    );
  // The wait is no idle connection: the socket's inactivity bound is lifted for it, then put back.
  const socket = asked.req.socket;
  socket.setTimeout(input.waitMs + GATEWAY_TIMEOUTS.idleMs);
  try {
    return sendJson(asked.res, 200, answer(await deps.views.sync(device, input, gone)));
  } finally {
    deps.longPolls.release(device);
    if (!socket.destroyed) socket.setTimeout(GATEWAY_TIMEOUTS.idleMs);
  }
}

async function answerPayload(deps: GatewayRouteDeps, asked: Asked<AgentCaller>): Promise<void> {
  const [profile, revision, name] = [asked.params[0]!, Number(asked.params[1]), asked.params[2]!];
  // The agent may have learned the revision from another gateway a moment before this one's feed did.
  const desires = (view: TwinView) =>
    Object.hasOwn(view.desired, profile) && view.desired[profile]!.revision === revision;
  const entry = payloadEntry(await deps.views.view(asked.caller!.device, desires), profile, revision, name);
  return sendPayload(asked.res, await openPayload(deps.profilesRoot, profile, entry));
}
