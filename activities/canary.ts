import { hostname } from 'node:os';
import { Context } from '@temporalio/activity';
import type { Client } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import { WavegateError } from '../core/errors';
import type { RunningWorkflow } from '../core/exclusion';
import { PROFILE_NAME, PROFILE_NAME_RULE } from '../core/profile-name';
import type { RolloutInput } from '../core/rollout/input';
import { registeredCanarySpec } from '../intake/canary-spec';
import { heldRolloutOf } from '../clients/profile-lock';
import { loadInventory, loadRolloutInventory } from '../intake/inventory';
import { rolloutInputFromRegistry } from '../intake/prepare';
import { loadProfile } from '../intake/profile';
import { readFleetRevision } from '../device/fleet';
import { twinReader } from '../device/channel';
import { storeMembership } from '../clients/membership';
import { judgeVerdicts } from '../intake/node-down-recheck';
import { markOf, type NodeDownMark } from '../core/node-down';
import { withoutContent } from '../core/worker-files';
import { verdictsPathFor } from '../intake/node-down';
import { fileUnderRoots, readUnderRoots, sameDirectory, WORKER_INVENTORY_ROOTS } from '../intake/worker-files';

/**
 * Activities of the nightly canary (workflows/canary.ts): read the fleet's revision over SSH, and build
 * the canary's RolloutInput from the files and the registry through intake, validated exactly as
 * `wavegate start --registry` does.
 */
export interface CanaryActivityDeps {
  /** Client for the registry (default: the worker's own, from the activity context). */
  client?: Client;
  /** Where the canary's inventory and spec may be (`--inventory-root`; intake/worker-files.ts): none, none is read. */
  inventoryRoots?: readonly string[];
  /** The worker's own profiles root: the only one a canary's `profilesDir` may name. */
  profilesRoot?: string;
}

export interface CanaryTarget {
  profile: string;
  inventoryPath: string;
  /** The worker's profiles root. Named as the canary workflow's input has it since before the name was profilesRoot. */
  profilesDir: string;
}

export interface PrepareCanaryInput extends CanaryTarget {
  /** A rollout spec whose first phase is the canary (its from/to revisions are replaced); default: one device, 5 min gate. */
  specPath?: string;
  fromRevision: number;
  toRevision: number;
  keep: boolean;
  rolloutId: string;
  startedBy: string;
}

function toFailure(err: unknown): never {
  if (err instanceof WavegateError && err.code !== 'UNAVAILABLE' && err.code !== 'FAILED') {
    throw ApplicationFailure.create({ type: `Canary.${err.code}`, message: err.message, nonRetryable: true });
  }
  throw err;
}

