import type { Client } from '@temporalio/client';
import { ApplicationFailure, type UpdateDefinition } from '@temporalio/common';
import { canonicalize } from '../core/canonical';
import { WavegateError, type WavegateErrorCode } from '../core/errors';
import { checkProfileName } from '../core/profile-name';
import { parseTrust, type Envelope } from '../core/signing';
import type { HeldTrustRecord } from '../core/held-trust';
import {
  adoptRevocationsUpdate,
  adoptTrustRootUpdate,
  envelopeQuery,
  REGISTRATION_REFUSED,
  registerUpdate,
  REGISTRY_WORKFLOW,
  registryWorkflowId,
  revisionsQuery,
  trustQuery,
  trustStateQuery,
  type RegisterResult,
  type RegistrationRefusal,
  type RegistryTrustState,
  type RegistryWorkflow,
  type RevisionSummary,
} from '../contracts/registry';

/**
 * The one client of a profile's revision registry `registry:<profile>` (workflows/registry.ts; messages
 * in contracts/registry.ts): registration (the CLI's, never an activity's) is update-with-start, the
 * entity clients' style for a write that needs an answer; reads (start, the nightly canary, the fleet
 * board) are queries that never start a registry: NOT_FOUND when the profile has none.
 */

// The SDK client's classes are loaded where a call needs them, not at the top: `wavegate plan` reads
// revisions through this file's importers and never talks to Temporal (the SDK client is most of a
// second of start-up).
const sdk = () => require('@temporalio/client') as typeof import('@temporalio/client');

export interface RegisterEnvelopeOptions extends RegistryStart {
  profile: string;
  envelope: unknown;
  /** Who registers it (recorded with the revision). */
  by: string;
}

export interface RegisterEnvelopeResult extends RegisterResult {
  /** True when the registry was created with other pins than `trustDoc` (its first-use pins). */
  registryTrustDiffers: boolean;
}

/** Pins and threshold in a comparable form (names and order do not matter). */
export function trustIdentity(doc: unknown): string {
  const trust = parseTrust(doc, 'trust');
  return canonicalize({ threshold: trust.threshold, kids: [...trust.keys.keys()].sort() });
}

/** How a call that may create the registry starts it: with these first-use pins, on this task queue. */
export interface RegistryStart {
  /** The trust document (`{ threshold, pins }`); used only when the call creates the registry. */
  trustDoc: unknown;
  taskQueue: string;
  /** The trust root whose pins `trustDoc` is, when it is not version 0 (core/held-trust.ts's record). */
  trustHeld?: HeldTrustRecord;
  /** For tests: continue the registry as new after this many history events. */
  continueAsNewAfterEvents?: number;
}

/**
 * The start operation of an update-with-start (conflict policy USE_EXISTING: racing callers all reach one
 * registry).
 */
function startOperation(profile: string, start: RegistryStart) {
  return new (sdk().WithStartWorkflowOperation)<RegistryWorkflow>(REGISTRY_WORKFLOW, {
    workflowId: registryWorkflowId(profile),
    taskQueue: start.taskQueue,
    args: [
      {
        profile,
        trustDoc: start.trustDoc,
        ...(start.trustHeld ? { trustHeld: start.trustHeld } : {}),
        ...(start.continueAsNewAfterEvents ? { continueAsNewAfterEvents: start.continueAsNewAfterEvents } : {}),
      },
    ],
    workflowIdConflictPolicy: 'USE_EXISTING',
    // A closed registry is not silently replaced by an empty one: the channel would move backwards.
    workflowIdReusePolicy: 'REJECT_DUPLICATE',
    staticSummary: `revision registry of ${profile}`,
    // A registry never ends: under Worker Versioning it must follow the current build rather than stay
    // pinned to the first one it ran on (docs/architecture.md, "Upgrading workers"). No effect unversioned.
    versioningOverride: 'AUTO_UPGRADE',
  });
}

/**
 * Register a signed envelope into `registry:<profile>`, starting the registry with `trustDoc` if it does
 * not exist yet (update-with-start, conflict policy USE_EXISTING: racing callers all reach one registry).
 * A refusal is a WavegateError: CONFLICT for the same number with other content, INVALID_INPUT otherwise,
 * with `details.reason` the reason code (BELOW_THRESHOLD, BAD_SIGNATURE, NOT_CANONICAL, EXPIRED,
 * NOT_ABOVE_CURRENT, ...). Nothing is stored on refusal.
 */
export async function registerEnvelope(client: Client, opts: RegisterEnvelopeOptions): Promise<RegisterEnvelopeResult> {
  checkProfileName(opts.profile);
  const ourTrust = trustIdentity(opts.trustDoc); // a bad trust document starts nothing
  if (typeof opts.by !== 'string' || opts.by.trim() === '')
    throw new WavegateError('INVALID_INPUT', `by: must be a non-empty name (got ${JSON.stringify(opts.by)})`);
  const workflowId = registryWorkflowId(opts.profile);
  let result: RegisterResult;
  try {
    result = await client.workflow.executeUpdateWithStart(registerUpdate, {
      args: [{ envelope: opts.envelope, by: opts.by }],
      startWorkflowOperation: startOperation(opts.profile, opts),
    });
  } catch (err) {
    throw registryError(err, opts.profile);
  }
  let registryTrustDiffers = false;
  try {
    registryTrustDiffers = trustIdentity(await client.workflow.getHandle(workflowId).query(trustQuery)) !== ourTrust;
  } catch {
    // The registration stands; the comparison is advice only.
  }
  return { ...result, registryTrustDiffers };
}

