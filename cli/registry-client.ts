import type { Client } from '@temporalio/client';
import { existsSync } from 'node:fs';
import { basename, dirname, resolve } from 'node:path';
import { WavegateError } from '../core/errors';
import type { HeldTrustRecord } from '../core/held-trust';
import { bodyDigest, peekBody, verifyEnvelope, type Envelope } from '../core/signing';
import { anchorVersion, MAX_ROOT_STEPS } from '../core/trust-root';
import { loadProfileTrust, profileTrustState } from '../intake/trust';
import { readDocument } from '../intake/files';
import { profileDir, revisionNumbers, type ProfileDir } from '../intake/profile-dir';
import {
  adoptRegistryTrust,
  registerEnvelope,
  registryTrustStateOf,
  trustIdentity,
  type RegisterEnvelopeResult,
  type RegistryStart,
} from '../clients/registry';
import type { RegistryTrustState } from '../contracts/registry';
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
  const numbers = revisionNumbers(layout, 'envelopes');
  const envelopes = numbers.map((n) => {
    const path = layout.envelopeFile(n);
    const envelope = readDocument(path);
    checkWithProfileTrust(envelope, path, layout);
    return { path, envelope };
  });
  const taskQueue = opts.taskQueue ?? DEFAULT_TASK_QUEUE;
  const sync = envelopes.length
    ? await syncRegistryTrust(client, { layout, start: { trustDoc, taskQueue } })
    : undefined;
  if (sync?.refused) throw sync.refused;
  const results: Array<RegisterEnvelopeResult & { path: string }> = [];
  for (const { path, envelope } of envelopes) {
    results.push({
      path,
      ...(await registerEnvelope(client, {
        profile: opts.profile,
        envelope,
        trustDoc,
        by: opts.by,
        taskQueue,
        ...(sync?.trustHeld ? { trustHeld: sync.trustHeld } : {}),
      })),
    });
  }
  return results;
}

/** What a sync did: the registry's trust before and after, what it adopted, and the offer it refused, if one. */
export interface RegistryTrustSync {
  /** null: there was no registry. */
  before: RegistryTrustState | null;
  /** null: there is none still (nothing was offered, or a sync that never creates one). */
  after: RegistryTrustState | null;
  /** What it took, one line each (e.g. "trust root v1-v2"). */
  adopted: string[];
  /** The registry's refusal (INVALID_INPUT with details.reason; INVALID_STATE: its code cannot adopt); it kept what it held. */
  refused?: WavegateError;
  /**
   * For a registry not created yet whose first-use pins are root v N's (not trust.yaml's): that root, for the call
   * that creates it to say so (then it walks on from v N).
   */
  trustHeld?: HeldTrustRecord;
}

/**
 * Offer `registry:<profile>` the trust roots above the one it holds and the profile's revocation list when newer,
 * from the profile directory as this side verified it (intake/trust.ts). The registry verifies them itself from
 * what it holds (workflows/registry.ts) and takes nothing it cannot walk to. With `start`, a registry that does not
 * exist yet is created with `start.trustDoc` as its first-use pins by the first offer: version 0 when they are
 * trust.yaml's, root v N when they are that root's (a registry created after a rotation). Undefined: the profile
 * has no trust.yaml here (nothing to offer).
 */
