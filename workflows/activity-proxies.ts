import * as wf from '@temporalio/workflow';
import type { Activities } from '../activities';

/**
 * Every activity workflow code schedules, proxied here and only here, one proxy per option set: a
 * workflow file imports the activities it calls from this module, with their timeouts and retries as
 * set below. An activity's name is its function's name in createActivities (activities/index.ts), so
 * moving a proxy here changes no command a workflow makes (the replay test holds that).
 */

// ---- the rollout's snapshot and probes ----

export const { snapshotFleet, probeDevices } = wf.proxyActivities<Activities>({
  startToCloseTimeout: '10 minutes',
  heartbeatTimeout: '1 minute',
  retry: { maximumAttempts: 3 },
});

// ---- sliced records (core/rollout/sliced-plan.ts): the plan's shape, a slice's devices ----

export const { planSlices, sliceDevices, sliceTouched, desireAgentRevisionInSlices } = wf.proxyActivities<Activities>({
  startToCloseTimeout: '10 minutes',
  heartbeatTimeout: '1 minute',
  retry: { maximumAttempts: 3 },
});

// ---- a device's apply ----

/** How one batch of devices is applied: the bound on a device's whole apply, and whether an offline device is waited for. */
export interface ApplyProxyOptions {
  applyTimeoutMs: number;
  /** `offline: wait` on an apply: an unreachable device is retried, slowly, until the timeout. */
  waitForOffline: boolean;
}

/** The per-device apply, with its timeout and retry chosen by the batch it runs in. */
export function applyRevisionActivity(opts: ApplyProxyOptions): wf.ActivityInterfaceFor<Activities>['applyRevision'] {
  return wf.proxyActivities<Activities>({
    // `applyTimeout` bounds a device's whole apply, retries included; a device that is offline under
    // `offline: wait` is retried until it runs out.
    startToCloseTimeout: opts.applyTimeoutMs,
    scheduleToCloseTimeout: opts.applyTimeoutMs,
    // A worker that dies mid-apply is noticed after this long and the device's apply is retried on
    // another worker, which reattaches to the apply still running (or finished) under the device's
    // apply lock instead of starting another. The apply heartbeats every second whatever it is doing,
    // after a quiet first 2 s (activities/quiet-heartbeat.ts), so 6 s is four missed beats.
    heartbeatTimeout: '6 seconds',
    // Only the device saying no (and refusals: host key, login, envelope, a lock held by another
    // rollout) is terminal, as non-retryable failures; a lost connection or worker retries until
    // `applyTimeout` runs out, so worker deaths never use up a device's attempts.
    retry: opts.waitForOffline
      ? { initialInterval: '5 seconds', backoffCoefficient: 2, maximumInterval: '1 minute' }
      : { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '30 seconds' },
  }).applyRevision;
}

// ---- the health gate ----

/** One health check over a few slices' changed devices (sliced records), bounded as one chunk of a check. */
export function sliceHealthCheckActivity(
  healthTimeoutMs: number,
): wf.ActivityInterfaceFor<Activities>['sliceHealthCheck'] {
  return wf.proxyActivities<Activities>({
    startToCloseTimeout: healthTimeoutMs + 60_000,
    heartbeatTimeout: '30 seconds',
    retry: { maximumAttempts: 2 },
  }).sliceHealthCheck;
}

/** One chunk of a health check, bounded by the spec's health timeout. */
export function runHealthCheckActivity(healthTimeoutMs: number): wf.ActivityInterfaceFor<Activities>['runHealthCheck'] {
  return wf.proxyActivities<Activities>({
    startToCloseTimeout: healthTimeoutMs + 30_000,
    heartbeatTimeout: '30 seconds',
    // A check that cannot answer is inconclusive by itself; retrying it only hides the evidence.
    retry: { maximumAttempts: 2 },
  }).runHealthCheck;
}

// ---- the audit trail ----

const AUDIT_REFUSALS = ['AuditConflict', 'AuditInvalid', 'AuditCorrupt'];