export function createCanaryActivities(deps: CanaryActivityDeps = {}) {
  const client = () => deps.client ?? Context.current().client;
  const roots = deps.inventoryRoots ?? [];
  /**
   * The canary's paths come from a schedule's workflow input, written by whoever can write to the
   * namespace: its profiles root must be this worker's own, its inventory (and spec) under the worker's
   * inventory roots, each read by its real path and refused without a byte of its content.
   */
  const profilesOf = (input: CanaryTarget): string => {
    if (deps.profilesRoot && sameDirectory(input.profilesDir, deps.profilesRoot)) return deps.profilesRoot;
    throw new WavegateError(
      'INVALID_INPUT',
      `profilesDir ${JSON.stringify(input.profilesDir)}: not this worker's profiles root (${deps.profilesRoot ?? 'none'}), links resolved; the canary reads its profile where the worker's pins are: re-create the schedule with --profiles ${deps.profilesRoot ?? "<the worker's --profiles>"}`,
      { field: 'profilesDir', value: input.profilesDir },
    );
  };
  const inventoryOf = <T>(input: CanaryTarget, read: (realPath: string) => T): T =>
    readUnderRoots('inventoryPath', input.inventoryPath, roots, WORKER_INVENTORY_ROOTS, 'wavegate inventory', read);
  return {
    /**
     * The workflows of the profile running now (core/exclusion.ts decides which stand in the way of a
     * canary): the rollout holding the profile's lock (or a `rollout:<profile>` started before per-rollout ids)
     * by id (strongly consistent), and by search attribute every other rollout of the profile.
     */
    async runningOfProfile(input: { profile: string }): Promise<RunningWorkflow[]> {
      if (!PROFILE_NAME.test(input.profile))
        throw ApplicationFailure.create({
          type: 'Canary.INVALID_INPUT',
          message: `profile ${JSON.stringify(input.profile)}: ${PROFILE_NAME_RULE}`,
          nonRetryable: true,
        });
      const running: RunningWorkflow[] = [];
      const held = await heldRolloutOf(client(), input.profile);
      if (held) running.push({ workflowId: held.rolloutId, type: 'rolloutWorkflow' });
      const query = `WorkflowType = 'rolloutWorkflow' AND WavegateProfile = '${input.profile}' AND ExecutionStatus = 'Running'`;
      for await (const info of client().workflow.list({ query, pageSize: 100 })) {
        running.push({ workflowId: info.workflowId, type: info.type });
        if (running.length >= 1_000) break;
      }
      return running;
    },

    /** The revision most target devices' markers name now (null: none has a marker). */
    async fleetRevision(
      input: CanaryTarget,
    ): Promise<{ revision: number | null; unreachable: string[]; devices: number }> {
      try {
        const { profile } = loadProfile(profilesOf(input), input.profile);
        const inventory = inventoryOf(input, (realPath) => loadInventory(realPath));
        const read = await readFleetRevision({
          inventory,
          profile: profile.name,
          scope: profile.scope,
          probe: { twins: twinReader(client()) },
        });
        return {
          revision: read.revision,
          unreachable: read.unreachable,
          devices: Object.keys(read.markers).length + read.unreachable.length,
        };
      } catch (err) {
        return toFailure(err);
      }
    },

    /**
     * The canary's rollout input: the spec (file or default) with fromRevision = the fleet's revision and
     * toRevision = the newest registered one, from the registry (envelopes verified against the
     * profile's pins), with `canary: { keep }`.
     */
    async prepareCanary(input: PrepareCanaryInput): Promise<RolloutInput> {
      try {
        const profilesRoot = profilesOf(input);
        const { profile } = loadProfile(profilesRoot, input.profile);
        const specPath = input.specPath && fileUnderRoots('specPath', input.specPath, roots, WORKER_INVENTORY_ROOTS);
        const { spec, specSource } = await registeredCanarySpec(client(), {
          profile,
          profilesRoot,
          ...(specPath ? { specPath } : {}),
          fromRevision: input.fromRevision,
          toRevision: input.toRevision,
        }).catch((err: unknown) => {
          // A refusal of the spec file (its parse, its fields) is said without its content.
          if (specPath && err instanceof WavegateError && err.details.source === specPath)
            throw withoutContent('specPath', input.specPath!, 'canary spec', err);
          throw err;
        });
        const { inventory, realPath } = inventoryOf(input, (realPath) => ({
          inventory: loadRolloutInventory(realPath, 'inventoryPath'),
          realPath,
        }));
        const prepared = await rolloutInputFromRegistry(client(), {
          spec,
          specSource,
          profilesRoot,
          inventory,
          inventoryPath: input.inventoryPath,
          startedBy: input.startedBy,
          rolloutId: input.rolloutId,
        });
        // The canary's inventory is a path on this worker (no CLI runs at night): read here once, with the
        // node-down verdicts beside it rechecked here, and stored in the membership entity, so the canary
        // rollout's snapshot reads the same devices whichever worker runs it.
        const marks = new Map<string, NodeDownMark>();
        const verdicts = await judgeVerdicts({
          inventoryPath: realPath,
          devices: inventory.devices,
          inventory: inventory.devices,
          by: `worker ${process.pid}@${hostname()}`,
        }).catch((err: unknown) => {
          if (err instanceof WavegateError)
            throw withoutContent(
              "inventoryPath's verdicts file",
              verdictsPathFor(realPath),
              'node-down verdicts file',
              err,
            );
          throw err;
        });
        for (const [id, standing] of verdicts) marks.set(id, markOf(standing));
        const membership = await storeMembership(
          client(),
          Context.current().info.taskQueue,
          inventory,
          input.inventoryPath,
          marks,
        );
        return { ...prepared, membership, canary: { keep: input.keep } };
      } catch (err) {
        return toFailure(err);
      }
    },
  };
}
