import type { Client } from '@temporalio/client';
import { WavegateError } from '../core/errors';
import type { Inventory } from '../core/inventory';
import {
  membershipPages,
  membershipVolumes,
  membershipWorkflowId,
  type MembershipPage,
  type MembershipPlan,
  type MembershipRef,
  type MembershipVolume,
  type VolumeLimits,
} from '../core/membership';
import type { NodeDownMark } from '../core/node-down';
import {
  MEMBERSHIP_WORKFLOW,
  pageQuery,
  progressQuery,
  sealUpdate,
  storePageUpdate,
  type MembershipWorkflow,
} from '../contracts/membership';

/**
 * The one client of membership entities `membership:<digest>` (workflows/membership.ts; messages in
 * contracts/membership.ts): the CLI and the nightly canary write one, the snapshot reads its pages.
 */

/**
 * Write a membership: one entity `membership:<digest>`, or for a membership larger than one volume
 * (core/membership.ts MAX_VOLUME_PAGES) one entity per volume, in order, each named by its own digest;
 * the ref carries the digest over every page either way. Safe to repeat after an interrupted upload: a
 * volume already sealed is reused as it is.
 */
export async function storeMembership(
  client: Client,
  taskQueue: string,
  inventory: Pick<Inventory, 'devices'>,
  source: string,
  marks: ReadonlyMap<string, NodeDownMark> = new Map(),
  limits?: VolumeLimits,
): Promise<MembershipRef> {
  const { pages, digest } = membershipPages(inventory, marks);
  const volumes = membershipVolumes(pages, limits);
  const whole = { digest, devices: inventory.devices.length, pages: pages.length, source };
  if (volumes.length === 1) return { workflowId: await storeEntity(client, taskQueue, whole, pages), ...whole };
  const stored: MembershipVolume[] = [];
  for (const [i, volume] of volumes.entries()) {
    const plan = {
      digest: volume.digest,
      devices: volume.devices,
      pages: volume.pages.length,
      source: `${source} (volume ${i + 1} of ${volumes.length})`,
    };
    const workflowId = await storeEntity(client, taskQueue, plan, volume.pages);
    stored.push({ workflowId, digest: plan.digest, devices: plan.devices, pages: plan.pages });
  }
  return { workflowId: stored[0]!.workflowId, ...whole, volumes: stored };
}

/**
 * One entity: start `membership:<digest>` or use the running one (conflict policy USE_EXISTING: the
 * same content is the same entity), ask how far an earlier upload got, upload the pages it does not
 * hold yet, one update each, and seal it. (No update-with-start here: the first answer needed is the
 * entity's progress, a query, before any page can be chosen.)
 */
async function storeEntity(
  client: Client,
  taskQueue: string,
  plan: MembershipPlan,
  pages: readonly MembershipPage[],
): Promise<string> {
  const workflowId = membershipWorkflowId(plan.digest);
  const handle = await client.workflow.start<MembershipWorkflow>(MEMBERSHIP_WORKFLOW, {
    workflowId,
    taskQueue,
    args: [plan],
    workflowIdConflictPolicy: 'USE_EXISTING',
    staticSummary: `membership of ${plan.devices} devices from ${plan.source}`,
    // Long-lived and queried by later snapshots: under Worker Versioning it follows the current build
    // instead of staying pinned to the one it started on, as the registry entity does. No effect unversioned.
    versioningOverride: 'AUTO_UPGRADE',
  });
  // An upload under load may be cut (an update whose workflow task timed out, a server restart): it is
  // resumed from the entity's own progress, a few times with a growing pause, as a re-run of start would.
  for (let attempt = 1; ; attempt++) {
    try {
      let progress = await handle.query(progressQuery);
      if (progress.digest !== plan.digest)
        throw new WavegateError('CONFLICT', `${workflowId} holds membership ${progress.digest}, not ${plan.digest}`, {
          workflowId,
        });
      for (let index = progress.pagesStored; index < pages.length && !progress.sealed; index++) {
        progress = await handle.executeUpdate(storePageUpdate, { args: [pages[index]!] });
      }
      if (!progress.sealed) progress = await handle.executeUpdate(sealUpdate, { args: [] });
      return workflowId;
    } catch (err) {
      // A refusal (the validator's, a conflict) is an answer, not a cut: never asked again.
      if (err instanceof WavegateError || err instanceof sdk().WorkflowUpdateFailedError || attempt >= UPLOAD_ATTEMPTS)
        throw err;
      await new Promise((resume) => setTimeout(resume, 1_000 * 2 ** (attempt - 1)));
    }
  }
}

/** The client SDK, loaded when an upload fails: `wavegate plan` imports this module and never loads the SDK (test/unit/cli-lazy-load.test.ts). */
const sdk = () => require('@temporalio/client') as typeof import('@temporalio/client');

/** Tries of one entity's upload (1, 2, 4, 8 s between them). */
const UPLOAD_ATTEMPTS = 5;

/** Page `index` of a sealed membership, or null (no such page, or not sealed yet). */
export async function membershipPage(
  client: Client,
  workflowId: string,
  index: number,
): Promise<MembershipPage | null> {
  return client.workflow.getHandle(workflowId).query(pageQuery, index);
}