/** The nightly canary's verdict record must land: retry until it does, except when retrying cannot help. */
export const { appendAudit } = wf.proxyActivities<Activities>({
  startToCloseTimeout: '30 seconds',
  retry: {
    initialInterval: '1 second',
    backoffCoefficient: 2,
    maximumInterval: '30 seconds',
    nonRetryableErrorTypes: AUDIT_REFUSALS,
  },
});

/**
 * The trail's override record and health check: bounded, so a record that keeps failing (the sink retrying
 * an out-of-order seq, a disk that stays full) becomes a hold the operator can see instead of a silent wait.
 */
export const { appendAudit: appendAuditBounded, auditHealth } = wf.proxyActivities<Activities>({
  startToCloseTimeout: '30 seconds',
  retry: {
    initialInterval: '1 second',
    backoffCoefficient: 2,
    maximumInterval: '30 seconds',
    maximumAttempts: 8,
    nonRetryableErrorTypes: AUDIT_REFUSALS,
  },
});

/**
 * The trail's appends: the story does not wait for them, so a failure must
 * reach the workflow at once to hold new device starts at the next decision; one attempt, then the hold
 * asks the sink whether the trail is whole (a passing blip costs one poll) and writes the record again.
 */
export const { appendAudit: appendAuditOnce } = wf.proxyActivities<Activities>({
  startToCloseTimeout: '30 seconds',
  retry: { maximumAttempts: 1, nonRetryableErrorTypes: AUDIT_REFUSALS },
});

// ---- webhooks ----

/**
 * At least once, with backoff, and bounded: six attempts of at most 15 s each, 1, 2, 4, 8 and 16 s apart
 * (3 minutes at most in all), then the delivery is given up and listed in status. A refusal (a 4xx other
 * than 408/429, a redirect) or a secret the worker does not have is not retried.
 */
export const { deliverWebhook } = wf.proxyActivities<Activities>({
  startToCloseTimeout: '15 seconds',
  scheduleToCloseTimeout: '3 minutes',
  retry: {
    initialInterval: '1 second',
    backoffCoefficient: 2,
    maximumInterval: '30 seconds',
    maximumAttempts: 6,
    nonRetryableErrorTypes: ['WebhookRefused', 'WebhookSecretMissing'],
  },
});

// ---- agent devices' desired state after a rollout ----

export const { desireAgentRevision } = wf.proxyActivities<Activities>({
  startToCloseTimeout: '5 minutes',
  heartbeatTimeout: '1 minute',
  retry: { maximumAttempts: 5 },
});

// ---- the nightly canary ----

export const { fleetRevision, newestRevisionAbove, prepareCanary, runningOfProfile } = wf.proxyActivities<Activities>({
  startToCloseTimeout: '10 minutes',
  retry: { maximumAttempts: 3 },
});

// ---- start's preflight ----

// One attempt: a worker that cannot answer (an older one without the activity) is the client's timeout
// to report, not something a retry would change.
export const { checkWorkerContent } = wf.proxyActivities<Activities>({
  startToCloseTimeout: '20 seconds',
  retry: { maximumAttempts: 1 },
});

// ---- the freeze entity (workflows/freeze.ts) and the nightly canary's freeze check ----

/** A hold or a release: a list and up to a few hundred updates, each refused or answered in seconds. */
export const { holdRolloutsForFreeze, releaseRolloutsOfFreeze } = wf.proxyActivities<Activities>({
  startToCloseTimeout: '5 minutes',
  retry: { maximumAttempts: 3 },
});

/** Read the freeze entity: a query, one attempt after another for a few seconds, then the canary says it could not. */
export const { freezeCovering } = wf.proxyActivities<Activities>({
  startToCloseTimeout: '30 seconds',
  retry: { maximumAttempts: 3 },
});

// ---- the two-person rule (workflows/approvals.ts) ----

/** One read of approvers.yaml and one signature check: seconds at most; a worker that cannot read it says why. */
export const { verifyOperatorStatement } = wf.proxyActivities<Activities>({
  startToCloseTimeout: '20 seconds',
  retry: { maximumAttempts: 3 },
});
