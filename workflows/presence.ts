import * as wf from '@temporalio/workflow';
import {
  PRESENCE_HISTORY_LIMIT,
  presenceBatchProblem,
  presenceQueryProblem,
  pruneSeen,
  recordSeen,
  restorePresenceState,
  seenOf,
} from '../core/presence';
import { presenceOfQuery, presenceSeenSignal, type PresenceInput, type PresenceWorkflow } from '../contracts/presence';

/**
 * A presence shard `presence:<n>`: an entity that lives as long as the fleet (core/presence.ts holds the
 * state and every check). Gateways write the devices they saw in batches, one signal per shard per flush;
 * readers ask for the devices they need by query. Its history stays bounded: it continues as new when
 * Temporal suggests it or past PRESENCE_HISTORY_LIMIT events, once every handler has finished, carrying
 * its state pruned of devices not seen for a week (so the carried state is bounded by the live fleet).
 */
export async function presenceWorkflow(input: PresenceInput): Promise<never> {
  const state = restorePresenceState(input.shard, input.carried);

  wf.setHandler(
    presenceSeenSignal,
    (batch) => {
      // A signal has no validator: a malformed batch is dropped whole here. The gateway checks each entry
      // before it sends (presenceBatches), so this is another writer's bug, and the next flush lands.
      const problem = presenceBatchProblem(batch, state.shard);
      if (problem) wf.log.warn(`presence:${state.shard}: ${problem}`);
      else recordSeen(state, batch);
    },
    { description: 'Devices a gateway saw (per device the later entry stays)' },
  );
  wf.setHandler(
    presenceOfQuery,
    (arg) => {
      const problem = presenceQueryProblem(arg);
      if (problem) throw new Error(`presence:${state.shard}: ${problem}`);
      return seenOf(state, arg.devices);
    },
    { description: 'The entries of the named devices the shard holds' },
  );

  await wf.condition(
    () => wf.workflowInfo().continueAsNewSuggested || wf.workflowInfo().historyLength > PRESENCE_HISTORY_LIMIT,
  );
  await wf.condition(wf.allHandlersFinished);
  // Date in workflow code is the workflow clock (deterministic on replay).
  pruneSeen(state, new Date().toISOString());
  return wf.continueAsNew<PresenceWorkflow>({ shard: state.shard, carried: state });
}
