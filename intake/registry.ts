import type { Client } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import { WavegateError, type WavegateErrorCode } from '../core/errors';
import type { Envelope } from '../core/signing';
import { envelopeQuery, REGISTRATION_REFUSED, registryWorkflowId, revisionsQuery, type RegistrationRefusal, type RevisionSummary } from '../workflows/registry';
import { checkProfileName } from './profile-dir';

/**
 * Reads of a profile's revision registry (`registry:<profile>`): what start, the nightly canary and the
 * fleet board take revisions from. Registration itself is the CLI's (cli/registry-client.ts).
 */
export { registryWorkflowId, type RevisionSummary };

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
  if (!envelope) throw new WavegateError('NOT_FOUND', `profile "${profile}" has no registered revision ${revision} (${registryWorkflowId(profile)})`, { profile, revision });
  return envelope;
}

/**
 * The newest registered revision above `above` that has not expired at `now`, or null when there is
 * none: what a nightly canary tries next. NOT_FOUND when the profile has no registry.
 */
export async function newestRevisionAbove(client: Client, profile: string, above: number, now = Date.now()): Promise<RevisionSummary | null> {
  const candidates = (await listRevisions(client, profile)).filter((r) => r.revision > above && (r.expiresAt === undefined || Date.parse(r.expiresAt) > now));
  return candidates.reduce<RevisionSummary | null>((best, r) => (!best || r.revision > best.revision ? r : best), null);
}

/** Translate what Temporal said about a registry into wavegate's codes. */
export function registryError(err: unknown, profile: string): unknown {
  if (err instanceof WavegateError) return err;
  // Loaded here, not at the top: `wavegate plan` reads revisions through this file's importers and never
  // talks to Temporal (the SDK client is most of a second of start-up). Here a client made the call.
  const { WorkflowExecutionAlreadyStartedError, WorkflowNotFoundError, WorkflowUpdateFailedError } = require('@temporalio/client') as typeof import('@temporalio/client');
  const workflowId = registryWorkflowId(profile);
  if (err instanceof WorkflowUpdateFailedError && err.cause instanceof ApplicationFailure && err.cause.type === REGISTRATION_REFUSED) {
    const refusal = (err.cause.details?.[0] ?? {}) as Partial<RegistrationRefusal>;
    const code = (refusal.code === 'CONFLICT' ? 'CONFLICT' : 'INVALID_INPUT') satisfies WavegateErrorCode;
    return new WavegateError(code, `${workflowId} refused the envelope (${refusal.reason ?? 'REFUSED'}): ${err.cause.message.replace(/^[A-Z_]+: /, '')}`, { ...refusal.details, reason: refusal.reason, profile });
  }
  if (err instanceof WorkflowNotFoundError) {
    return new WavegateError('NOT_FOUND', `profile "${profile}" has no revision registry (${workflowId}); register a revision first (wavegate register)`, { profile });
  }
  if (err instanceof WorkflowExecutionAlreadyStartedError) {
    return new WavegateError('INVALID_STATE', `${workflowId} exists but is closed (terminated or failed); its registrations are in its history: restore it before registering`, { profile });
  }
  if (err instanceof WorkflowUpdateFailedError) {
    return new WavegateError('FAILED', `${workflowId}: registration failed: ${err.cause?.message ?? err.message}`, { profile });
  }
  return err;
}
