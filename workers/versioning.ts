import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import type { Client } from '@temporalio/client';
import type { VersioningBehavior, WorkerDeploymentVersion } from '@temporalio/common';
import { temporal } from '@temporalio/proto';
import { WavegateError } from '../core/errors';
import { isCheckout, PROJECT_ROOT } from '../intake/package-layout';

/**
 * Temporal Worker Versioning for wavegate workers (docs/architecture.md, "Upgrading workers"): which
 * deployment version a worker polls as, and the operator's calls on a deployment (list its versions,
 * make one current, move a pinned rollout). Without a deployment name a worker runs unversioned.
 */
export interface WorkerVersioning {
  version: WorkerDeploymentVersion;
  behavior: VersioningBehavior;
  /** Where the build id came from, for the start-up line: a flag, the environment, or derived. */
  buildIdSource: string;
}

export interface VersioningFlags {
  deploymentName?: string;
  buildId?: string;
  versioningBehavior?: string;
}

export const VERSIONING_BEHAVIORS: Record<string, VersioningBehavior> = {
  pinned: 'PINNED',
  'auto-upgrade': 'AUTO_UPGRADE',
};

// The server joins them as `<deployment>.<build id>`: a deployment name has no dot, a build id may.
const DEPLOYMENT_NAME = /^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$/;
const BUILD_ID = /^[A-Za-z0-9][A-Za-z0-9._+-]{0,99}$/;

/**
 * The workflow code a build id stands for: the workflow entry's tree and what it bundles, the message
 * definitions (contracts/) and the pure core (test/unit/architecture.test.ts checks that workflow code
 * imports nothing else).
 */
export const WORKFLOW_SOURCE_DIRS = [
  join(PROJECT_ROOT, 'workflows'),
  join(PROJECT_ROOT, 'contracts'),
  join(PROJECT_ROOT, 'core'),
];

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true })
    .flatMap((e) =>
      e.isDirectory() ? sourceFiles(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : [],
    )
    .sort();
}

function versionOf(packageJson: string): string {
  return (JSON.parse(readFileSync(packageJson, 'utf8')) as { version: string }).version;
}

/**
 * The build id a worker gets when none is given: wavegate's version and a hash of what decides the
 * commands a workflow makes (the workflow sources, the contracts and core they import, the workflow SDK's version), so
 * two workers with the same id run the same workflow code and a changed workflow file is a new build.
 */
export function defaultBuildId(dirs: string[] = WORKFLOW_SOURCE_DIRS): string {
  const hash = createHash('sha256');
  hash.update(`@temporalio/workflow ${versionOf(require.resolve('@temporalio/workflow/package.json'))}\n`);
  for (const dir of dirs) {
    for (const file of sourceFiles(dir)) {
      hash.update(`${relative(PROJECT_ROOT, file)}\n`);
      hash.update(readFileSync(file));
    }
  }
  return `${versionOf(join(PROJECT_ROOT, 'package.json'))}-${hash.digest('hex').slice(0, 12)}`;
}

/**
 * What the build (`npm run build`, scripts/build-info.ts) records in dist/: the build id computed from the
 * sources it compiled. An installed package ships no .ts sources to hash, so its workers take this; a
 * checkout and the package built from the same commit therefore derive the same build id.
 */
export const BUILD_INFO_FILE = join(PROJECT_ROOT, 'dist', 'build-info.json');

export interface BuildInfo {
  buildId: string;
}

/** The derived build id: hashed from the sources in a checkout, read from dist/build-info.json when installed. */
export function derivedBuildId(root: string = PROJECT_ROOT, buildInfoFile: string = BUILD_INFO_FILE): string {
  if (isCheckout(root)) return defaultBuildId();
  if (!existsSync(buildInfoFile))
    throw new WavegateError(
      'INVALID_STATE',
      `${buildInfoFile} is missing: this package was not built with \`npm run build\`; give the worker --build-id (or $WAVEGATE_BUILD_ID)`,
    );
  const info = JSON.parse(readFileSync(buildInfoFile, 'utf8')) as Partial<BuildInfo>;
  if (typeof info.buildId !== 'string')
    throw new WavegateError(
      'INVALID_STATE',
      `${buildInfoFile} has no buildId: rebuild the package, or give the worker --build-id`,
    );
  return checkBuildId(info.buildId, buildInfoFile);
}

