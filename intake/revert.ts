import type { Client } from '@temporalio/client';
import type { RevertOf, RolloutInput } from '../core/rollout/input';
import type { Inventory } from '../core/inventory';
import { revertSpec } from '../core/rollout/revert';
import { loadRolloutInventory } from './inventory';
import { loadRegisteredRolloutContent, loadRolloutContent, type RolloutContent } from './prepare';
import { assembleRolloutInput, stepsOf } from './rollout-input';

/** What a revert is built from: the completed rollout's own input (from its history) and what it changed. */
export interface RevertRequest {
  /** The input the completed rollout ran with. */
  original: RolloutInput;
  /** That rollout's id and run. */
  reverts: RevertOf;
  /** The devices it changed (core/rollout/revert.ts `changedDevices`): the revert's only devices. */
  devices: string[];
  /** One phase, no gate timer, the original phases' health checks merged. */
  fast: boolean;
  profilesRoot: string;
  /** Default: the inventory the original read. */
  inventoryPath?: string;
  /** The inventory already read and validated (a file, or over HTTP); read from the path when not given. */
  inventory?: Inventory;
  startedBy: string;
  /** Take both revisions from `registry:<profile>` through this client instead of the profile's files. */
  client?: Client;
}

/**
 * The revert's rollout input, through the same intake as `start`: both revisions are read again and
 * verified against the profile's pins now, the spec checked against the inventory, the health checks
 * against the revision gone back to. The way down is exactly the original's way back (fromRevision's
 * signed steps, with the toRevision's explicit `rollback` command if it has one), and the way back from
 * the revert is the toRevision itself. Its id is given at start (an id of its own, cli/client.ts); the
 * profile's lock excludes any other start of the profile while it runs.
 */
export function revertRolloutInput(req: RevertRequest & { client?: undefined }): RolloutInput;
export function revertRolloutInput(req: RevertRequest & { client: Client }): Promise<RolloutInput>;
export function revertRolloutInput(req: RevertRequest): RolloutInput | Promise<RolloutInput> {
  const request = {
    spec: req.original.spec,
    specSource: `${req.reverts.rolloutId} (the rollout reverted)`,
    profilesRoot: req.profilesRoot,
  };
  return req.client
    ? loadRegisteredRolloutContent(req.client, request).then((c) => inputOf(req, c))
    : inputOf(req, loadRolloutContent(request));
}

function inputOf(req: RevertRequest, content: RolloutContent): RolloutInput {
  const inventoryPath = req.inventoryPath ?? req.original.inventoryPath;
  const spec = revertSpec(req.original.spec, req.fast);
  const assembled = assembleRolloutInput({
    spec,
    specSource: `revert of ${req.reverts.rolloutId}`,
    inventory: req.inventory ?? loadRolloutInventory(inventoryPath),
    inventoryPath,
    profile: content.profile,
    layout: content.layout,
    // Swapped: the revert's target is the original's fromRevision, its way back the original's target.
    target: content.from,
    from: content.target,
    startedBy: req.startedBy,
    rolloutId: `rollout:${spec.profile}`,
  });
  return {
    ...assembled,
    steps: stepsOf(content.layout, content.from, content.target),
    rollbackSteps: stepsOf(content.layout, content.target),
    onlyDevices: req.devices,
    ...(req.original.sliceSize ? { sliceSize: req.original.sliceSize } : {}),
    reverts: req.reverts,
  };
}
