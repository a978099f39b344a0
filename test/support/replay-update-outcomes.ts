import { join } from 'node:path';
import { bundleWorkflowCode, Worker, type InjectedSinks } from '@temporalio/worker';
import { installQuietRuntime, WORKFLOWS_PATH } from '../../workers/worker';
import { loadHistory } from './histories';
import type { UpdateOutcomeSinks } from './update-outcomes-interceptor';

/** One update of a recorded history: how it ended when recorded, and how its handler ends on replay. */
export interface UpdateOutcome {
  file: string;
  updateId: string;
  /** From the history's WorkflowExecutionUpdateCompleted event. */
  recorded: 'ok' | 'failed' | 'not completed';
  /** From the handler on replay (the interceptor's report). */
  replayed: 'ok' | 'failed' | 'not handled';
  /** The handler's error message on replay, when it threw. */
  failure?: string;
}

/**
 * Replay recorded histories (test/fixtures/histories) with the current workflow code, and compare each
 * update's outcome on replay with the one in the history. `errors` are the replay's own failures
 * (non-determinism the SDK detects); `outcomes` lists every accepted update, recorded and replayed. The
 * SDK itself does not compare an update's outcome: a handler that throws on replay where it once returned
 * replays without error while the workflow's state diverges.
 */
export async function replayUpdateOutcomes(
  files: readonly string[],
): Promise<{ errors: string[]; outcomes: UpdateOutcome[] }> {
  installQuietRuntime();
  const replayed = new Map<string, string | null>();
  const sinks: InjectedSinks<UpdateOutcomeSinks> = {
    updateOutcomes: {
      handled: {
        fn: (info, updateId, _name, failure) => void replayed.set(`${info.workflowId} ${updateId}`, failure),
        callDuringReplay: true,
      },
    },
  };
  const workflowBundle = await bundleWorkflowCode({
    workflowsPath: WORKFLOWS_PATH,
    workflowInterceptorModules: [join(__dirname, 'update-outcomes-interceptor.ts')],
    logger: { log() {}, trace() {}, debug() {}, info() {}, warn() {}, error: (m: string) => console.error(m) },
  });
  const loaded = files.map((file) => ({ file, ...loadHistory(file) }));
  const errors: string[] = [];
  const histories = loaded.map(({ file, workflowId, history }) => ({ workflowId: `${workflowId}#${file}`, history }));
  for await (const result of Worker.runReplayHistories({ workflowBundle, sinks }, histories)) {
    if (result.error) errors.push(`${result.workflowId}: ${result.error}`);
  }
  const outcomes: UpdateOutcome[] = [];
  for (const { file, workflowId, history } of loaded) {
    const completed = new Map<string, 'ok' | 'failed'>();
    const accepted: string[] = [];
    for (const event of history.events ?? []) {
      const acc = event.workflowExecutionUpdateAcceptedEventAttributes;
      if (acc?.acceptedRequest?.meta?.updateId) accepted.push(acc.acceptedRequest.meta.updateId);
      const done = event.workflowExecutionUpdateCompletedEventAttributes;
      if (done?.meta?.updateId) completed.set(done.meta.updateId, done.outcome?.failure ? 'failed' : 'ok');
    }
    for (const updateId of accepted) {
      const key = `${workflowId}#${file} ${updateId}`;
      const failure = replayed.get(key);
      const outcome: UpdateOutcome = {
        file,
        updateId,
        recorded: completed.get(updateId) ?? 'not completed',
        replayed: !replayed.has(key) ? 'not handled' : failure === null ? 'ok' : 'failed',
      };
      outcomes.push(typeof failure === 'string' ? { ...outcome, failure } : outcome);
    }
  }
  return { errors, outcomes };
}
