import * as wf from '@temporalio/workflow';
import type { HeldTrustRecord } from '../core/held-trust';
import type { RegistryTrustState } from '../core/registry';
import type { Envelope } from '../core/signing';

/**
 * The messages of a profile's revision registry `registry:<profile>` (workflows/registry.ts; the
 * decision is core/registry.ts): what the workflow handles and what its clients (clients/registry.ts)
 * send and read, in one place both import.
 */
export interface RegistryEntry {
  revision: number;
  /** Hex SHA-256 of the envelope body: the content identity. */
  bodyDigest: string;
  /** Workflow time of the registration, ISO 8601. */
  registeredAt: string;
  /** Who registered it (as the caller said). */
  by: string;
  /** Distinct pinned kids whose signatures verified at registration. */
  signers: string[];
  expiresAt?: string;
  risk: string;
  provable: boolean;
  /** The envelope exactly as signed (public content: body and signatures, no secrets). */
  envelope: Envelope;
}

export type RevisionSummary = Omit<RegistryEntry, 'envelope'> & {
  /** Why its signers revoked it, by the revocation list the registry holds (absent: not revoked). */
  revoked?: string;
};

export interface RegistryInput {
  profile: string;
  /** The trust document (`{ threshold, pins }`) as read from the trust file; parsed inside with parseTrust. */
  trustDoc: unknown;
  /** Carried over by continue-as-new. */
  entries?: RegistryEntry[];
  /**
   * The trust root and revocation list the registry adopted since (core/held-trust.ts's record; timestamp always
   * null): carried over by continue-as-new. At the start it may name the root version whose pins `trustDoc` is (a
   * registry created after a rotation, with the pins of then); absent: version 0, no list.
   */
  trustHeld?: HeldTrustRecord;
  /** Continue as new once the history holds this many events (default 2,000). */
  continueAsNewAfterEvents?: number;
}

/** The registry workflow's type and signature, for starting it by name (clients never import workflows/). */
export const REGISTRY_WORKFLOW = 'revisionRegistryWorkflow';
export type RegistryWorkflow = (input: RegistryInput) => Promise<void>;

export interface RegisterRequest {
  envelope: unknown;
  by: string;
}

export interface RegisterResult {
  outcome: 'registered' | 'existing';
  revision: number;
  bodyDigest: string;
}

/** The failure type a refused registration or trust adoption carries; details[0] is `RegistrationRefusal`. */
export const REGISTRATION_REFUSED = 'RegistrationRefused';
export interface RegistrationRefusal {
  /** WavegateError code: CONFLICT (same number, other content) or INVALID_INPUT. */
  code: string;
  /** The reason code (BELOW_THRESHOLD, BAD_SIGNATURE, EXPIRED, NOT_ABOVE_CURRENT, CONFLICT, ...). */
  reason: string;
  details?: Record<string, unknown>;
}

/** Trust roots above the one the registry holds (any order, at most 64): each walked from it, or none taken. */
export interface AdoptTrustRootRequest {
  roots: unknown[];
}

/** The profile's revocation list, signed by a threshold of the root the registry holds, not older than its own. */
export interface AdoptRevocationsRequest {
  revocations: unknown;
}

export type { RegistryTrustState };

export const registerUpdate = wf.defineUpdate<RegisterResult, [RegisterRequest]>('register');
/** Refused (REGISTRATION_REFUSED, with the reason) unless every root verifies; nothing is taken then. */
export const adoptTrustRootUpdate = wf.defineUpdate<RegistryTrustState, [AdoptTrustRootRequest]>('adoptTrustRoot');
export const adoptRevocationsUpdate = wf.defineUpdate<RegistryTrustState, [AdoptRevocationsRequest]>(
  'adoptRevocations',
);
export const trustStateQuery = wf.defineQuery<RegistryTrustState>('trustState');
export const revisionsQuery = wf.defineQuery<RevisionSummary[]>('revisions');
/** The registered envelope of a revision number, or null when there is none. */
export const envelopeQuery = wf.defineQuery<Envelope | null, [number]>('envelope');
/** The trust document the registry was created with (its first-use pins; trustStateQuery: what it verifies with now). */
export const trustQuery = wf.defineQuery<unknown>('trust');

export function registryWorkflowId(profile: string): string {
  return `registry:${profile}`;
}
