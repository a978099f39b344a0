import { hostname } from 'node:os';
import { Context } from '@temporalio/activity';
import { createFileAuditStore, DEFAULT_AUDIT_DIR, readAuditKey } from '../audit/file';
import { auditActivitiesOf, createCheckpointer, type AuditStore, type CheckpointConfig } from '../audit';
import { createApplyActivities } from './apply';
import { createCanaryActivities } from './canary';
import { createFreezeActivities } from './freeze';
import { createSnapshotActivities } from './snapshot';
import { createHealthActivities } from './health';
import type { Client } from '@temporalio/client';
import type { ApplyResult, RevisionSteps } from '../device/steps';
import { CHECKOUT_PROFILES_ROOT } from '../device/steps';
import { createApprovalActivities } from './approval';
import { createRegistryActivities } from './registry';
import { createPreflightActivities } from './preflight';
import { createWebhookActivities } from './webhooks';
import type { SecretPolicy } from '../core/secret-policy';
import { createMembershipReader } from './membership';
import { createSlicedPlanActivities } from './sliced-records';
import type { ChannelDeps } from '../device/channel';
import { createConvergeActivities } from '../device/twin/converge';

export type { ApplyResult, RevisionSteps };
export type { ApplyInput } from './apply';
export type { ProbeInput, SnapshotInput, SnapshotPage } from './snapshot';
export type { WorkerContentAnswer, WorkerContentInput } from './preflight';

export interface ActivityDeps {
  /** Where the per-rollout audit JSONL files go (default `.wavegate/audit`). */
  auditDir?: string;
  /** The audit MAC key, by reference (a 0600 file of hex, read once here): every record gets its MAC. */
  auditKeyFile?: string;
  /** The audit store when not the file store (`--audit-store postgres://…`): opened and migrated by the worker. */
  auditStore?: AuditStore;
  /**
   * The worker's checkpoint key, key name and witness (`--checkpoint-key`, audit/checkpointer.ts): a checkpoint of
   * the trail at every phase transition. Unset (the default): none is made.
   */
  checkpoints?: CheckpointConfig;
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

/** appendAudit and auditHealth over the worker's store, with its checkpointer when it has a checkpoint key. */
function auditActivities(deps: ActivityDeps) {
  const store =
    deps.auditStore ??
    createFileAuditStore({
      auditDir: deps.auditDir ?? DEFAULT_AUDIT_DIR,
      log: deps.log,
      ...(deps.auditKeyFile ? { macKey: readAuditKey(deps.auditKeyFile) } : {}),
    });
  const log = deps.log ?? ((line: string) => process.stderr.write(`${line}\n`));
  return auditActivitiesOf(
    store,
    deps.checkpoints ? createCheckpointer(store, { ...deps.checkpoints, log }) : undefined,
  );
}

/** The identity the Temporal SDK gives a worker by default. */
export function defaultWorkerIdentity(): string {
  return `${process.pid}@${hostname()}`;
}

/** Activities are built by a factory that takes their dependencies; they hold no rollout state. */
export function createActivities(deps: ActivityDeps = {}) {
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
    ...createSnapshotActivities({
      readMembership,
      channels,
      inventoryRoots: deps.inventoryRoots ?? [],
      identity: deps.identity ?? defaultWorkerIdentity(),
      probeConcurrency: deps.probeConcurrency ?? 16,
    }),
    ...createApplyActivities({ channels, client: deps.client, log: deps.log }),
    ...auditActivities(deps),
    ...health,
    ...createCanaryActivities({
      client: deps.client,
      inventoryRoots: deps.inventoryRoots ?? [],
      profilesRoot: deps.profilesRoot ?? CHECKOUT_PROFILES_ROOT,
    }),
    ...createRegistryActivities({ client: deps.client }),
    ...createFreezeActivities({ client: deps.client }),
    ...createApprovalActivities({ profilesRoot: deps.profilesRoot ?? CHECKOUT_PROFILES_ROOT }),
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
  };
}

export type Activities = ReturnType<typeof createActivities>;
