import {
  BOARD_CONTROLS,
  checkDeviceId,
  checkRolloutId,
  parseControlBody,
  parseConvergeBody,
  parseDeviceQuery,
  parseRevertBody,
  parseRolloutListQuery,
} from '../../core/board';
import { HttpRefusal, sendJson } from '../../http/answer';
import { decodedParam, type Asked, type Check, type Route, type RouteTable } from '../../http/routes';
import type { BoardAccess } from './access';
import {
  auditView,
  deviceHistoryView,
  revertPreview,
  rolloutRows,
  rolloutView,
  sendBoardControl,
  startBoardRevert,
  type BoardSources,
} from './data';
import { fleetProfiles, fleetRevisionParam, fleetView, startBoardConverge, type FleetSource } from './fleet';
import { freezeRoutes } from './freeze';
import { BOARD_LIMITS } from './limits';
import type { SignedStatement } from '../../core/approval';
import { startStatement } from '../operator-statement';
import type { LiveStreams } from './stream';
import { temporalAnswers, withinTemporal } from './temporal';

/**
 * The board's routes (docs/cli.md, "wavegate board"): its page, and a JSON API that answers only its own
 * page (`site`) and only a known operator (`auth`); every state change also comes from that page
 * (`origin`) with its session's CSRF token (`csrf`), and reads a bounded JSON body. http/routes.ts runs
 * the checks, in one order, for every route that names them.
 */
export interface BoardRouteDeps {
  sources: BoardSources;
  fleet: FleetSource | undefined;
  access: BoardAccess;
  streams: LiveStreams;
  /** The page's files, read at start. */
  pages: ReadonlyMap<string, { body: Buffer; type: string }>;
  pollMs: number;
  log: (line: string) => void;
}

/** A read of the API. */
const API: readonly Check[] = ['site', 'auth'];
/** A state change: the board's own page, with its session's token. */
export const CONTROL: readonly Check[] = ['site', 'auth', 'origin', 'csrf'];
const JSON_BODY = { maxBytes: BOARD_LIMITS.maxBodyBytes, json: true };

/** /api/rollouts/<id>[/<action>]: the id is the first param. */
const rolloutPath = (action?: string) => new RegExp(`^/api/rollouts/([^/]+)${action ? `/${action}` : ''}$`);

export function boardRoutes(deps: BoardRouteDeps): RouteTable<string> {
  return {
    routes: [
      ...pageRoutes(deps),
      ...fleetRoutes(deps),
      ...rolloutRoutes(deps),
      ...controlRoutes(deps),
      ...freezeRoutes({
        client: deps.sources.client,
        log: deps.log,
        checks: { read: API, change: CONTROL },
        body: JSON_BODY,
      }),
    ],
    methodNotAllowed: true,
    // An API path no route has is refused as a real one is until the caller is known; any other, at once.
    otherwise: (path) => ({
      checks: path.startsWith('/api/') ? API : [],
      handle: () => {
        const what = path.startsWith('/api/') ? 'endpoint' : 'page';
        throw new HttpRefusal(404, 'NOT_FOUND', `no ${what} ${JSON.stringify(path.slice(0, 100))}`);
      },
    }),
    guards: deps.access.guards(),
    bounds: (a) => deps.access.bounds(a),
  };
}

/** The page's files, and signing in and out. */
function pageRoutes(deps: BoardRouteDeps): Route<string>[] {
  const { access } = deps;
  const files = [...deps.pages].map(
    ([path, page]): Route<string> => ({
      method: ['GET', 'HEAD'],
      path,
      checks: [],
      handle: (a) => {
        a.res.writeHead(200, {
          'content-type': page.type,
          'content-length': page.body.length,
          'cache-control': 'no-cache',
        });
        a.res.end(a.method === 'HEAD' ? undefined : page.body);
      },
    }),
  );
  return [
    ...files,
    { method: 'POST', path: '/api/login', checks: ['site', 'origin'], body: JSON_BODY, handle: (a) => access.login(a) },
    { method: 'POST', path: '/api/logout', checks: ['site', 'origin'], handle: (a) => access.logout(a) },
    { method: 'GET', path: '/api/session', checks: API, handle: (a) => access.session(a, deps.pollMs) },
  ];
}

/** The fleet view (`--inventory`) and its converge. */
function fleetRoutes(deps: BoardRouteDeps): Route<string>[] {
  return [
    {
      method: 'POST',
      path: /^\/api\/fleet\/([^/]+)\/converge$/,
      checks: CONTROL,
      body: JSON_BODY,
      handle: (a) => converge(deps, a),
    },
    {
      method: 'GET',
      path: '/api/fleet',
      checks: API,
      handle: (a) => sendJson(a.res, 200, fleetProfiles(fleetOf(deps))),
    },
    {
      method: 'GET',
      path: /^\/api\/fleet\/(.*)$/,
      checks: API,
      handle: async (a) => {
        const fleet = fleetOf(deps);
        const fresh = a.query.get('fresh') === '1';
        const revision = fleetRevisionParam(a.query.get('revision'));
        sendJson(a.res, 200, await fleetView(fleet, decodedParam(a.params[0]!, 'profile'), fresh, revision));
      },
    },
  ];
}

