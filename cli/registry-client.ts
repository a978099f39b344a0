import { WithStartWorkflowOperation, type Client } from '@temporalio/client';
import { existsSync } from 'node:fs';
import { basename, dirname, resolve } from 'node:path';
import { canonicalize } from '../core/canonical';
import { WavegateError } from '../core/errors';
import { parseTrust, peekBody, type Envelope } from '../core/signing';
import { readDocument } from '../intake/files';
import { checkProfileName, profileDir, revisionNumbers } from '../intake/profile-dir';
import { registryError } from '../intake/registry';
import { DEFAULT_TASK_QUEUE } from '../workers/connection';
import { registerUpdate, registryWorkflowId, trustQuery, type RegisterResult, type revisionRegistryWorkflow } from '../workflows/registry';

/**
 * Registration into a profile's revision registry (`registry:<profile>`): the CLI's, never an
 * activity's. Reads of the registry are intake's (intake/registry.ts).
 */
export type { RegisterResult };

export interface RegisterEnvelopeOptions {
  profile: string;
  envelope: unknown;
  /** The trust document (`{ threshold, pins }`); used only when this call creates the registry. */
  trustDoc: unknown;
  /** Who registers it (recorded with the revision). */
  by: string;
  /** The task queue the registry workflow runs on when this call starts it (default "wavegate"). */
  taskQueue?: string;
  /** For tests: continue the registry as new after this many history events. */
  continueAsNewAfterEvents?: number;
}

export interface RegisterEnvelopeResult extends RegisterResult {
  /** The registry verifies with the pins it was created with; true when those differ from `trustDoc`. */
  registryTrustDiffers: boolean;
}

/** Pins and threshold in a comparable form (names and order do not matter). */
function trustIdentity(doc: unknown): string {
  const trust = parseTrust(doc, 'trust');
  return canonicalize({ threshold: trust.threshold, kids: [...trust.keys.keys()].sort() });
}

/**
 * Register a signed envelope into `registry:<profile>`, starting the registry with `trustDoc` if it does
 * not exist yet (update-with-start, conflict policy USE_EXISTING: racing callers all reach one registry).
 * A refusal is a WavegateError: CONFLICT for the same number with other content, INVALID_INPUT otherwise,
 * with `details.reason` the reason code (BELOW_THRESHOLD, BAD_SIGNATURE, NOT_CANONICAL, EXPIRED,
 * NOT_ABOVE_CURRENT, ...). Nothing is stored on refusal.
 */
export async function registerEnvelope(client: Client, opts: RegisterEnvelopeOptions): Promise<RegisterEnvelopeResult> {
  checkProfileName(opts.profile);
  const ourTrust = trustIdentity(opts.trustDoc); // a bad trust document starts nothing
  if (typeof opts.by !== 'string' || opts.by.trim() === '') throw new WavegateError('INVALID_INPUT', `by: must be a non-empty name (got ${JSON.stringify(opts.by)})`);
  const workflowId = registryWorkflowId(opts.profile);
  const startWorkflowOperation = new WithStartWorkflowOperation<typeof revisionRegistryWorkflow>('revisionRegistryWorkflow', {
    workflowId,
    taskQueue: opts.taskQueue ?? DEFAULT_TASK_QUEUE,
    args: [{ profile: opts.profile, trustDoc: opts.trustDoc, ...(opts.continueAsNewAfterEvents ? { continueAsNewAfterEvents: opts.continueAsNewAfterEvents } : {}) }],
    workflowIdConflictPolicy: 'USE_EXISTING',
    // A closed registry is not silently replaced by an empty one: the channel would move backwards.
    workflowIdReusePolicy: 'REJECT_DUPLICATE',
    staticSummary: `revision registry of ${opts.profile}`,
    // A registry never ends: under Worker Versioning it must follow the current build rather than stay
    // pinned to the first one it ran on (docs/architecture.md, "Upgrading workers"). No effect unversioned.
    versioningOverride: 'AUTO_UPGRADE',
  });
  let result: RegisterResult;
  try {
    result = await client.workflow.executeUpdateWithStart(registerUpdate, { args: [{ envelope: opts.envelope, by: opts.by }], startWorkflowOperation });
  } catch (err) {
    throw registryError(err, opts.profile);
  }
  let registryTrustDiffers = false;
  try {
    registryTrustDiffers = trustIdentity(await client.workflow.getHandle(workflowId).query(trustQuery)) !== ourTrust;
  } catch {
    // The registration stands; the comparison is advice only.
  }
  return { ...result, registryTrustDiffers };
}

/**
 * Register every signed envelope a profile directory ships (`envelopes/<n>.json`, ascending) with its
 * `trust.yaml`: how the dev stack seeds the demo registry. Idempotent: a second run reports `existing`.
 */
export async function registerProfileEnvelopes(
  client: Client,
  opts: { profile: string; profileDir: string; by: string; taskQueue?: string },
): Promise<Array<RegisterEnvelopeResult & { path: string }>> {
  const layout = profileDir(dirname(resolve(opts.profileDir)), basename(opts.profileDir), 'profileDir');
  if (layout.name !== opts.profile) throw new WavegateError('INVALID_INPUT', `profileDir: ${opts.profileDir} is not the directory of profile "${opts.profile}"`, { field: 'profileDir', value: opts.profileDir });
  if (!existsSync(layout.trustFile)) throw new WavegateError('INVALID_INPUT', `${layout.trustFile}: profile "${opts.profile}" has no trust file to register its envelopes with`);
  const trustDoc = readDocument(layout.trustFile);
  const results: Array<RegisterEnvelopeResult & { path: string }> = [];
  for (const n of revisionNumbers(layout, 'envelopes')) {
    const path = layout.envelopeFile(n);
    results.push({ path, ...(await registerEnvelope(client, { profile: opts.profile, envelope: readDocument(path), trustDoc, by: opts.by, ...(opts.taskQueue ? { taskQueue: opts.taskQueue } : {}) })) });
  }
  return results;
}

/** The profile named inside an envelope's body (unverified: only to pick the registry). */
export function envelopeProfile(envelope: unknown, source: string): string {
  const body = typeof envelope === 'object' && envelope !== null && typeof (envelope as Envelope).body === 'string' ? (peekBody(envelope as Envelope) as { profile?: unknown } | undefined) : undefined;
  if (typeof body?.profile !== 'string') throw new WavegateError('INVALID_INPUT', `${source}: body: not a revision naming its profile (MALFORMED)`, { reason: 'MALFORMED', source });
  return body.profile;
}
