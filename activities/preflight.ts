import { join } from 'node:path';
import type { Envelope } from '../core/signing';
import type { RevisionSteps } from '../core/rollout/input';
import type { Dependency } from '../core/dependencies';
import { openDependency } from './dependencies';
import { CHECKOUT_PROFILES_ROOT, EnvelopeRejected, loadWorkerTrust, signedSteps } from './device-steps';

/**
 * What `start` asks a worker before it starts a rollout: would you run these envelopes? The rollout's
 * target steps and its way back, as the workflow will hand them to `applyRevision` (public content only).
 */
export interface WorkerContentInput {
  profile: string;
  revision: number;
  envelope?: Envelope;
  /** The way back (fromRevision's steps): its envelope, and the target's envelope when its `rollback` command is the way. */
  rollback?: { revision: number; envelope?: Envelope; rollbackOf?: Envelope };
  /** The spec's `after`: the worker must hold each dependency's revision (signed, under its pins) to verify it on devices. */
  after?: Dependency[];
}

export type WorkerContentAnswer =
  | { ok: true; worker: string }
  | { ok: false; reason: string; message: string; worker: string };

export interface PreflightDeps {
  /** The worker's profiles root, as `applyRevision` reads it. */
  profilesRoot?: string;
  allowUnsigned?: boolean;
  /** The worker's identity (as Temporal knows it), named in every answer. */
  identity: string;
}

/** Steps without commands: only the envelopes (and the payload entries inside them) are checked. */
function stepsFor(
  profile: string,
  revision: number,
  envelope: Envelope | undefined,
  rollbackOf?: Envelope,
): RevisionSteps {
  return {
    profile,
    revision,
    apply: '',
    verify: '',
    payload: [],
    ...(envelope ? { envelope } : {}),
    ...(rollbackOf ? { rollbackOf } : {}),
  };
}

export function createPreflightActivities(deps: PreflightDeps) {
  const profilesRoot = deps.profilesRoot ?? CHECKOUT_PROFILES_ROOT;
  return {
    /**
     * Whether this worker would run the rollout's content: the same verification `applyRevision` does
     * before it contacts a device (its own pins, signature threshold, expiry, profile and revision, the
     * rollback pairing, the payload files under its own root). Contacts no device; a refusal is an
     * answer, not a failure.
     */
    async checkWorkerContent(input: WorkerContentInput): Promise<WorkerContentAnswer> {
      const worker = deps.identity;
      try {
        const opts = {
          trust: loadWorkerTrust(profilesRoot, input.profile),
          requireEnvelope: !deps.allowUnsigned,
          now: Date.now(),
          profilesRoot,
        };
        signedSteps(stepsFor(input.profile, input.revision, input.envelope), opts);
        if (input.rollback)
          signedSteps(
            stepsFor(input.profile, input.rollback.revision, input.rollback.envelope, input.rollback.rollbackOf),
            opts,
          );
        for (const dep of input.after ?? [])
          openDependency(dep, { profilesRoot, requireEnvelope: !deps.allowUnsigned });
        return { ok: true, worker };
      } catch (err) {
        if (!(err instanceof EnvelopeRejected)) throw err;
        const where = `this worker reads its pins from ${join(profilesRoot, input.profile, 'trust.yaml')}`;
        return { ok: false, reason: err.reason, message: `${err.message} (${where})`, worker };
      }
    },
  };
}
