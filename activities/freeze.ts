import { Context } from '@temporalio/activity';
import type { Client } from '@temporalio/client';
import { freezeActor, pausedByFreeze, scopeCovers, type FreezeTarget, type FreezeWindow } from '../core/freeze';
import type { RolloutInput } from '../core/rollout/input';
import { mapLimit } from '../core/map-limit';
import { isFinalState } from '../core/controls';
import { freezeCoveringNow } from '../clients/freeze';
import type { HoldInput, HoldResult, ReleaseInput, ReleaseResult } from '../contracts/freeze';
import { pauseUpdate, resumeUpdate, statusQuery } from '../contracts/rollout';

/**
 * The freeze entity's side effects (workflows/freeze.ts): list the running rollouts in a freeze's scope by search
 * attribute and pause each as the freeze; resume those it paused that are still paused by it; and the nightly
 * canary's read of the freeze in force (workflows/canary.ts). The rules are core/freeze.ts.
 */
export interface FreezeActivityDeps {
  client?: Client;
}

/** Updates sent at once: 100 rollouts are held within a few seconds (bench/freeze.ts). */
const CONCURRENCY = 32;

function messageOf(err: unknown): string {
  const e = err as { cause?: { message?: string }; message?: string };
  return (e.cause?.message ?? e.message ?? String(err)).slice(0, 300);
}

export function createFreezeActivities(deps: FreezeActivityDeps = {}) {
  const client = () => deps.client ?? Context.current().client;

  /** Running rollouts in the scope: by profile through visibility; by pool, each one's devices read from its status. */
  async function runningInScope(scope: FreezeWindow['scope']): Promise<string[]> {
    const clauses = ["WorkflowType = 'rolloutWorkflow'", "ExecutionStatus = 'Running'"];
    if (scope !== 'all' && 'profile' in scope) clauses.push(`WavegateProfile = '${scope.profile}'`);
    const rows: Array<{ id: string; runId: string }> = [];
    for await (const info of client().workflow.list({ query: clauses.join(' AND '), pageSize: 500 })) {
      rows.push({ id: info.workflowId, runId: info.runId });
      if (rows.length >= 10_000) break;
    }
    if (scope === 'all' || 'profile' in scope) return rows.map((r) => r.id);
    // A pool: the rollouts whose inventory has it (the pools of its budgets, the same rule as a start's refusal);
    // one whose input cannot be read is held too.
    const inPool = await mapLimit(rows, CONCURRENCY, async (row) => {
      try {
        const input = await inputOf(row.id, row.runId);
        return scopeCovers(scope, { profile: input.spec.profile, pools: Object.keys(input.poolBudgets) });
      } catch {
        return true;
      }
    });
    return rows.filter((_, i) => inPool[i]).map((r) => r.id);
  }

  /** A run's input, from its first history event (one event fetched, however long the history is). */
  async function inputOf(workflowId: string, runId: string): Promise<RolloutInput> {
    const { decodeFromPayloadsAtIndex } =
      require('@temporalio/common/lib/internal-non-workflow') as typeof import('@temporalio/common/lib/internal-non-workflow');
    const c = client();
    const page = await c.workflowService.getWorkflowExecutionHistory({
      namespace: c.options.namespace,
      execution: { workflowId, runId },
      maximumPageSize: 1,
    });
    const payloads = page.history?.events?.[0]?.workflowExecutionStartedEventAttributes?.input?.payloads;
    return decodeFromPayloadsAtIndex<RolloutInput>(c.options.loadedDataConverter, 0, payloads);
  }

  return {
    async holdRolloutsForFreeze(input: HoldInput): Promise<HoldResult> {
      const by = freezeActor(input.freezeId);
      const skip = new Set(input.skip ?? []);
      const ids = (await runningInScope(input.scope)).filter((id) => !skip.has(id));
      const result: HoldResult = { paused: [], skipped: [] };
      await mapLimit(ids, CONCURRENCY, async (rolloutId) => {
        const handle = client().workflow.getHandle(rolloutId);
        try {
          // An update: it answers once every running slice holds the pause, so no device starts after it.
          await handle.executeUpdate(pauseUpdate, { args: [{ by, reason: input.reason }] });
          result.paused.push(rolloutId);
        } catch (err) {
          // Refused (already paused, aborting, ended): paused by this freeze already (a retried attempt) counts.
          const status = await handle.query(statusQuery).catch(() => undefined);
          if (status && pausedByFreeze(status.state, status.controls, input.freezeId)) result.paused.push(rolloutId);
          else result.skipped.push({ rolloutId, why: messageOf(err) });
        }
      });
      result.paused.sort();
      return result;
    },

    async releaseRolloutsOfFreeze(input: ReleaseInput): Promise<ReleaseResult> {
      const by = freezeActor(input.freezeId);
      const result: ReleaseResult = { resumed: [], left: [] };
      await mapLimit(input.rollouts, CONCURRENCY, async (rolloutId) => {
        const handle = client().workflow.getHandle(rolloutId);
        try {
          const status = await handle.query(statusQuery);
          if (!pausedByFreeze(status.state, status.controls, input.freezeId)) {
            const last = [...status.controls]
              .reverse()
              .find((c) => c.accepted && (c.control === 'pause' || c.control === 'resume'));
            const why =
              isFinalState(status.state) || status.state === 'running' || !last
                ? `it is ${status.state}`
                : `${last.control === 'pause' ? 'paused' : 'resumed'} by ${last.by} since`;
            result.left.push({ rolloutId, why });
            return;
          }
          await handle.executeUpdate(resumeUpdate, { args: [{ by, reason: input.reason }] });
          result.resumed.push(rolloutId);
        } catch (err) {
          result.left.push({ rolloutId, why: messageOf(err) });
        }
      });
      result.resumed.sort();
      return result;
    },

    /** The freeze in force now that covers a nightly canary of the profile over these pools (null: none). */
    async freezeCovering(input: FreezeTarget): Promise<FreezeWindow | null> {
      return (await freezeCoveringNow(client(), input)) ?? null;
    },
  };
}
