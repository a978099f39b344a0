import * as wf from '@temporalio/workflow';
import {
  desire,
  desireProblem,
  hasNews,
  recordSync,
  requestReverify,
  restoreTwinState,
  syncProblem,
  TWIN_HISTORY_LIMIT,
  viewOf,
} from '../core/twin';
import {
  TWIN_REFUSED,
  twinDesireSignal,
  twinReverifySignal,
  twinSyncUpdate,
  twinViewQuery,
  type DeviceTwinInput,
} from '../contracts/twin';

/**
 * The device twin `device:<id>`: an entity that lives as long as the device (core/twin.ts holds the
 * state and every check). The rollout sets desired state by signal; the device's agent syncs through
 * the gateway by update and long-polls for news. Its history stays bounded: it continues as new when
 * Temporal suggests it or past TWIN_HISTORY_LIMIT events, once every handler in flight has answered, carrying
 * its state (syncs waiting at that moment return their view and the agent simply syncs again).
 */
export async function deviceTwinWorkflow(input: DeviceTwinInput): Promise<never> {
  const state = restoreTwinState(input.deviceId, input.carried);
  // Date in workflow code is the workflow clock (deterministic on replay).
  const now = () => new Date().toISOString();
  let rolling = false;

  wf.setHandler(
    twinDesireSignal,
    (request) => {
      // A signal has no validator: a malformed desire is dropped here, and the rollout side, which
      // waits for an answer to its requestId, times out on it.
      const problem = desireProblem(request);
      if (problem) wf.log.warn(`twin ${state.deviceId}: ${problem}`);
      else desire(state, request, now());
    },
    { description: 'Set the desired revision of one profile (idempotent by requestId)' },
  );
  wf.setHandler(twinReverifySignal, () => requestReverify(state), {
    description: 'Ask the agent to re-verify every profile and report',
  });
  wf.setHandler(twinViewQuery, () => viewOf(state), {
    description: 'The twin now: desired state, last report, last seen',
  });
  wf.setHandler(
    twinSyncUpdate,
    async (sync) => {
      recordSync(state, sync, now());
      if (sync.waitMs > 0 && !hasNews(state, sync.knownVersion)) {
        await wf.condition(() => rolling || hasNews(state, sync.knownVersion), sync.waitMs);
      }
      return viewOf(state);
    },
    {
      validator: (sync) => {
        const problem = syncProblem(sync);
        if (problem)
          throw wf.ApplicationFailure.create({
            type: TWIN_REFUSED,
            message: `${state.deviceId}: ${problem}`,
            nonRetryable: true,
          });
      },
      description: 'An agent sync: record its report, wait up to waitMs for news, answer the view',
    },
  );

  await wf.condition(
    () => wf.workflowInfo().continueAsNewSuggested || wf.workflowInfo().historyLength > TWIN_HISTORY_LIMIT,
  );
  // Waiting syncs answer now (rolling), so every handler can finish before the state moves on.
  rolling = true;
  await wf.condition(wf.allHandlersFinished);
  return wf.continueAsNew<typeof deviceTwinWorkflow>({ deviceId: state.deviceId, carried: state });
}
