import * as wf from '@temporalio/workflow';
import {
  addWindow,
  dueWork,
  freezeRequestProblem,
  memoWindow,
  nextDue,
  publicWindow,
  releaseReason,
  startsAt,
  windowsToLift,
  type FreezeState,
  type HeldWindow,
} from '../core/freeze';
import {
  FREEZES_MEMO,
  FREEZE_REFUSED,
  addFreezeUpdate,
  freezesQuery,
  liftFreezeUpdate,
  type FreezeInput,
  type FreezeWorkflow,
  type LiftFreezeRequest,
  type ReleaseResult,
} from '../contracts/freeze';
import { holdRolloutsForFreeze, releaseRolloutsOfFreeze } from './activity-proxies';

/** Continue as new past this many events (a window in force sweeps every minute, a few events each: hours of them). */
export const FREEZE_HISTORY_LIMIT = 2_000;

/**
 * The freeze entity `wavegate-freeze`, one per namespace (core/freeze.ts holds the state and every rule): the
 * windows live here, durable, not in a file or a wiki. At a window's start it holds every running rollout in
 * its scope (a pause recorded `by: freeze:<id>`, through the holdRolloutsForFreeze activity), once more
 * FREEZE_RESWEEP_MS later for a rollout that visibility did not list yet, then every FREEZE_SWEEP_EVERY_MS for
 * one started by a path that does not ask the freeze (never pausing again one it paused); at its end, or when lifted, it
 * resumes the rollouts it paused that are still paused by it (releaseRolloutsOfFreeze) and drops the window.
 * An add that takes effect at once answers after the first hold, so `wavegate freeze` returns with the
 * rollouts held; a lift answers after the resumes. New starts are refused by their clients reading
 * the freezes (cli/, and the nightly canary's activity); the sweeps hold what started without asking.
 */
export async function freezeWorkflow(input: FreezeInput): Promise<never> {
  const state: FreezeState = input.carried ?? { windows: [], next: 1 };
  /** Windows being lifted, with who lifted them and why. */
  const lifting = new Map<string, { by: string; reason?: string }>();
  const released = new Map<string, ReleaseResult>();
  let changed = false;
  // The windows as the CLI's refusals read them (contracts/freeze.ts FREEZES_MEMO): with every change.
  const publish = () => wf.upsertMemo({ [FREEZES_MEMO]: state.windows.map(memoWindow) });
  if (state.windows.length > 0) publish();

  wf.setHandler(
    addFreezeUpdate,
    async (req) => {
      const window = addWindow(state, req, Date.now());
      publish();
      changed = true;
      if (startsAt(window) <= Date.now())
        await wf.condition(() => window.heldAt !== undefined || !state.windows.includes(window));
      return { window: publicWindow(window), paused: [...window.paused] };
    },
    {
      validator: (req) => {
        const problem = freezeRequestProblem(req, state.windows, Date.now());
        if (problem) throw refusal('INVALID_INPUT', problem);
      },
      description: 'Add a freeze window; one in force now answers once the running rollouts in its scope are held',
    },
  );
  const liftProblem = (req: LiftFreezeRequest): string | HeldWindow[] => {
    if (typeof req !== 'object' || req === null || typeof req.by !== 'string' || !req.by.trim())
      return 'expected { id | all, by }';
    return windowsToLift(state, req);
  };
  wf.setHandler(
    liftFreezeUpdate,
    async (req) => {
      // Decided again here: a lift of the same window that ran since the validator leaves nothing to lift.
      const windows = liftProblem(req);
      if (typeof windows === 'string') throw refusal('NOT_FOUND', windows);
      const lift = { by: req.by, ...(req.reason ? { reason: String(req.reason).slice(0, 200) } : {}) };
      for (const w of windows) lifting.set(w.id, lift);
      changed = true;
      await wf.condition(() => windows.every((w) => released.has(w.id)));
      const results = windows.map((w) => released.get(w.id)!);
      return {
        lifted: windows.map((w) => w.id),
        resumed: results.flatMap((r) => r.resumed),
        left: results.flatMap((r) => r.left),
      };
    },
    {
      validator: (req) => {
        const problem = liftProblem(req);
        if (typeof problem === 'string')
          throw refusal(problem.startsWith('no freeze') ? 'NOT_FOUND' : 'INVALID_INPUT', problem);
      },
      description: 'Lift a freeze (or all): resume the rollouts it paused that are still paused by it',
    },
  );
  wf.setHandler(
    freezesQuery,
    () => ({ windows: state.windows.map(publicWindow), now: new Date(Date.now()).toISOString() }),
    { description: 'Every freeze window held, scheduled or in force, with the entity clock' },
  );

  for (;;) {
    const next = nextDue(state, Date.now());
    // Continue as new only with no lift pending and every handler done (an add or a lift waits on this loop).
    const ready = () => lifting.size === 0 && wf.allHandlersFinished() && longHistory();
    const wait = () => changed || lifting.size > 0 || ready();
    if (next === undefined) await wf.condition(wait);
    else if (next > Date.now()) await wf.condition(wait, next - Date.now());
    changed = false;
    const now = Date.now();
    const { hold, end } = dueWork(state, now);
    for (const w of [...end, ...state.windows.filter((x) => lifting.has(x.id) && !end.includes(x))]) await release(w);
    for (const w of hold) if (state.windows.includes(w)) await holdFor(w);
    if (ready()) break;
  }
  return wf.continueAsNew<FreezeWorkflow>({ carried: state });

  function longHistory(): boolean {
    return wf.workflowInfo().historyLength > FREEZE_HISTORY_LIMIT || wf.workflowInfo().continueAsNewSuggested;
  }

  async function release(w: HeldWindow): Promise<void> {
    let result: ReleaseResult;
    try {
      result = await releaseRolloutsOfFreeze.executeWithOptions({ summary: `release rollouts of ${w.id}` }, [
        { freezeId: w.id, rollouts: w.paused, reason: releaseReason(w, lifting.get(w.id)) },
      ]);
    } catch (err) {
      // The window goes either way (a lift must not hang); the rollouts not resumed are named with why.
      const why = `not resumed: ${(err as Error).message}`.slice(0, 300);
      result = { resumed: [], left: w.paused.map((rolloutId) => ({ rolloutId, why })) };
    }
    state.windows = state.windows.filter((x) => x !== w);
    publish();
    lifting.delete(w.id);
    released.set(w.id, result);
  }

  async function holdFor(w: HeldWindow): Promise<void> {
    const first = !w.heldAt;
    try {
      const held = await holdRolloutsForFreeze.executeWithOptions({ summary: `hold rollouts in ${w.id}` }, [
        { freezeId: w.id, reason: w.reason, scope: w.scope, ...(w.paused.length ? { skip: [...w.paused] } : {}) },
      ]);
      for (const id of held.paused) if (!w.paused.includes(id)) w.paused.push(id);
      w.resweep = first;
    } catch (err) {
      // Swept again after FREEZE_RESWEEP_MS: a freeze that could not list or pause stays in force.
      wf.log.warn(`${w.id}: hold failed: ${(err as Error).message}`);
      w.resweep = true;
    }
    w.heldAt = new Date(Date.now()).toISOString();
  }
}

function refusal(code: string, message: string): wf.ApplicationFailure {
  return wf.ApplicationFailure.create({ type: FREEZE_REFUSED, message, nonRetryable: true, details: [{ code }] });
}
