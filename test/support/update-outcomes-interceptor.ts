import { proxySinks, type Sinks, type WorkflowInterceptorsFactory } from '@temporalio/workflow';

/**
 * Workflow-side half of test/support/replay-update-outcomes.ts, bundled into the workflow code for replay
 * only: reports how each update HANDLER ended (validators do not run on replay). The SDK does not compare
 * an update's replayed outcome with the recorded one, so a handler that now refuses what it once accepted
 * replays "successfully" while the workflow's state silently diverges; this makes it visible.
 */
export interface UpdateOutcomeSinks extends Sinks {
  updateOutcomes: {
    /** `failure` is the handler's error message, or null when it returned. */
    handled(updateId: string, name: string, failure: string | null): void;
  };
}

const { updateOutcomes } = proxySinks<UpdateOutcomeSinks>();

export const interceptors: WorkflowInterceptorsFactory = () => ({
  inbound: [
    {
      handleUpdate(input, next) {
        // The handler's own promise, returned as it is: an `await` here would complete the update a tick
        // later than the workflow does, and reorder its commands on replay (a false non-determinism).
        const result = next(input);
        result.then(
          () => updateOutcomes.handled(input.updateId, input.name, null),
          (err: unknown) =>
            updateOutcomes.handled(input.updateId, input.name, err instanceof Error ? err.message : String(err)),
        );
        return result;
      },
    },
  ],
});
