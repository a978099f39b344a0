import type { Client } from '@temporalio/client';
import type { RevisionSteps } from '../core/rollout/input';
import { EnvelopeRejected } from '../device/apply-errors';

/**
 * A revert's floor exemption with the facts Temporal holds, not the ones its input asserts: the close time
 * of the rollout run it reverts (a device's revert window runs from it, core/floor.ts) is read from that
 * run's own record, and a run that is not closed (or that this namespace does not know) reverts nothing.
 * A hand-made input naming a later `closedAt` buys no time; the device's own way back bounds it anyway.
 */
export async function withRecordedClose(steps: RevisionSteps, client: () => Client): Promise<RevisionSteps> {
  const below = steps.floor?.below;
  if (below?.kind !== 'revert') return steps;
  const closedAt = await closeTimeOf(client(), below.rollout, below.run);
  if (closedAt === undefined)
    throw new EnvelopeRejected(
      'BELOW_FLOOR',
      `this revert names ${below.rollout} run ${below.run}, which Temporal does not show closed: only a completed rollout is reverted`,
    );
  return { ...steps, floor: { ...steps.floor!, below: { ...below, closedAt } } };
}

/** Close times are final once a run is closed: kept for the runs a worker reverts (a revert asks once per device). */
const CLOSED = new Map<string, number>();
const CLOSED_KEPT = 256;

async function closeTimeOf(client: Client, rollout: string, run: string): Promise<number | undefined> {
  const key = `${rollout}\n${run}`;
  const known = CLOSED.get(key);
  if (known !== undefined) return known;
  let closeTime: Date | undefined;
  try {
    const described = await client.workflow.getHandle(rollout, run).describe();
    closeTime = described.status.name === 'RUNNING' ? undefined : described.closeTime;
  } catch (err) {
    // Not found is an answer (no such run); anything else (Temporal away) is retried by the activity.
    if ((err as Error).name === 'WorkflowNotFoundError') return undefined;
    throw err;
  }
  if (!closeTime) return undefined;
  if (CLOSED.size >= CLOSED_KEPT) CLOSED.delete(CLOSED.keys().next().value!);
  CLOSED.set(key, closeTime.getTime());
  return closeTime.getTime();
}
