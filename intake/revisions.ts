import { existsSync } from 'node:fs';
import type { Client } from '@temporalio/client';
import { canonicalize } from '../core/canonical';
import { WavegateError } from '../core/errors';
import { parseRevision, parseRevisionSource } from '../core/revision';
import { invalidFields } from '../core/validation';
import type { Trust } from '../core/signing';
import { openEnvelope, type SignedRevision } from './envelope';
import { readDocument } from './files';
import { revisionNumbers, type ProfileDir } from './profile-dir';
import { getEnvelope } from '../clients/registry';

/**
 * Revisions of a profile, from its files or its registry. A profile with pins (trust.yaml) is read
 * from signed envelopes only, each verified against the pins; its revisions/<n>.yaml, when present,
 * must be the signed content (a changed file must be signed again). A profile without pins is read
 * from revisions/<n>.yaml.
 */

/** Revision `n` from the profile's files, verified when the profile has pins; undefined when it ships no such revision. */
export function findFileRevision(layout: ProfileDir, trust: Trust | undefined, n: number): SignedRevision | undefined {
  const path = layout.revisionFile(n);
  if (trust) {
    const envelopePath = layout.envelopeFile(n);
    if (!existsSync(envelopePath)) return undefined;
    const signed = openEnvelope(readDocument(envelopePath), trust, {
      profile: layout.name,
      revision: n,
      source: envelopePath,
    });
    if (existsSync(path)) {
      const source = parseRevisionSource(readDocument(path), path);
      // `sign` adds issuedAt (and expiresAt to a file without one) and fills payload sha256/size the file
      // leaves out (from the payload files); everything else must be what was signed.
      const payload = signed.revision.payload.map((file, i) => {
        const written = source.payload[i];
        return {
          ...file,
          ...(written && written.sha256 === undefined ? { sha256: undefined } : {}),
          ...(written && written.size === undefined ? { size: undefined } : {}),
        };
      });
      const signedContent = {
        ...signed.revision,
        payload,
        ...(source.expiresAt ? {} : { expiresAt: undefined }),
        ...(source.issuedAt ? {} : { issuedAt: undefined }),
      };
      if (canonicalize(source) !== canonicalize(signedContent)) {
        throw new WavegateError(
          'INVALID_INPUT',
          `${path}: differs from its signed envelope ${envelopePath}; sign the changed revision again`,
          { source: path },
        );
      }
    }
    return signed;
  }
  if (!existsSync(path)) return undefined;
  const data = readDocument(path);
  // Without pins nothing is signed, so nothing fills sha256/size: the file must give them.
  const unfilled = parseRevisionSource(data, path).payload.flatMap((file, i) =>
    (['sha256', 'size'] as const)
      .filter((field) => file[field] === undefined)
      .map((field) => ({
        path: `payload[${i}].${field}`,
        value: undefined,
        message: `payload "${file.name}": missing; a profile without pins (${layout.trustFile}) is read from this file as written, so it must give sha256 and size (only \`wavegate sign\` fills them, into a signed envelope)`,
      })),
  );
  if (unfilled.length) invalidFields(path, unfilled);
  const revision = parseRevision(data, path);
  if (revision.profile !== layout.name || revision.revision !== n) {
    throw new WavegateError(
      'INVALID_INPUT',
      `${path}: declares ${revision.profile} r${revision.revision}, expected ${layout.name} r${n}`,
      { source: path },
    );
  }
  return { revision };
}

/** The same, where a missing revision is INVALID_INPUT naming `field` (e.g. `spec.yaml: rollout.toRevision`). */
export function fileRevision(layout: ProfileDir, trust: Trust | undefined, n: number, field: string): SignedRevision {
  const found = findFileRevision(layout, trust, n);
  if (found) return found;
  if (trust) {
    throw new WavegateError(
      'INVALID_INPUT',
      `${field}: profile "${layout.name}" has pins (${layout.trustFile}) but revision ${n} has no signed envelope (expected ${layout.envelopeFile(n)}; wavegate sign + cosign)`,
      { field, value: n },
    );
  }
  throw new WavegateError(
    'INVALID_INPUT',
    `${field}: profile "${layout.name}" has no revision ${n} (expected ${layout.revisionFile(n)})`,
    { field, value: n },
  );
}

/** Revision numbers the profile's files hold, ascending (its envelopes when it has pins). */
export function fileRevisionNumbers(layout: ProfileDir, trust: Trust | undefined): number[] {
  return revisionNumbers(layout, trust ? 'envelopes' : 'revisions');
}

/**
 * Revision `n` from `registry:<profile>`, verified again here against the profile's pins (a registry is
 * not trusted further than the pins on this side). A revision the registry does not hold is
 * INVALID_INPUT naming `field` when one is given, else NOT_FOUND.
 */
export async function registeredRevision(
  client: Client,
  layout: ProfileDir,
  trust: Trust,
  n: number,
  field?: string,
): Promise<SignedRevision> {
  let envelope: unknown;
  try {
    envelope = await getEnvelope(client, layout.name, n);
  } catch (err) {
    if (field && err instanceof WavegateError && err.code === 'NOT_FOUND') {
      throw new WavegateError('INVALID_INPUT', `${field}: ${err.message}`, { ...err.details, field });
    }
    throw err;
  }
  return openEnvelope(envelope, trust, { profile: layout.name, revision: n, source: `registry:${layout.name} r${n}` });
}

/** The pins a registry read is verified against; a profile without pins cannot use its registry. */
export function registryTrust(layout: ProfileDir, trust: Trust | undefined, field: string): Trust {
  if (trust) return trust;
  throw new WavegateError(
    'INVALID_INPUT',
    `${field}: profile "${layout.name}" has no pins (expected ${layout.trustFile}) to verify its registered revisions against`,
    { field, value: layout.name },
  );
}
