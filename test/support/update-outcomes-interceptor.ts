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
      async handleUpdate(input, next) {
        try {
          const result = await next(input);
          updateOutcomes.handled(input.updateId, input.name, null);
          return result;
        } catch (err) {
          updateOutcomes.handled(input.updateId, input.name, err instanceof Error ? err.message : String(err));
          throw err;
        }
      },
    },
  ],
});
