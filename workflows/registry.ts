import * as wf from '@temporalio/workflow';
import { heldTrustRecord, reopenHeldTrust, type HeldTrust } from '../core/held-trust';
import { classifyRevision } from '../core/provability';
import {
  decideRegistration,
  decideTrustAdoption,
  registryTrust,
  registryTrustState,
  type TrustOffer,
} from '../core/registry';
import { revocationOf } from '../core/revocation';
import { parseTrust, type Trust } from '../core/signing';
import {
  REGISTRATION_REFUSED,
  adoptRevocationsUpdate,
  adoptTrustRootUpdate,
  registerUpdate,
  envelopeQuery,
  revisionsQuery,
  trustQuery,
  trustStateQuery,
  type RegisterRequest,
  type RegistrationRefusal,
  type RegistryEntry,
  type RegistryInput,
} from '../contracts/registry';

/**
 * The revision registry of one profile: a long-lived entity workflow
 * `registry:<profile>` holding every registered envelope, the trust pins it was created with (version 0 of the
 * profile's trust root, or the root version they are) and the newer trust roots and revocation list it adopted
 * since. The decisions are core/registry.ts; this workflow only makes them durable and serial (updates run one at a
 * time, so two racing registrations of the same envelope store it once).
 *
 * A refused registration is rejected by the update's validator: it never enters history and nothing is
 * stored. The validator applies every rule; the handler, which replays, not the signed content rules. The workflow never completes on its own; it continues as new, carrying its state, before its
 * history grows long.
 */
export const DEFAULT_CONTINUE_AS_NEW_AFTER_EVENTS = 2_000;

