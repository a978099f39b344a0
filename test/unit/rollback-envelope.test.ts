import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { EnvelopeRejected, signedSteps, type RevisionSteps } from '../../device/steps';
import { parseRevision } from '../../core/revision';
import { keyPairFromSeed, parseTrust, pinOf, signRevision, type Trust } from '../../core/signing';
import { refusal } from '../support/refusal';

/**
 * No mix and match: a rollback runs a target revision's signed `rollback` command only to take that
 * revision back to the one it names as `previous`, never paired with an unrelated envelope.
 */
describe('rollback envelopes', () => {
  const key = keyPairFromSeed(new Uint8Array(randomBytes(32)));
  const trust: Trust = parseTrust({ threshold: 1, pins: [pinOf(key)] }, 'test trust');
  const now = Date.now();
  const envelopeOf = (revision: number, extra: Record<string, unknown> = {}) =>
    signRevision(
      parseRevision(
        { profile: 'mix', revision, apply: `apply ${revision}`, verify: `verify ${revision}`, risk: 'safe', ...extra },
        'test',
      ),
      key,
      { now, validityDays: 30 },
    );
  const rollbackTo = (revision: number, rollbackOf: ReturnType<typeof envelopeOf>): RevisionSteps => ({
    profile: 'mix',
    revision,
    apply: 'ignored',
    verify: 'ignored',
    payload: [],
    envelope: envelopeOf(revision),
    rollbackOf,
  });
  const resolve = (steps: RevisionSteps) =>
    signedSteps(steps, { trust, requireEnvelope: true, now, profilesRoot: '/nonexistent' });

  it('runs r3 rollback command to go back to r2, the revision r3 names as previous', () => {
    const steps = resolve(rollbackTo(2, envelopeOf(3, { previous: 2, rollback: 'undo 3' })));
    expect(steps).toMatchObject({ revision: 2, apply: 'undo 3', verify: 'verify 2' });
  });

  it('refuses r3 rollback paired with r1 (an unrelated envelope): WRONG_ROLLBACK, nothing to run', () => {
    const err = refusal(
      () => resolve(rollbackTo(1, envelopeOf(3, { previous: 2, rollback: 'undo 3' }))),
      EnvelopeRejected,
    );
    expect(err).toBeInstanceOf(EnvelopeRejected);
    expect(err.reason).toBe('WRONG_ROLLBACK');
    expect(err.message).toMatch(/r3's rollback goes back to r2, not to r1/);
  });

  it('refuses a rollback command from a revision that names no previous', () => {
    expect(() => resolve(rollbackTo(2, envelopeOf(3, { rollback: 'undo 3' })))).toThrow(
      /goes back to no named revision/,
    );
  });
});