export function checkDeploymentName(value: string, field = '--deployment-name'): string {
  if (!DEPLOYMENT_NAME.test(value))
    throw new WavegateError(
      'INVALID_INPUT',
      `${field} "${value}": a deployment name is 1-100 letters, digits, '-' or '_' (no dot), starting with a letter or digit`,
      { field, value },
    );
  return value;
}

export function checkBuildId(value: string, field = '--build-id'): string {
  if (!BUILD_ID.test(value))
    throw new WavegateError(
      'INVALID_INPUT',
      `${field} "${value}": a build id is 1-100 letters, digits, '.', '_', '+' or '-', starting with a letter or digit`,
      { field, value },
    );
  return value;
}

export function parseVersioningBehavior(value: string): VersioningBehavior {
  const behavior = VERSIONING_BEHAVIORS[value];
  if (!behavior)
    throw new WavegateError(
      'INVALID_INPUT',
      `--versioning-behavior "${value}": expected one of ${Object.keys(VERSIONING_BEHAVIORS).join(', ')}`,
      { field: '--versioning-behavior', value },
    );
  return behavior;
}

/**
 * The worker's versioning from its flags, then `WAVEGATE_DEPLOYMENT_NAME` / `WAVEGATE_BUILD_ID`;
 * undefined (unversioned, as before) without a deployment name. A build id or behaviour given without a
 * deployment name is refused: it would silently do nothing.
 */
export function resolveWorkerVersioning(
  flags: VersioningFlags,
  env: NodeJS.ProcessEnv = process.env,
  buildIdOf: () => string = derivedBuildId,
): WorkerVersioning | undefined {
  const deploymentName = flags.deploymentName ?? (env.WAVEGATE_DEPLOYMENT_NAME || undefined);
  const givenBuildId = flags.buildId ?? (env.WAVEGATE_BUILD_ID || undefined);
  if (!deploymentName) {
    if (flags.buildId)
      throw new WavegateError(
        'INVALID_INPUT',
        `--build-id ${flags.buildId}: needs --deployment-name (or $WAVEGATE_DEPLOYMENT_NAME); without one the worker is unversioned`,
        { field: '--build-id', value: flags.buildId },
      );
    if (flags.versioningBehavior)
      throw new WavegateError(
        'INVALID_INPUT',
        `--versioning-behavior ${flags.versioningBehavior}: needs --deployment-name (or $WAVEGATE_DEPLOYMENT_NAME); without one the worker is unversioned`,
        { field: '--versioning-behavior', value: flags.versioningBehavior },
      );
    return undefined;
  }
  checkDeploymentName(deploymentName, flags.deploymentName ? '--deployment-name' : 'WAVEGATE_DEPLOYMENT_NAME');
  const buildIdField = flags.buildId ? '--build-id' : 'WAVEGATE_BUILD_ID';
  const buildId = givenBuildId ? checkBuildId(givenBuildId, buildIdField) : buildIdOf();
  return {
    version: { deploymentName, buildId },
    behavior: parseVersioningBehavior(flags.versioningBehavior ?? 'pinned'),
    buildIdSource: givenBuildId ? buildIdField : 'derived from the package version and the workflow sources',
  };
}

/** The SDK's worker option for a versioned worker. */
export function workerDeploymentOptions(versioning: WorkerVersioning) {
  return {
    version: versioning.version,
    useWorkerVersioning: true as const,
    defaultVersioningBehavior: versioning.behavior,
  };
}

