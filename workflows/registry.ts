import * as wf from '@temporalio/workflow';
import { classifyRevision } from '../core/provability';
import { decideRegistration } from '../core/registry';
import { parseTrust, type Trust } from '../core/signing';
import {
  REGISTRATION_REFUSED,
  registerUpdate,
  envelopeQuery,
  revisionsQuery,
  trustQuery,
  type RegisterRequest,
  type RegistrationRefusal,
  type RegistryEntry,
  type RegistryInput,
} from '../contracts/registry';

/**
 * The revision registry of one profile: a long-lived entity workflow
 * `registry:<profile>` holding every registered envelope and the trust pins it was created with. The
 * decision is core/registry.ts; this workflow only makes it durable and serial (updates run one at a
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

  const decide = (req: RegisterRequest, rules: { contentRules: boolean }) =>
    decideRegistration({
      profile: input.profile,
      registered: entries.map((e) => e.envelope),
      envelope: req?.envelope,
      trust,
      now: Date.now(),
      contentRules: rules.contentRules,
    });

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
        'Register a signed envelope of this profile: verified against the pins, above every registered revision',
    },
  );
  wf.setHandler(revisionsQuery, () => entries.map(({ envelope: _envelope, ...summary }) => summary), {
    description: 'Registered revisions, oldest first',
  });
  wf.setHandler(envelopeQuery, (n) => entries.find((e) => e.revision === n)?.envelope ?? null, {
    description: 'The envelope of a revision number (null: none)',
  });
  wf.setHandler(trustQuery, () => input.trustDoc, { description: 'The trust pins this registry verifies with' });

  const limit = input.continueAsNewAfterEvents ?? DEFAULT_CONTINUE_AS_NEW_AFTER_EVENTS;
  await wf.condition(() => wf.workflowInfo().historyLength >= limit || wf.workflowInfo().continueAsNewSuggested);
  await wf.condition(wf.allHandlersFinished);
  await wf.continueAsNew<typeof revisionRegistryWorkflow>({ ...input, entries });
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
