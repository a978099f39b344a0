import { WavegateError } from '../core/errors';
import { checkProfileName } from '../core/profile-name';
import { verifyRotation, type VerifiedRotation } from '../core/rotation';
import { Envelope, peekBody } from '../core/signing';
import { parseWith } from '../core/validation';
import { readDocument } from './files';
import { checkProfilesRoot, resolveProfilesRoot } from './profiles-root';
import { loadTrust } from './trust';

/** The schedule envelope at `path`, verified against the trust of the profile it names as its authority. */
export function verifiedSchedule(
  path: string,
  profiles: string | undefined,
  now: number,
): VerifiedRotation & { trustOf: string } {
  const envelope = parseWith(Envelope, readDocument(path, 'json'), path);
  const authority = (peekBody(envelope) as { authority?: unknown } | undefined)?.authority;
  const profile = checkProfileName(typeof authority === 'string' ? authority : String(authority), `${path}: authority`);
  const root = resolveProfilesRoot({ flag: profiles });
  checkProfilesRoot(root);
  // No pins, nothing verifies: a rotation is never carried out on an unsigned say-so.
  const trust = loadTrust(root.dir, profile);
  if (!trust)
    throw new WavegateError(
      'INVALID_INPUT',
      `${path}: authority ${profile} has no trust.yaml under ${root.dir}: a rotation schedule must verify against its signers' pins (--profiles)`,
      { field: 'authority', value: profile },
    );
  const verdict = verifyRotation(envelope, trust, { now });
  if (!verdict.ok)
    throw new WavegateError('INVALID_INPUT', `${path}: refused (${verdict.reason}): ${verdict.message}`, {
      reason: verdict.reason,
    });
  return { ...verdict, trustOf: profile };
}