export function describeVersioning(versioning: WorkerVersioning | undefined): string {
  if (!versioning) return 'unversioned (no --deployment-name): every workflow task goes to whichever worker polls';
  const { deploymentName, buildId } = versioning.version;
  const behavior = versioning.behavior === 'PINNED' ? 'pinned' : 'auto-upgrade';
  return `deployment ${deploymentName} build ${buildId} (${versioning.buildIdSource}), new rollouts ${behavior}`;
}

// ---- The operator's calls on a deployment (the TS client has no wrapper; these are the gRPC calls the
// `temporal worker deployment` CLI makes).

export interface DeploymentVersionRow {
  buildId: string;
  status: string;
  drainage: string;
  current: boolean;
  ramping: boolean;
}

export interface DeploymentDescription {
  deploymentName: string;
  current?: string;
  ramping?: string;
  versions: DeploymentVersionRow[];
  /** False while the server still propagates a routing change to the task queues. */
  routingSettled: boolean;
  conflictToken: Uint8Array;
}

function enumName(value: number | null | undefined, names: Record<number, string>, prefix: string): string {
  return (names[value ?? 0] ?? 'UNSPECIFIED').replace(prefix, '').toLowerCase();
}

function isNotFound(err: unknown): boolean {
  return (err as { code?: number }).code === 5; // grpc NOT_FOUND
}

export async function describeDeployment(client: Client, deploymentName: string): Promise<DeploymentDescription> {
  let response: temporal.api.workflowservice.v1.DescribeWorkerDeploymentResponse;
  try {
    response = await client.workflowService.describeWorkerDeployment({
      namespace: client.options.namespace,
      deploymentName,
    });
  } catch (err) {
    if (isNotFound(err))
      throw new WavegateError(
        'NOT_FOUND',
        `no worker deployment "${deploymentName}" in namespace ${client.options.namespace}: start a worker with --deployment-name ${deploymentName} first`,
        { field: '--deployment-name', value: deploymentName },
      );
    throw err;
  }
  const info = response.workerDeploymentInfo;
  const current = info?.routingConfig?.currentDeploymentVersion?.buildId || undefined;
  const ramping = info?.routingConfig?.rampingDeploymentVersion?.buildId || undefined;
  const { WorkerDeploymentVersionStatus, VersionDrainageStatus } = temporal.api.enums.v1;
  const versions = (info?.versionSummaries ?? []).map((v) => {
    const buildId = v.deploymentVersion?.buildId ?? (v.version ?? '').split('.').slice(1).join('.');
    return {
      buildId,
      status: enumName(v.status, WorkerDeploymentVersionStatus, 'WORKER_DEPLOYMENT_VERSION_STATUS_'),
      drainage: enumName(v.drainageStatus ?? v.drainageInfo?.status, VersionDrainageStatus, 'VERSION_DRAINAGE_STATUS_'),
      current: buildId === current,
      ramping: buildId === ramping,
    };
  });
  const routingSettled =
    info?.routingConfigUpdateState !==
    temporal.api.enums.v1.RoutingConfigUpdateState.ROUTING_CONFIG_UPDATE_STATE_IN_PROGRESS;
  return {
    deploymentName,
    ...(current ? { current } : {}),
    ...(ramping ? { ramping } : {}),
    versions,
    routingSettled,
    conflictToken: response.conflictToken,
  };
}

/** The builds a deployment has seen, sorted, for messages. */
export function knownBuilds(d: DeploymentDescription): string {
  return (
    d.versions
      .map((v) => v.buildId)
      .sort()
      .join(', ') || 'none'
  );
}

/**
 * Make `buildId` the deployment's current version: new rollouts start there, auto-upgrade ones move
 * there at their next task, pinned ones stay where they started. Refused (NOT_FOUND) for a build no
 * worker has polled as, so a typo cannot send every new rollout to a version nobody runs.
 */