export async function revisionRegistryWorkflow(input: RegistryInput): Promise<void> {
  let trust: Trust;
  try {
    trust = parseTrust(input.trustDoc, `registry:${input.profile} trust`);
  } catch (err) {
    // A bad trust document cannot get better by retrying the workflow task.
    throw wf.ApplicationFailure.nonRetryable((err as Error).message, 'InvalidTrust');
  }
  const entries: RegistryEntry[] = [...(input.entries ?? [])];
  // Absent in every history before adoption existed: version 0 and no list, so those replay as they were recorded.
  let held: HeldTrust = { profile: input.profile };
  if (input.trustHeld !== undefined) {
    const reopened = reopenHeldTrust(input.trustHeld, input.profile);
    if (typeof reopened === 'string')
      throw wf.ApplicationFailure.nonRetryable(`registry:${input.profile} trustHeld: ${reopened}`, 'InvalidTrust');
    held = {
      profile: input.profile,
      ...(reopened.root ? { root: reopened.root } : {}),
      ...(reopened.list ? { list: reopened.list } : {}),
    };
  }

  const decide = (req: RegisterRequest, rules: { contentRules: boolean }) =>
    decideRegistration({
      profile: input.profile,
      registered: entries.map((e) => e.envelope),
      envelope: req?.envelope,
      trust: registryTrust(held, trust),
      now: Date.now(),
      contentRules: rules.contentRules,
    });

  // Adoption is decided the same way by the validator and, on every replay too, by the handler: the chain of roots
  // and the list's signatures do not expire, so what verified once verifies again from the same state.
  const adopt = (offer: TrustOffer) => {
    const decision = decideTrustAdoption({ anchor: trust, held, offer });
    if (decision.outcome === 'refused') throw refusal(decision.code, decision.reason, decision.message);
    return decision.held;
  };
  const offerOf = (req: unknown, field: 'roots' | 'revocations'): TrustOffer => {
    if (typeof req !== 'object' || req === null)
      throw refusal('INVALID_INPUT', 'MALFORMED', `expected { ${field} } (got ${req === null ? 'null' : typeof req})`);
    const value = (req as Record<string, unknown>)[field];
    return field === 'roots' ? { roots: value } : { revocations: value };
  };

  wf.setHandler(
    registerUpdate,
    (req) => {
      // The handler runs again on every replay, the validator never: so the handler re-decides on the
      // revision's structure and the registry's state (duplicates, conflicts, order), which it must for
      // racing registrations, and not on the signed content rules (core/revision.ts, RevisionRules). The
      // validator already refused every new envelope that breaks them; an envelope accepted before a
      // content rule existed must replay as accepted, or the registry's state would silently lose it.
      // Replay-safe without a patch: an envelope the validator accepted passes the handler either way.
      const decision = decide(req, { contentRules: false });
      if (decision.outcome === 'refused')
        throw refusal(decision.code, decision.reason, decision.message, decision.details);
      if (decision.outcome === 'existing')
        return { outcome: 'existing', revision: decision.revision.revision, bodyDigest: decision.bodyDigest };
      const { revision } = decision;
      entries.push({
        revision: revision.revision,
        bodyDigest: decision.bodyDigest,
        registeredAt: new Date(Date.now()).toISOString(),
        by: req.by,
        signers: decision.signers,
        ...(revision.expiresAt ? { expiresAt: revision.expiresAt } : {}),
        risk: revision.risk,
        provable: classifyRevision(revision).provable,
        envelope: decision.envelope,
      });
      entries.sort((a, b) => a.revision - b.revision);
      return { outcome: 'registered', revision: revision.revision, bodyDigest: decision.bodyDigest };
    },
    {
      // The validator refuses before anything is written: a refused envelope leaves no trace in history.
      validator: (req) => {
        if (typeof req !== 'object' || req === null)
          throw refusal('INVALID_INPUT', 'MALFORMED', 'register: expected { envelope, by }');
        if (typeof req.by !== 'string' || req.by.trim() === '')
          throw refusal(
            'INVALID_INPUT',
            'MALFORMED',
            `register: by: must be a non-empty name (got ${JSON.stringify(req.by)})`,
          );
        const decision = decide(req, { contentRules: true });
        if (decision.outcome === 'refused')
          throw refusal(decision.code, decision.reason, decision.message, decision.details);
      },
      description:
        'Register a signed envelope of this profile: verified against the newest trust root adopted (its revocation list applied), above every registered revision',
    },
  );
  wf.setHandler(
    adoptTrustRootUpdate,
    (req) => {
      held = adopt(offerOf(req, 'roots'));
      return registryTrustState(held, trust);
    },
    {
      validator: (req) => void adopt(offerOf(req, 'roots')),
      description:
        "Adopt the profile's trust roots above the one held: each signed by a threshold of the previous root's keys and of its own, walked one version at a time; refused whole otherwise",
    },
  );
  wf.setHandler(
    adoptRevocationsUpdate,
    (req) => {
      held = adopt(offerOf(req, 'revocations'));
      return registryTrustState(held, trust);
    },
    {
      validator: (req) => void adopt(offerOf(req, 'revocations')),
      description:
        "Adopt the profile's revocation list: signed by a threshold of the root held, not older than the list held",
    },
  );
  wf.setHandler(
    revisionsQuery,
    () =>
      entries.map(({ envelope: _envelope, ...summary }) => {
        const revoked = revocationOf(held.list?.revoked, summary.revision, summary.bodyDigest);
        return revoked ? { ...summary, revoked: revoked.reason } : summary;
      }),
    { description: 'Registered revisions, oldest first; a revoked one says why' },
  );
  wf.setHandler(trustStateQuery, () => registryTrustState(held, trust), {
    description: 'What the registry verifies with now: its trust root and revocation list versions, its pins',
  });
  wf.setHandler(envelopeQuery, (n) => entries.find((e) => e.revision === n)?.envelope ?? null, {
    description: 'The envelope of a revision number (null: none)',
  });
  wf.setHandler(trustQuery, () => input.trustDoc, { description: 'The trust pins this registry was created with' });

  const limit = input.continueAsNewAfterEvents ?? DEFAULT_CONTINUE_AS_NEW_AFTER_EVENTS;
  await wf.condition(() => wf.workflowInfo().historyLength >= limit || wf.workflowInfo().continueAsNewSuggested);
  await wf.condition(wf.allHandlersFinished);
  await wf.continueAsNew<typeof revisionRegistryWorkflow>({
    ...input,
    entries,
    ...(held.root || held.list ? { trustHeld: heldTrustRecord(held) } : {}),
  });
}

function refusal(
  code: string,
  reason: string,
  message: string,
  details?: Record<string, unknown>,
): wf.ApplicationFailure {
  const refused: RegistrationRefusal = { code, reason, ...(details ? { details } : {}) };
  return wf.ApplicationFailure.create({
    type: REGISTRATION_REFUSED,
    message: `${reason}: ${message}`,
    nonRetryable: true,
    details: [refused],
  });
}
