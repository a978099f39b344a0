import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { devicesInScope } from '../core/gates';
import { WavegateError } from '../core/errors';
import { mapLimit } from '../core/map-limit';
import type { MemberRecord, MembershipRef } from '../core/membership';
import { markOf, type NodeDownMark } from '../core/node-down';
import type { DeviceSnapshot } from '../core/rollout-state';
import { withoutContent } from '../core/worker-files';
import { channelFor, type ChannelDeps } from '../device/channel';
import { loadInventory } from '../intake/inventory';
import { verdictsPathFor } from '../intake/node-down';
import { judgeVerdicts } from '../intake/node-down-recheck';
import { parsedPerContent } from '../intake/parsed-file';
import { readUnderRoots, WORKER_INVENTORY_ROOTS } from '../intake/worker-files';
import type { createMembershipReader } from './membership';
import { memberSnapshot } from './sliced-records';

export interface SnapshotInput {
  /** The inventory file on this worker's disk (`--inventory-on-worker`, older rollouts); absent with `membership`. */
  inventoryPath?: string;
  /** The membership entity the CLI stored (core/membership.ts), read through the client. */
  membership?: MembershipRef;
  profile: string;
  /** Label selector: every listed label must match. */
  scope: Record<string, string>;
  /** A page of the in-scope devices (in inventory order): a large fleet is not one payload. */
  offset: number;
  limit: number;
  /** Only these devices of the scope (a converge over the devices left behind); absent: all of it. */
  only?: string[];
  /**
   * Ignored: the snapshot reads the membership only, whatever this says. The workflow still sends `probe: false`
   * (workflows/rollout-stages.ts: the branch of patch `snapshot-membership-only`, deprecated in r10); only inputs from
   * before that patch (r4) lacked it, and their histories no longer replay. Kept in the type for that workflow code.
   */
  probe?: boolean;
}

export interface ProbeInput {
  profile: string;
  /** The devices to probe, as the snapshot gave them: at most a canary phase's handful. */
  devices: DeviceSnapshot[];
}

export interface SnapshotPage {
  devices: DeviceSnapshot[];
  /** How many devices are in scope in all. */
  total: number;
}

/** A marker read is one short command, but a slow device is not an offline one: the canary probe is generous. */
const PROBE_READ_TIMEOUT_MS = 30_000;

function requiredPath(input: SnapshotInput): string {
  if (!input.inventoryPath)
    throw ApplicationFailure.create({
      type: 'SnapshotInput',
      message: 'snapshot: neither membership nor inventoryPath given',
      nonRetryable: true,
    });
  return input.inventoryPath;
}

/**
 * The devices of the input's inventory file, read only under the worker's inventory roots and refused
 * without a byte of the file (intake/worker-files.ts): the refusal goes into the workflow history.
 * Returns the file's real path too: the node-down verdicts are read beside it.
 */
function rootedInventory(input: SnapshotInput, roots: readonly string[]) {
  const path = requiredPath(input);
  try {
    return readUnderRoots('inventoryPath', path, roots, WORKER_INVENTORY_ROOTS, 'wavegate inventory', (realPath) => ({
      realPath,
      devices: inventoryDevices(realPath),
    }));
  } catch (err) {
    if (err instanceof WavegateError)
      throw ApplicationFailure.create({ type: `Snapshot.${err.code}`, message: err.message, nonRetryable: true });
    throw err;
  }
}

/**
 * The devices of an inventory file on this worker's disk (`--inventory-on-worker`), parsed once per
 * content (intake/parsed-file.ts): a snapshot of 10,000 devices is ten pages, and each page parsed the whole
 * YAML file again (2.5 s a page: bench/README.md at 8f9a7e9).
 */
const inventoryRead = parsedPerContent<MemberRecord[]>(4);
const inventoryDevices = (path: string): MemberRecord[] => inventoryRead(path, () => loadInventory(path).devices);

export interface SnapshotDeps {
  readMembership: ReturnType<typeof createMembershipReader>;
  channels: ChannelDeps;
  inventoryRoots: readonly string[];
  /** The worker's identity, named as who judged a node-down verdict. */
  identity: string;
  /** How many devices the canary's probe reads at once. */
  probeConcurrency: number;
}

/** The fleet snapshot (a page of the membership) and the canary's probe: the rollout's first reads. */
export function createSnapshotActivities(deps: SnapshotDeps) {
  const { readMembership, channels } = deps;
  return {
    /** A page of the devices in scope as the membership gives them (no marker read: `current` null), fixed for the rollout. */
    async snapshotFleet(input: SnapshotInput): Promise<SnapshotPage> {
      // The CLI's stored membership (read through the client, node-down standings judged by the CLI at
      // start), or with --inventory-on-worker (and older inputs) the file on this worker's disk, under its roots.
      const file = input.membership ? undefined : rootedInventory(input, deps.inventoryRoots);
      const members: readonly MemberRecord[] = file
        ? file.devices
        : await readMembership(
            input.membership!,
            () => Context.current().client,
            () => Context.current().heartbeat(),
          );
      const scoped = devicesInScope(input.scope, members);
      const only = input.only ? new Set(input.only) : undefined;
      const inScope = only ? scoped.filter((d) => only.has(d.id)) : scoped;
      const page = inScope.slice(input.offset, input.offset + input.limit);
      // Node-down verdicts: with a membership, each record carries the standing the CLI judged — this
      // worker never runs a recheck command that came through Temporal. Only a file on this worker's
      // disk has its verdicts (beside it) rechecked here (intake/node-down-recheck.ts).
      const marks = new Map<string, NodeDownMark>();
      if (!file) {
        for (const d of page) if (d.nodeDown) marks.set(d.id, d.nodeDown);
      } else {
        // Beside the file's real path (under the roots); a refusal of the verdicts file says nothing of its content.
        const verdicts = await judgeVerdicts({
          inventoryPath: file.realPath,
          devices: page,
          by: `worker ${deps.identity}`,
          onCheck: () => Context.current().heartbeat(),
        }).catch((err: unknown) => {
          if (err instanceof WavegateError) {
            const refusal = withoutContent(
              "inventoryPath's verdicts file",
              verdictsPathFor(file.realPath),
              'node-down verdicts file',
              err,
            );
            throw ApplicationFailure.create({
              type: `NodeDown.${err.code}`,
              message: refusal.message,
              nonRetryable: true,
            });
          }
          throw err;
        });
        for (const [id, standing] of verdicts) marks.set(id, markOf(standing));
      }
      // The membership only: no device is contacted (its revision and reachability are learned at its own apply, and
      // the canary's few candidates by `probeDevices`). Left-behind and node-down devices are unreachable, uncontacted.
      const devices = page.map((device) => {
        const mark = marks.get(device.id);
        return memberSnapshot({ ...device, ...(mark ? { nodeDown: mark } : {}) });
      });
      return { devices, total: inScope.length };
    },

    /** The marker and reachability of a few devices (the canary's candidates), with generous timeouts. */
    async probeDevices(input: ProbeInput): Promise<DeviceSnapshot[]> {
      let probed = 0;
      return mapLimit(input.devices, deps.probeConcurrency, async (device) => {
        try {
          // The transport's own connect timeout, a generous marker read: a slow device is not an offline one.
          return await channelFor(device, channels).probe(device, input.profile, {
            readTimeoutMs: PROBE_READ_TIMEOUT_MS,
          });
        } finally {
          Context.current().heartbeat(++probed);
        }
      });
    },
  };
}
