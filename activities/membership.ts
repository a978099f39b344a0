import type { Client } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import { WavegateError } from '../core/errors';
import type { Inventory } from '../core/inventory';
import { membershipMismatch, membershipPages, membershipWorkflowId, type MemberRecord, type MembershipPage, type MembershipProgress, type MembershipRef } from '../core/membership';
import type { NodeDownMark } from '../core/node-down';

/**
 * Reads a membership entity's pages through the Temporal client (workflows/membership.ts), so the
 * snapshot sees the same devices whichever worker runs it, and checks them against the digest the
 * rollout names. A membership is content-addressed and never changes once sealed, so the last few read
 * are kept in memory: the ten snapshot pages of a 10,000-device rollout read the entity once.
 */
const CACHED_MEMBERSHIPS = 4;
/** The entity's `page` query (workflows/membership.ts `pageQuery`; activities take nothing from workflows/). */
const PAGE_QUERY = 'page';

export interface MembershipReaderDeps {
  /** The client to query with (the activity context's when not given). */
  client?: Client;
}

export function createMembershipReader(deps: MembershipReaderDeps = {}) {
  const cache = new Map<string, MemberRecord[]>();
  return async function readMembership(ref: MembershipRef, contextClient: () => Client, onPage: () => void = () => {}): Promise<MemberRecord[]> {
    const cached = cache.get(ref.digest);
    if (cached) return cached;
    const handle = (deps.client ?? contextClient()).workflow.getHandle(ref.workflowId);
    const pages: MembershipPage[] = [];
    for (let index = 0; index < ref.pages; index++) {
      const page = await handle.query<MembershipPage | null, [number]>(PAGE_QUERY, index);
      if (!page) throw ApplicationFailure.create({ type: 'MembershipMismatch', message: `${ref.workflowId}: page ${index} of ${ref.pages} not found (not sealed?)`, nonRetryable: true });
      pages.push(page);
      onPage();
    }
    const mismatch = membershipMismatch(ref, pages);
    if (mismatch) throw ApplicationFailure.create({ type: 'MembershipMismatch', message: `${ref.workflowId}: ${mismatch}`, nonRetryable: true });
    const devices = pages.flatMap((p) => p.devices);
    cache.set(ref.digest, devices);
    while (cache.size > CACHED_MEMBERSHIPS) cache.delete(cache.keys().next().value!);
    return devices;
  };
}

/**
 * Writing a membership entity (workflows/membership.ts), for the CLI and the nightly canary's prepareCanary: start `membership:<digest>` (or
 * find it: the same content is the same entity), upload the pages it does not hold yet, one update
 * each, and seal it. Safe to repeat after an interrupted upload; a sealed entity is reused as it is.
 */
export async function storeMembership(
  client: Client,
  taskQueue: string,
  inventory: Pick<Inventory, 'devices'>,
  source: string,
  marks: ReadonlyMap<string, NodeDownMark> = new Map(),
): Promise<MembershipRef> {
  const { pages, digest } = membershipPages(inventory, marks);
  const workflowId = membershipWorkflowId(digest);
  const plan = { digest, devices: inventory.devices.length, pages: pages.length, source };
  try {
    await client.workflow.start('membershipWorkflow', {
      workflowId,
      taskQueue,
      args: [plan],
      workflowIdConflictPolicy: 'FAIL',
      staticSummary: `membership of ${plan.devices} devices from ${source}`,
      // Long-lived and queried by later snapshots: under Worker Versioning it follows the current build
      // instead of staying pinned to the one it started on, as the registry entity does. No effect unversioned.
      versioningOverride: 'AUTO_UPGRADE',
    });
  } catch (err) {
    // Loaded here, not at the top: `wavegate plan` imports this file (through cli/membership-client.ts)
    // and never talks to Temporal; the SDK client is most of a second of start-up.
    const { WorkflowExecutionAlreadyStartedError } = require('@temporalio/client') as typeof import('@temporalio/client');
    if (!(err instanceof WorkflowExecutionAlreadyStartedError)) throw err;
  }
  const handle = client.workflow.getHandle(workflowId);
  let progress = await handle.query<MembershipProgress>('progress');
  if (progress.digest !== digest) throw new WavegateError('CONFLICT', `${workflowId} holds membership ${progress.digest}, not ${digest}`, { workflowId });
  for (let index = progress.pagesStored; index < pages.length && !progress.sealed; index++) {
    progress = await handle.executeUpdate<MembershipProgress, [unknown]>('storePage', { args: [pages[index]] });
  }
  if (!progress.sealed) progress = await handle.executeUpdate<MembershipProgress, []>('seal', { args: [] });
  return { workflowId, digest, devices: plan.devices, pages: plan.pages, source };
}