export async function setCurrentVersion(
  client: Client,
  deploymentName: string,
  buildId: string,
  identity: string,
): Promise<{ previous?: string }> {
  const before = await describeDeployment(client, deploymentName);
  if (!before.versions.some((v) => v.buildId === buildId)) {
    throw new WavegateError(
      'NOT_FOUND',
      `deployment ${deploymentName} has no build "${buildId}" (known: ${knownBuilds(before)}): start its workers first`,
      { field: 'build-id', value: buildId },
    );
  }
  let response: Awaited<ReturnType<typeof client.workflowService.setWorkerDeploymentCurrentVersion>>;
  try {
    response = await client.workflowService.setWorkerDeploymentCurrentVersion({
      namespace: client.options.namespace,
      deploymentName,
      buildId,
      conflictToken: before.conflictToken,
      identity,
    });
  } catch (err) {
    // The server refuses a build whose workers have not (yet) polled every task queue the current one
    // serves: its task queues would become unversioned. Its workers' first polls register them a moment
    // after they start.
    if (
      (err as { code?: number }).code === 9 /* FAILED_PRECONDITION */ &&
      /missing active task queues/.test((err as Error).message)
    ) {
      throw new WavegateError(
        'INVALID_STATE',
        `deployment ${deploymentName}: build "${buildId}" does not poll every task queue the current build${before.current ? ` ${before.current}` : ''} serves yet: start its workers on each of them (both workflow tasks and activities), wait a moment for their first polls, and try again`,
        { field: 'build-id', value: buildId },
      );
    }
    throw err;
  }
  const previous = response.previousDeploymentVersion?.buildId || undefined;
  return previous ? { previous } : {};
}

/**
 * Move one running workflow to another build: pinned to `to` (its next task runs there, and it stays),
 * or auto-upgrade (it follows the current version from its next task). This is how a pinned rollout
 * leaves a build whose workers are gone; the target build must replay its history (patched()).
 */
export async function moveWorkflow(
  client: Client,
  workflowId: string,
  to: { pinnedTo: WorkerDeploymentVersion } | 'auto-upgrade',
  identity: string,
): Promise<void> {
  const { VersioningOverride } = temporal.api.workflow.v1;
  const versioningOverride =
    to === 'auto-upgrade'
      ? { autoUpgrade: true }
      : {
          pinned: {
            behavior: VersioningOverride.PinnedOverrideBehavior.PINNED_OVERRIDE_BEHAVIOR_PINNED,
            version: to.pinnedTo,
          },
        };
  try {
    await client.workflowService.updateWorkflowExecutionOptions({
      namespace: client.options.namespace,
      workflowExecution: { workflowId },
      workflowExecutionOptions: { versioningOverride },
      updateMask: { paths: ['versioning_override'] },
      identity,
    });
  } catch (err) {
    if (isNotFound(err))
      throw new WavegateError('NOT_FOUND', `no running workflow "${workflowId}"`, {
        field: 'workflow-id',
        value: workflowId,
      });
    throw err;
  }
}

/** Where a workflow runs now: its build, its behaviour, and the override an operator set, if any. */
export async function workflowVersioning(
  client: Client,
  workflowId: string,
): Promise<{ buildId?: string; behavior?: string; override?: string }> {
  const response = await client.workflowService.describeWorkflowExecution({
    namespace: client.options.namespace,
    execution: { workflowId },
  });
  const info = response.workflowExecutionInfo?.versioningInfo;
  const { VersioningBehavior } = temporal.api.enums.v1;
  const override = info?.versioningOverride;
  return {
    ...(info?.deploymentVersion?.buildId ? { buildId: info.deploymentVersion.buildId } : {}),
    ...(info?.behavior ? { behavior: enumName(info.behavior, VersioningBehavior, 'VERSIONING_BEHAVIOR_') } : {}),
    ...(override
      ? {
          override: override.autoUpgrade
            ? 'auto-upgrade'
            : override.pinned?.version?.buildId
              ? `pinned to ${override.pinned.version.buildId}`
              : 'set',
        }
      : {}),
  };
}
