import type { Client } from '@temporalio/client';
import { WavegateError } from '../../core/errors';
import { checkFreezeId, isActive, liftReasonOf, scopeText } from '../../core/freeze';
import { liftFreeze, listFreezes } from '../../clients/freeze';
import { sendJson } from '../../http/answer';
import { decodedParam, type BodyBound, type Check, type Route } from '../../http/routes';
import { BOARD_LIMITS } from './limits';
import { temporalAnswers, withinTemporal } from './temporal';

/**
 * The board's freezes (core/freeze.ts, clients/freeze.ts): the banner's read, `GET /api/freezes`, and its button,
 * `POST /api/freezes/<id>/lift`, a state change like the rollouts' controls (the caller known, the board's own
 * page, its session's CSRF token, a reason), recorded as the operator's lift: the rollouts the freeze paused and
 * still paused by it resume, with the operator's name and reason in their controls.
 */
export interface FreezeRouteDeps {
  client: Client;
  log: (line: string) => void;
  /** The route table's check lists (cli/board/routes.ts): a read, and a state change. */
  checks: { read: readonly Check[]; change: readonly Check[] };
  body: BodyBound;
}

export function freezeRoutes(deps: FreezeRouteDeps): Route<string>[] {
  const { client } = deps;
  return [
    {
      method: 'GET',
      path: '/api/freezes',
      checks: deps.checks.read,
      handle: async (a) => {
        const windows = await withinTemporal(client.connection, 'the freezes', () => listFreezes(client));
        const now = Date.now();
        sendJson(a.res, 200, {
          freezes: windows.map((w) => ({ ...w, active: isActive(w, now), scopeText: scopeText(w.scope) })),
        });
      },
    },
    {
      method: 'POST',
      path: /^\/api\/freezes\/([^/]+)\/lift$/,
      checks: deps.checks.change,
      body: deps.body,
      handle: async (a) => {
        const id = checkFreezeId(decodedParam(a.params[0]!, 'freeze id'), 'freeze id');
        for (const key of Object.keys(a.json))
          if (key !== 'reason')
            throw new WavegateError('INVALID_INPUT', `${key}: not a field of a lift (allowed: reason)`, { field: key });
        const reason = liftReasonOf(a.json.reason);
        await temporalAnswers(client.connection);
        const lifted = await withinTemporal(
          client.connection,
          `the lift of ${id}`,
          () => liftFreeze(client, { id, by: a.caller!, reason }),
          BOARD_LIMITS.controlMs,
        );
        const message = `lifted ${id}: resumed ${lifted.resumed.length} rollout(s)${lifted.left.length ? `, left ${lifted.left.length} as they are` : ''}`;
        deps.log(`board: ${message} by ${a.caller}: ${reason}`);
        sendJson(a.res, 200, { ...lifted, message });
      },
    },
  ];
}
