import { hostname } from 'node:os';
import { CompleteAsyncError, Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import type { DeviceSnapshot, DeviceTarget } from '../core/rollout-state';
import { devicesInScope } from '../core/gates';
import { loadInventory } from '../intake/inventory';
import { createAuditActivities, DEFAULT_AUDIT_DIR, readAuditKey } from '../audit/file';
import { auditActivitiesOf, type AuditStore } from '../audit';
import { createCanaryActivities } from './canary';
import { parsedPerContent } from '../intake/parsed-file';
import { createHealthActivities } from './health';
import type { Client } from '@temporalio/client';
import type { ApplyHolder, ApplyResult, RevisionSteps } from '../device/steps';
import { CHECKOUT_PROFILES_ROOT } from '../device/steps';
import { createRegistryActivities } from './registry';
import { createPreflightActivities } from './preflight';
import { createWebhookActivities } from './webhooks';
import type { SecretPolicy } from '../core/secret-policy';
import { mapLimit } from '../core/map-limit';
import { quietStartHeartbeat } from './quiet-heartbeat';
import { applyFailureOf } from '../device/apply-failure';
import { withRecordedClose } from './revert-close';
import { judgeVerdicts } from '../intake/node-down-recheck';
import { verdictsPathFor } from '../intake/node-down';
import { markOf, type NodeDownMark } from '../core/node-down';
import type { MemberRecord, MembershipRef } from '../core/membership';
import { createMembershipReader } from './membership';
import { createSlicedPlanActivities, memberSnapshot } from './sliced-records';
import { channelFor, transportName, type ChannelDeps } from '../device/channel';
import { createConvergeActivities } from '../device/twin/converge';
import { WavegateError } from '../core/errors';
import { withoutContent } from '../core/worker-files';
import { readUnderRoots, WORKER_INVENTORY_ROOTS } from '../intake/worker-files';
import { recordDeviceApply } from '../core/metrics';

export type { ApplyResult, RevisionSteps };
export type { WorkerContentAnswer, WorkerContentInput } from './preflight';

export interface ActivityDeps {
  /** Where the per-rollout audit JSONL files go (default `.wavegate/audit`). */
  auditDir?: string;
  /** The audit MAC key, by reference (a 0600 file of hex, read once here): every record gets its MAC. */
  auditKeyFile?: string;
  /** The audit store when not the file store (`--audit-store postgres://…`): opened and migrated by the worker. */
  auditStore?: AuditStore;
  /** How many devices the canary's probe (`probeDevices`) reads at once. */
  probeConcurrency?: number;
  log?: (line: string) => void;
  /**
   * The worker's profiles root: pins (`<profilesRoot>/<profile>/trust.yaml`) and payload files. `wavegate
   * worker` and `wavegate dev` always pass one (intake/profiles-root.ts); unset (library use, tests)
   * it is this checkout's profiles/.
   */
  profilesRoot?: string;
  /**
   * Run steps without a signed envelope for profiles the worker holds no pins for. Off by default: a
   * worker only runs what its own pins signed.
   */
  allowUnsigned?: boolean;
  /**
   * The directories this worker reads files an input names from (`--inventory-root`, intake/worker-files.ts):
   * a rollout's `inventoryPath` (`--inventory-on-worker`), the nightly canary's inventory and spec. Unset or
   * empty: none is read, whoever wrote the input.
   */
  inventoryRoots?: readonly string[];
  /** Client for the registry activities (default: the worker's own, from the activity context). */
  client?: Client;
  /** The worker's identity as Temporal knows it (default the SDK's `<pid>@<host>`), named by checkWorkerContent. */
  identity?: string;
  /**
   * Which webhook secrets and receivers this worker allows (core/secret-policy.ts). Unset: read from
   * the worker's environment (WAVEGATE_WEBHOOK_SECRETS_DIR, WAVEGATE_WEBHOOK_ALLOW_PRIVATE,
   * WAVEGATE_WEBHOOK_ALLOW_HOSTS) when the activities are made.
   */
  webhookPolicy?: SecretPolicy;
  /**
   * Which metrics tokens and metrics sources this worker allows (core/secret-policy.ts). Unset: read from
   * the worker's environment (WAVEGATE_METRICS_TOKENS_DIR, WAVEGATE_METRICS_ALLOW_PRIVATE,
   * WAVEGATE_METRICS_ALLOW_HOSTS) when the activities are made.
   */
  metricsPolicy?: SecretPolicy;
}

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

export interface ApplyInput {
  device: DeviceTarget;
  steps: RevisionSteps;
  commandTimeoutMs: number;
  /**
   * Return `{ outcome: 'offline' }` instead of failing or retrying when the device cannot be reached at
   * first contact (nothing ran on it): an SSH connect that fails before login, an agent whose twin has not synced lately.
   */
  reportOffline?: boolean;
  /**
   * A device whose revision marker is above this answers `{ outcome: 'ahead' }` and nothing runs: the
   * plan's not-for-me "ahead" rule, learned at the apply when the snapshot reads no marker.
   */
  aheadAbove?: number;
}

/**
 * Whether the workflow run that holds a device's apply lock is closed: a proof that its apply activity
 * is gone. Anything short of a closed run (running, unknown here, the server unreachable) is no proof.
 */
async function workflowRunClosed(client: Client, holder: ApplyHolder): Promise<boolean> {
  try {
    const run = await client.workflow.getHandle(holder.rollout, holder.run).describe();
    return run.status.name !== 'RUNNING';
  } catch {
    return false;
  }
}

/** Map a device-step error to a Temporal failure (./apply-failure.ts): only transport trouble that may pass is retried. */
function toFailure(err: unknown): never {
  throw applyFailureOf(err) ?? err;
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

/** The identity the Temporal SDK gives a worker by default. */
export function defaultWorkerIdentity(): string {
  return `${process.pid}@${hostname()}`;
}

/**
 * The devices of an inventory file on this worker's disk (`--inventory-on-worker`), parsed once per
 * content (./parsed-file.ts): a snapshot of 10,000 devices is ten pages, and each page parsed the whole
 * YAML file again (2.5 s a page, bench/README.md).
 */
const inventoryRead = parsedPerContent<MemberRecord[]>(4);
const inventoryDevices = (path: string): MemberRecord[] => inventoryRead(path, () => loadInventory(path).devices);

/** Activities are built by a factory that takes their dependencies; they hold no rollout state. */
export function createActivities(deps: ActivityDeps = {}) {
  const concurrency = deps.probeConcurrency ?? 16;
  const readMembership = createMembershipReader({ client: deps.client });
  // Every device operation goes through its channel (./channel): SSH sessions, or an agent's twin read and written with this client.
  const channels: ChannelDeps = {
    client: () => deps.client ?? Context.current().client,
    profilesRoot: deps.profilesRoot,
    allowUnsigned: deps.allowUnsigned,
  };
  const health = createHealthActivities({
    profilesRoot: deps.profilesRoot,
    ...(deps.metricsPolicy ? { metricsPolicy: deps.metricsPolicy } : {}),
  });
  const converge = createConvergeActivities({ client: deps.client });
  return {
    ...(deps.auditStore
      ? auditActivitiesOf(deps.auditStore)
      : createAuditActivities({
          auditDir: deps.auditDir ?? DEFAULT_AUDIT_DIR,
          log: deps.log,
          ...(deps.auditKeyFile ? { macKey: readAuditKey(deps.auditKeyFile) } : {}),
        })),
    ...health,
    ...createCanaryActivities({
      client: deps.client,
      inventoryRoots: deps.inventoryRoots ?? [],
      profilesRoot: deps.profilesRoot ?? CHECKOUT_PROFILES_ROOT,
    }),
    ...createRegistryActivities({ client: deps.client }),
    ...createPreflightActivities({
      profilesRoot: deps.profilesRoot,
      allowUnsigned: deps.allowUnsigned,
      identity: deps.identity ?? defaultWorkerIdentity(),
    }),
    ...createWebhookActivities(deps.webhookPolicy ? { policy: deps.webhookPolicy } : {}),
    ...converge,
    ...createSlicedPlanActivities({
      readMembership,
      client: () => deps.client ?? Context.current().client,
      heartbeat: () => Context.current().heartbeat(),
      runHealthCheck: (input) => health.runHealthCheck(input),
      desireAgentRevision: (input) => converge.desireAgentRevision(input),
    }),
    /** A page of the devices in scope as the membership gives them (no marker read: `current` null), fixed for the rollout. */
    async snapshotFleet(input: SnapshotInput): Promise<SnapshotPage> {
      // The CLI's stored membership (read through the client, node-down standings judged by the CLI at
      // start), or with --inventory-on-worker (and older inputs) the file on this worker's disk, under its roots.
      const file = input.membership ? undefined : rootedInventory(input, deps.inventoryRoots ?? []);
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
          by: `worker ${deps.identity ?? defaultWorkerIdentity()}`,
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
      return mapLimit(input.devices, concurrency, async (device) => {
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

    /** Bring one device to the revision (verify first, apply, verify, marker). */
    async applyRevision(input: ApplyInput): Promise<ApplyResult> {
      const ctx = Context.current();
      const { workflowExecution, activityId, attempt } = ctx.info;
      const startedAt = Date.now();
      const transport = transportName(input.device);
      const heartbeat = quietStartHeartbeat(ctx);
      try {
        const holder = {
          rollout: workflowExecution?.workflowId ?? 'standalone',
          run: workflowExecution?.runId ?? activityId,
          activity: activityId,
          attempt,
        };
        // A revert's window runs from the close Temporal recorded for the run it reverts, not from its input's word.
        const steps = await withRecordedClose(input.steps, () => deps.client ?? ctx.client);
        // Chosen inside the try: a transport this worker has no channel for is a Transport.config failure.
        const result = await channelFor(input.device, channels).apply(input.device, steps, {
          holder,
          rollout: workflowExecution?.workflowId ?? null,
          taskQueue: ctx.info.taskQueue,
          commandTimeoutMs: input.commandTimeoutMs,
          reportOffline: input.reportOffline,
          ...(input.aheadAbove !== undefined ? { aheadAbove: input.aheadAbove } : {}),
          heartbeat,
          signal: ctx.cancellationSignal,
          holderClosed: (holder) => workflowRunClosed(deps.client ?? ctx.client, holder),
        });
        recordDeviceApply(ctx.metricMeter, { outcome: result.outcome, transport }, (Date.now() - startedAt) / 1000);
        return result;
      } catch (err) {
        // Nothing left to complete: a gateway delivered the agent's answer to this apply (gateway/answers.ts), or the
        // attempt ended, and the server said so at a heartbeat. Nothing failed here. Told "completed asynchronously"
        // (which it was), the SDK sends no completion the server would refuse (a warning per device otherwise).
        if (ctx.cancellationDetails?.notFound) {
          const seconds = (Date.now() - startedAt) / 1000;
          recordDeviceApply(ctx.metricMeter, { outcome: 'answered-elsewhere', transport }, seconds);
          throw new CompleteAsyncError();
        }
        deps.log?.(`apply r${input.steps.revision} -> ${input.device.id} failed: ${(err as Error).message}`);
        recordDeviceApply(ctx.metricMeter, { outcome: 'failed', transport }, (Date.now() - startedAt) / 1000);
        return toFailure(err);
      }
    },
  };
}

export type Activities = ReturnType<typeof createActivities>;
