import * as wf from '@temporalio/workflow';
import {
  askDecision,
  askProblem,
  desire,
  desireProblem,
  feedStamp,
  hasNews,
  recordSync,
  reportDigest,
  requestReverify,
  restoreTwinState,
  syncProblem,
  TWIN_HISTORY_LIMIT,
  TWIN_RUN_EVENTS,
  viewOf,
  withPresence,
} from '../core/twin';
import { WavegateDesiredAt, WavegateReportedAt, WavegateTwinVersion } from '../contracts/search-attributes';
import {
  TWIN_ASKED_NOTHING,
  TWIN_REFUSED,
  twinAskUpdate,
  twinDesireSignal,
  twinReportSignal,
  twinReverifySignal,
  twinSyncUpdate,
  twinViewQuery,
  type DeviceTwinInput,
} from '../contracts/twin';
import type { TwinAskInput } from '../core/twin';

/**
 * The device twin `device:<id>`: an entity that lives as long as the device (core/twin.ts holds the
 * state and every check). The rollout sets desired state by signal; the device's agent syncs through
 * the gateway by update and long-polls for news. Its history stays bounded: it continues as new when
 * Temporal suggests it or past TWIN_RUN_EVENTS events, once every handler in flight has answered, carrying
 * its state (syncs waiting at that moment return their view and the agent simply syncs again).
 */
/** The twin's change feed (search attribute upserts); registered in workflows/patches.ts. */
export const TWIN_FEED_PATCH = 'twin-feed';
/** A report whose answers the gateway delivers itself stamps no `reported` change; registered in workflows/patches.ts. */
export const ANSWERS_DELIVERED_PATCH = 'answers-delivered';
/** Runs of TWIN_RUN_EVENTS, not TWIN_HISTORY_LIMIT; registered in workflows/patches.ts. */
export const TWIN_SHORT_RUNS_PATCH = 'twin-short-runs';

export async function deviceTwinWorkflow(input: DeviceTwinInput): Promise<never> {
  const state = restoreTwinState(input.deviceId, input.carried);
  // Asked first, so its marker lands in a run's first task: runs started before it replay with the long bound.
  const runLimit = wf.patched(TWIN_SHORT_RUNS_PATCH) ? TWIN_RUN_EVENTS : TWIN_HISTORY_LIMIT;
  // Date in workflow code is the workflow clock (deterministic on replay).
  const now = () => new Date().toISOString();
  let rolling = false;
  /**
   * The change feed (docs/architecture.md, "The twin change feed"): a desired change or re-verify request stamps
   * WavegateDesiredAt and the version (gateways learn it in one list call), a recorded report WavegateReportedAt
   * (the waiting rollout learns it the same way). Histories from before the feed carry no such upsert.
   */
  const publish = (change: 'desired' | 'reported', sentAt?: string) => {
    if (!wf.patched(TWIN_FEED_PATCH)) return;
    const at = feedStamp(new Date(), sentAt);
    wf.upsertSearchAttributes(
      change === 'desired'
        ? [
            { key: WavegateDesiredAt, value: at },
            { key: WavegateTwinVersion, value: state.version },
          ]
        : [{ key: WavegateReportedAt, value: at }],
    );
  };

  wf.setHandler(
    twinDesireSignal,
    (request) => {
      // A signal has no validator: a malformed desire is dropped here, and the rollout side, which
      // waits for an answer to its requestId, times out on it.
      const problem = desireProblem(request);
      if (problem) wf.log.warn(`twin ${state.deviceId}: ${problem}`);
      // A request the twin already holds is stamped again: its sender (a waiting apply) asks again when the agent
      // has not taken it, in case a gateway missed the first stamp (docs/architecture.md, "The twin change feed").
      else {
        desire(state, request, now());
        publish('desired', request.sentAt);
      }
    },
    { description: 'Set the desired revision of one profile (idempotent by requestId)' },
  );
  /** A malformed message, refused by its update's validator (nothing reaches history), naming the field and the value. */
  const refused = (problem: string) =>
    wf.ApplicationFailure.create({ type: TWIN_REFUSED, message: `${state.deviceId}: ${problem}`, nonRetryable: true });
  // The checks before an ask count from the asker's clock (its sentAt), as when the apply read the twin itself.
  const decide = (ask: TwinAskInput) =>
    askDecision(withPresence(viewOf(state), ask.seen ?? undefined), ask, Date.parse(ask.request.sentAt));
  wf.setHandler(
    twinAskUpdate,
    (ask) => {
      desire(state, ask.request, now());
      publish('desired', ask.request.sentAt);
      return { kind: 'asked' } as const;
    },
    {
      // An ask that asks nothing (answered already, offline, ahead) is answered by the validator's refusal, so it
      // leaves nothing in history: a retried or skipped apply costs the twin no event.
      validator: (ask) => {
        const problem = askProblem(ask);
        if (problem) throw refused(problem);
        const decision = decide(ask);
        if (decision.kind !== 'asked')
          throw wf.ApplicationFailure.create({
            type: TWIN_ASKED_NOTHING,
            message: `${state.deviceId}: ${decision.kind}`,
            details: [decision],
            nonRetryable: true,
          });
      },
      description:
        'A rollout asks for a desired revision: the checks before asking, then the desire, in one round trip',
    },
  );
  wf.setHandler(
    twinReportSignal,
    (input) => {
      const sync = { report: input?.report ?? null, knownVersion: input?.knownVersion ?? 0, waitMs: 0 };
      const problem = syncProblem(sync);
      if (problem) return wf.log.warn(`twin ${state.deviceId}: twinReport: ${problem}`);
      recordSync(state, sync, now());
      // The gateway completes the applies this report answers: nobody waits on the feed for it (asked only then, so
      // histories of reports without the flag replay as they were). The feed's own patch is asked first, as a
      // published report would: its marker lands with the twin's first report, not inside a later rollout.
      if (input?.answersDelivered === true && wf.patched(TWIN_FEED_PATCH) && wf.patched(ANSWERS_DELIVERED_PATCH))
        return;
      publish('reported', typeof input?.sentAt === 'string' ? input.sentAt : undefined);
    },
    { description: "Record the agent's report, written by the gateway when what it says changed" },
  );
  wf.setHandler(
    twinReverifySignal,
    () => {
      requestReverify(state);
      publish('desired');
    },
    {
      description: 'Ask the agent to re-verify every profile and report',
    },
  );
  wf.setHandler(twinViewQuery, () => viewOf(state), {
    description: 'The twin now: desired state, last report, last seen',
  });
  wf.setHandler(
    twinSyncUpdate,
    async (sync) => {
      const before = reportDigest(state.report);
      recordSync(state, sync, now());
      if (reportDigest(state.report) !== before) publish('reported');
      if (sync.waitMs > 0 && !hasNews(state, sync.knownVersion)) {
        await wf.condition(() => rolling || hasNews(state, sync.knownVersion), sync.waitMs);
      }
      return viewOf(state);
    },
    {
      validator: (sync) => {
        const problem = syncProblem(sync);
        if (problem) throw refused(problem);
      },
      description: 'An agent sync: record its report, wait up to waitMs for news, answer the view',
    },
  );

  await wf.condition(() => wf.workflowInfo().continueAsNewSuggested || wf.workflowInfo().historyLength > runLimit);
  // Waiting syncs answer now (rolling), so every handler can finish before the state moves on.
  rolling = true;
  await wf.condition(wf.allHandlersFinished);
  return wf.continueAsNew<typeof deviceTwinWorkflow>({ deviceId: state.deviceId, carried: state });
}