/** The rollouts: the list, one rollout's view, its live updates, its audit trail, its revert's preview. */
function rolloutRoutes(deps: BoardRouteDeps): Route<string>[] {
  const { sources } = deps;
  const temporal = <T>(what: string, fn: () => Promise<T>) => withinTemporal(sources.client.connection, what, fn);
  const read = (
    action: string | undefined,
    answer: (a: Asked<string>, id: string) => Promise<void>,
  ): Route<string> => ({
    method: 'GET',
    path: rolloutPath(action),
    checks: API,
    handle: (a) => answer(a, rolloutId(a)),
  });
  return [
    {
      method: 'GET',
      path: '/api/rollouts',
      checks: API,
      handle: async (a) => {
        const query = parseRolloutListQuery(a.query);
        sendJson(a.res, 200, await temporal('the rollout list', () => rolloutRows(sources, query)));
      },
    },
    {
      method: 'GET',
      path: /^\/api\/devices\/([^/]+)\/history$/,
      checks: API,
      handle: async (a) => {
        const device = checkDeviceId(decodedParam(a.params[0]!, 'device'));
        sendJson(a.res, 200, await temporal(`the history of ${device}`, () => deviceHistoryView(sources, device)));
      },
    },
    read(undefined, async (a, id) => {
      const query = parseDeviceQuery(a.query);
      sendJson(a.res, 200, await temporal(`the view of ${id}`, () => rolloutView(sources, id, query)));
    }),
    read('events', (a, id) => deps.streams.stream(a.req, a.res, id, parseDeviceQuery(a.query))),
    read('audit', async (a, id) =>
      sendJson(a.res, 200, await temporal(`the audit of ${id}`, () => auditView(sources, id))),
    ),
    read('revert', async (a, id) =>
      sendJson(a.res, 200, await temporal(`the revert of ${id}`, () => revertPreview(sources, id))),
    ),
  ];
}

/** A rollout's controls (pause, resume, approve, abort) and its revert: state changes, each a CONTROL. */
function controlRoutes(deps: BoardRouteDeps): Route<string>[] {
  const { sources } = deps;
  const connection = sources.client.connection;
  const change = (action: string, act: (a: Asked<string>, id: string) => Promise<unknown>): Route<string> => ({
    method: 'POST',
    path: rolloutPath(action),
    checks: CONTROL,
    body: JSON_BODY,
    handle: async (a) => {
      const id = rolloutId(a);
      sendJson(a.res, 200, await act(a, id));
    },
  });
  return [
    change('revert', async (a, id) => {
      const body = parseRevertBody(a.json);
      await temporalAnswers(connection);
      const done = await withinTemporal(
        connection,
        `the revert of ${id}`,
        () => startBoardRevert(sources, id, body, a.caller!),
        BOARD_LIMITS.startMs,
      );
      deps.log(`board: ${done.message}`);
      return done;
    }),
    ...BOARD_CONTROLS.map((control) =>
      change(control, async (a, id) => {
        const body = parseControlBody(control, a.json);
        await temporalAnswers(connection);
        const done = await withinTemporal(
          connection,
          `the ${control} of ${id}`,
          () => sendBoardControl(sources, id, control, body, a.caller!, deps.access.roleOf(a.caller!)),
          BOARD_LIMITS.controlMs,
        );
        deps.log(`board: ${control} of ${id} by ${a.caller}: ${body.reason}`);
        return done;
      }),
    ),
  ];
}

const rolloutId = (a: Asked<string>) => checkRolloutId(decodedParam(a.params[0]!, 'rollout id'));

/** POST /api/fleet/<profile>/converge: the fleet's devices behind, to the last completed rollout's revision. */
async function converge(deps: BoardRouteDeps, a: Asked<string>): Promise<void> {
  const fleet = fleetOf(deps);
  const body = parseConvergeBody(a.json);
  const profile = decodedParam(a.params[0]!, 'profile');
  await temporalAnswers(deps.sources.client.connection);
  const done = await withinTemporal(
    deps.sources.client.connection,
    'the converge',
    () => startBoardConverge(fleet, deps.sources.taskQueue, profile, body, a.caller!, boardStarter(deps, a.caller!)),
    BOARD_LIMITS.startMs,
  );
  // The converge's reason: its rollout records who started it, this log what they said.
  deps.log(`board: ${done.message}: ${body.reason}`);
  sendJson(a.res, 200, done);
}

/** The board's signed start naming the operator and their role here (with --approval-key), for the two-person rule. */
function boardStarter(deps: BoardRouteDeps, by: string): ((rolloutId: string) => SignedStatement) | undefined {
  const key = deps.sources.approvalKey;
  if (!key) return undefined;
  return (rolloutId) => startStatement(key, rolloutId, { operator: by, role: deps.access.roleOf(by) });
}

function fleetOf(deps: BoardRouteDeps): FleetSource {
  if (deps.fleet) return deps.fleet;
  throw new HttpRefusal(
    404,
    'NOT_FOUND',
    'the fleet view needs the inventory: start the board with --inventory <fleet.yaml> (and --profiles <dir>)',
  );
}
