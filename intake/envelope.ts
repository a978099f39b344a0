import { WavegateError } from '../core/errors';
import type { Revision } from '../core/revision';
import { Envelope, verifyEnvelope, type Trust } from '../core/signing';
import { parseWith } from '../core/validation';

/** A revision with the envelope it was verified from (none for an unsigned profile). */
export interface SignedRevision {
  revision: Revision;
  envelope?: Envelope;
}

export interface EnvelopeExpectation {
  profile: string;
  revision: number;
  /** Names where the envelope came from in errors: its file, or `registry:<profile> r<n>`. */
  source: string;
  /** Epoch milliseconds for the expiry check (default now). */
  now?: number;
}

/**
 * Open an envelope: verify it against the profile's pins and check it holds the revision expected.
 * Any refusal is INVALID_INPUT with the verifier's reason code in `details.reason`.
 */
export function openEnvelope(envelope: unknown, trust: Trust, expect: EnvelopeExpectation): SignedRevision {
  const verdict = verifyEnvelope(envelope, trust, { now: expect.now ?? Date.now() });
  if (!verdict.ok) {
    throw new WavegateError(
      'INVALID_INPUT',
      `${expect.source}: envelope refused (${verdict.reason}): ${verdict.message}`,
      { reason: verdict.reason, source: expect.source },
    );
  }
  if (verdict.revision.profile !== expect.profile || verdict.revision.revision !== expect.revision) {
    throw new WavegateError(
      'INVALID_INPUT',
      `${expect.source}: the envelope holds ${verdict.revision.profile} r${verdict.revision.revision}, expected ${expect.profile} r${expect.revision}`,
      { source: expect.source },
    );
  }
  return { revision: verdict.revision, envelope: parseWith(Envelope, envelope, expect.source) };
}