export async function syncRegistryTrust(
  client: Client,
  opts: { layout: ProfileDir; start?: RegistryStart },
): Promise<RegistryTrustSync | undefined> {
  const { layout } = opts;
  const state = profileTrustState(layout);
  if (!state) return undefined;
  let before: RegistryTrustState | null = null;
  try {
    before = await registryTrustStateOf(client, layout.name);
  } catch (err) {
    // A registry on workflow code before adoption cannot take any: said, and left to verify with what it holds.
    if (err instanceof WavegateError && err.code === 'INVALID_STATE')
      return { before: null, after: null, adopted: [], refused: err };
    if (!(err instanceof WavegateError && err.code === 'NOT_FOUND')) throw err;
  }
  if (!before && !opts.start) return { before, after: null, adopted: [] };
  const newest = anchorVersion(state.root);
  const firstUse = before ? undefined : firstUseRoot(layout, opts.start!.trustDoc, newest);
  if (!before && !firstUse)
    return {
      before,
      after: null,
      adopted: [],
      refused: new WavegateError(
        'INVALID_INPUT',
        `registry:${layout.name} is created with pins that are neither ${layout.trustFile}'s nor any trust root's of the profile: it cannot follow the profile's trust root (nothing offered)`,
      ),
    };
  const trustHeld = firstUse?.record;
  // Until an update creates it, each offer carries the start (with the root its first-use pins are, if one).
  let start: RegistryStart | undefined = before ? undefined : { ...opts.start!, ...(trustHeld ? { trustHeld } : {}) };
  let after: RegistryTrustState | null = before;
  const adopted: string[] = [];
  /** Whether it took the offer; false when another caller's offer got there first (a race: what it holds now). */
  const offer = async (what: { roots: unknown[] } | { revocations: unknown }): Promise<boolean> => {
    try {
      after = await adoptRegistryTrust(client, { profile: layout.name, offer: what, ...(start ? { start } : {}) });
      start = undefined;
      return true;
    } catch (err) {
      // Only what is above what it held a moment ago is offered: a rollback now means it moved on meanwhile.
      const reason = err instanceof WavegateError ? err.details?.reason : undefined;
      if (reason !== 'ROOT_ROLLBACK' && reason !== 'METADATA_ROLLBACK') throw err;
      after = await registryTrustStateOf(client, layout.name);
      return false;
    }
  };
  try {
    let held = before?.root ?? firstUse!.version;
    while (held < newest) {
      const last = Math.min(newest, held + MAX_ROOT_STEPS);
      const roots: unknown[] = [];
      for (let v = held + 1; v <= last; v++)
        roots.push(
          v === newest && 'content' in state.root ? state.root.envelope : readDocument(layout.rootFile(v), 'json'),
        );
      if (await offer({ roots }))
        adopted.push(last === held + 1 ? `trust root v${last}` : `trust root v${held + 1}-v${last}`);
      // A race's rollback means it holds more than before: progress either way (the guard is for a state that lies).
      if (after!.root <= held) break;
      held = after!.root;
    }
    const list = state.revocations;
    if (list && list.content.version > (after?.revocations ?? 0)) {
      // The file's envelope is the one the state verified: a list replaced meanwhile is offered at the next sync.
      const envelope = readDocument(layout.revocationsFile, 'json') as Envelope;
      if (bodyDigest(envelope) === list.digest && (await offer({ revocations: envelope })))
        adopted.push(`revocation list v${list.content.version}`);
    }
  } catch (err) {
    if (!(err instanceof WavegateError && (err.code === 'INVALID_INPUT' || err.code === 'INVALID_STATE'))) throw err;
    return { before, after, adopted, refused: err, ...(trustHeld && !after ? { trustHeld } : {}) };
  }
  return { before, after, adopted, ...(trustHeld && !after ? { trustHeld } : {}) };
}

/**
 * The version of the profile's trust root whose pins are `trustDoc` (a registry's first-use pins): 0 when they are
 * trust.yaml's; else the newest root with the same threshold and keys, with the record a registry starts from;
 * undefined when they are no version's.
 */
function firstUseRoot(
  layout: ProfileDir,
  trustDoc: unknown,
  newest: number,
): { version: number; record?: HeldTrustRecord } | undefined {
  const identity = trustIdentity(trustDoc);
  if (identity === trustIdentity(readDocument(layout.trustFile))) return { version: 0 };
  for (let v = newest; v >= 1; v--) {
    const envelope = readDocument(layout.rootFile(v), 'json') as Envelope;
    const content = peekBody(envelope) as { threshold?: unknown; pins?: unknown } | undefined;
    let same = false;
    try {
      same = trustIdentity({ threshold: content?.threshold, pins: content?.pins }) === identity;
    } catch {
      // Not a trust document: the walk refused it already; no match.
    }
    if (same)
      return { version: v, record: { profile: layout.name, root: envelope, revocations: null, timestamp: null } };
  }
  return undefined;
}

/**
 * An envelope checked against the profile's trust as this side holds it (its newest trust root, its revocation
 * list: intake/trust.ts) before anything is sent to the registry (which verifies it again with the root and list it
 * holds, offered by syncRegistryTrust): a revision its signers revoked is refused here (exit 2, REVOKED), nothing
 * registered. A profile this side has no trust.yaml for is left to the registry's pins (false: nothing was checked).
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

/** What a trust sync did, as lines for stderr (`register`) or stdout (`trust sync`). */
export function syncNotes(profile: string, sync: RegistryTrustSync): string[] {
  const lines: string[] = [];
  if (sync.adopted.length && sync.after)
    lines.push(
      `registry:${profile} adopted ${sync.adopted.join(' and ')}: it verifies with trust root v${sync.after.root} (threshold ${sync.after.threshold} of ${sync.after.kids.length} pins) and revocation list v${sync.after.revocations}`,
    );
  if (sync.refused) {
    const held = sync.after
      ? `trust root v${sync.after.root}, revocation list v${sync.after.revocations}`
      : 'its first-use pins';
    lines.push(`note: ${sync.refused.message}; it keeps what it held (${held})`);
  }
  return lines;
}