/** What the registry verifies with now (its trust root and list versions, its pins). NOT_FOUND: no registry. */
export async function registryTrustStateOf(client: Client, profile: string): Promise<RegistryTrustState> {
  checkProfileName(profile);
  try {
    return await client.workflow.getHandle(registryWorkflowId(profile)).query(trustStateQuery);
  } catch (err) {
    throw registryError(err, profile);
  }
}

/**
 * Offer the registry trust it lacks: trust roots above the one it holds, or the profile's revocation list. It takes
 * them only when they verify from what it holds (workflows/registry.ts, core/registry.ts decideTrustAdoption); a
 * refusal is INVALID_INPUT with `details.reason` (BELOW_THRESHOLD, ROOT_GAP, ROOT_ROLLBACK, METADATA_ROLLBACK, ...)
 * and the registry keeps what it held. With `start`, a registry that does not exist yet is created first (its
 * first-use pins); without, NOT_FOUND.
 */
export async function adoptRegistryTrust(
  client: Client,
  opts: { profile: string; offer: { roots: unknown[] } | { revocations: unknown }; start?: RegistryStart },
): Promise<RegistryTrustState> {
  checkProfileName(opts.profile);
  const what = 'roots' in opts.offer ? 'trust roots' : 'revocation list';
  // One way to send either update: with the registry's start when it may not exist yet, else to the running one.
  const send = async <A>(update: UpdateDefinition<RegistryTrustState, [A]>, arg: A) =>
    opts.start
      ? await client.workflow.executeUpdateWithStart(update, {
          args: [arg],
          startWorkflowOperation: startOperation(opts.profile, opts.start),
        })
      : await client.workflow.getHandle(registryWorkflowId(opts.profile)).executeUpdate(update, { args: [arg] });
  try {
    return 'roots' in opts.offer
      ? await send(adoptTrustRootUpdate, { roots: opts.offer.roots })
      : await send(adoptRevocationsUpdate, { revocations: opts.offer.revocations });
  } catch (err) {
    throw registryError(err, opts.profile, `the ${what}`);
  }
}

/** Every registered revision of the profile, oldest first. NOT_FOUND when the profile has no registry. */
export async function listRevisions(client: Client, profile: string): Promise<RevisionSummary[]> {
  checkProfileName(profile);
  try {
    return await client.workflow.getHandle(registryWorkflowId(profile)).query(revisionsQuery);
  } catch (err) {
    throw registryError(err, profile);
  }
}

/** The registered envelope of revision `revision`. NOT_FOUND for an unknown profile or revision. */
export async function getEnvelope(client: Client, profile: string, revision: number): Promise<Envelope> {
  checkProfileName(profile);
  let envelope: Envelope | null;
  try {
    envelope = await client.workflow.getHandle(registryWorkflowId(profile)).query(envelopeQuery, revision);
  } catch (err) {
    throw registryError(err, profile);
  }
  if (!envelope)
    throw new WavegateError(
      'NOT_FOUND',
      `profile "${profile}" has no registered revision ${revision} (${registryWorkflowId(profile)})`,
      { profile, revision },
    );
  return envelope;
}

/**
 * The newest registered revision above `above` that has not expired at `now` and is not revoked, or null when there is
 * none: what a nightly canary tries next. NOT_FOUND when the profile has no registry.
 */
export async function newestRevisionAbove(
  client: Client,
  profile: string,
  above: number,
  now = Date.now(),
): Promise<RevisionSummary | null> {
  const candidates = (await listRevisions(client, profile)).filter(
    (r) => r.revision > above && !r.revoked && (r.expiresAt === undefined || Date.parse(r.expiresAt) > now),
  );
  return candidates.reduce<RevisionSummary | null>((best, r) => (!best || r.revision > best.revision ? r : best), null);
}

/** Translate what Temporal said about a registry into wavegate's codes. */
function registryError(err: unknown, profile: string, what = 'the envelope'): unknown {
  if (err instanceof WavegateError) return err;
  const { WorkflowExecutionAlreadyStartedError, WorkflowNotFoundError, WorkflowUpdateFailedError } = sdk();
  const workflowId = registryWorkflowId(profile);
  if (
    err instanceof WorkflowUpdateFailedError &&
    err.cause instanceof ApplicationFailure &&
    err.cause.type === REGISTRATION_REFUSED
  ) {
    const refusal = (err.cause.details?.[0] ?? {}) as Partial<RegistrationRefusal>;
    const code = (refusal.code === 'CONFLICT' ? 'CONFLICT' : 'INVALID_INPUT') satisfies WavegateErrorCode;
    return new WavegateError(
      code,
      `${workflowId} refused ${what} (${refusal.reason ?? 'REFUSED'}): ${err.cause.message.replace(/^[A-Z_]+: /, '')}`,
      { ...refusal.details, reason: refusal.reason, profile },
    );
  }
  if (err instanceof sdk().QueryNotRegisteredError) {
    return new WavegateError(
      'INVALID_STATE',
      `${workflowId} runs workflow code older than this client (${err.message}): upgrade its workers; it verifies with the pins it holds meanwhile`,
      { profile },
    );
  }
  if (err instanceof WorkflowNotFoundError) {
    return new WavegateError(
      'NOT_FOUND',
      `profile "${profile}" has no revision registry (${workflowId}); register a revision first (wavegate register)`,
      { profile },
    );
  }
  if (err instanceof WorkflowExecutionAlreadyStartedError) {
    return new WavegateError(
      'INVALID_STATE',
      `${workflowId} exists but is closed (terminated or failed); its registrations are in its history: restore it before registering`,
      { profile },
    );
  }
  if (err instanceof WorkflowUpdateFailedError) {
    const failed = what === 'the envelope' ? 'registration' : `adopting ${what}`;
    return new WavegateError('FAILED', `${workflowId}: ${failed} failed: ${err.cause?.message ?? err.message}`, {
      profile,
    });
  }
  return err;
}
