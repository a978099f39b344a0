import type { Client } from '@temporalio/client';
import { existsSync } from 'node:fs';
import { basename, dirname, resolve } from 'node:path';
import { WavegateError } from '../core/errors';
import { peekBody, verifyEnvelope, type Envelope } from '../core/signing';
import { loadProfileTrust } from '../intake/trust';
import { readDocument } from '../intake/files';
import { profileDir, revisionNumbers, type ProfileDir } from '../intake/profile-dir';
import { registerEnvelope, type RegisterEnvelopeResult } from '../clients/registry';
import { DEFAULT_TASK_QUEUE } from '../workers/connection';

/**
 * The CLI's side of registration: a profile directory's envelopes registered in order, and the profile
 * an envelope names. The registry's client (registration and reads) is clients/registry.ts.
 */

/**
 * Register every signed envelope a profile directory ships (`envelopes/<n>.json`, ascending) with its
 * `trust.yaml`: how the dev stack seeds the demo registry. Idempotent: a second run reports `existing`.
 */
export async function registerProfileEnvelopes(
  client: Client,
  opts: { profile: string; profileDir: string; by: string; taskQueue?: string },
): Promise<Array<RegisterEnvelopeResult & { path: string }>> {
  const layout = profileDir(dirname(resolve(opts.profileDir)), basename(opts.profileDir), 'profileDir');
  if (layout.name !== opts.profile)
    throw new WavegateError(
      'INVALID_INPUT',
      `profileDir: ${opts.profileDir} is not the directory of profile "${opts.profile}"`,
      { field: 'profileDir', value: opts.profileDir },
    );
  if (!existsSync(layout.trustFile))
    throw new WavegateError(
      'INVALID_INPUT',
      `${layout.trustFile}: profile "${opts.profile}" has no trust file to register its envelopes with`,
    );
  const trustDoc = readDocument(layout.trustFile);
  const results: Array<RegisterEnvelopeResult & { path: string }> = [];
  for (const n of revisionNumbers(layout, 'envelopes')) {
    const path = layout.envelopeFile(n);
    const envelope = readDocument(path);
    checkWithProfileTrust(envelope, path, layout);
    results.push({
      path,
      ...(await registerEnvelope(client, {
        profile: opts.profile,
        envelope,
        trustDoc,
        by: opts.by,
        taskQueue: opts.taskQueue ?? DEFAULT_TASK_QUEUE,
      })),
    });
  }
  return results;
}

/**
 * An envelope checked against the profile's trust as this side holds it (its newest trust root, its revocation
 * list: intake/trust.ts) before it is sent to the registry, which verifies with the pins it was created with and
 * knows no revocation: a revision its signers revoked is refused here (exit 2, REVOKED), nothing registered. A
 * profile this side has no trust.yaml for is left to the registry's pins (false: nothing was checked here).
 */
export function checkWithProfileTrust(envelope: unknown, source: string, layout: ProfileDir): boolean {
  const trust = loadProfileTrust(layout);
  if (!trust) return false;
  const verdict = verifyEnvelope(envelope, trust, { now: Date.now() });
  if (!verdict.ok)
    throw new WavegateError(
      'INVALID_INPUT',
      `${source}: refused by the trust of profile "${layout.name}" here (${verdict.reason}): ${verdict.message}; nothing was registered`,
      { reason: verdict.reason, source },
    );
  return true;
}

/** The profile named inside an envelope's body (unverified: only to pick the registry). */
export function envelopeProfile(envelope: unknown, source: string): string {
  const body =
    typeof envelope === 'object' && envelope !== null && typeof (envelope as Envelope).body === 'string'
      ? (peekBody(envelope as Envelope) as { profile?: unknown } | undefined)
      : undefined;
  if (typeof body?.profile !== 'string')
    throw new WavegateError('INVALID_INPUT', `${source}: body: not a revision naming its profile (MALFORMED)`, {
      reason: 'MALFORMED',
      source,
    });
  return body.profile;
}
