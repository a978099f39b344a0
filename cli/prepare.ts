import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { Client } from '@temporalio/client';
import { canonicalize } from '../core/canonical';
import { WavegateError } from '../core/errors';
import { parseInventory } from '../core/inventory';
import { devicesInScope } from '../core/gates';
import { classifyRevision } from '../core/provability';
import { parseProfile, parseRevision, type Profile, type Revision } from '../core/revision';
import { Envelope, parseTrust, verifyEnvelope, type Trust } from '../core/signing';
import { checkSpecAgainstInventory, parseRolloutSpec, type RolloutSpec } from '../core/spec';
import { parseWith } from '../core/validation';
import type { RevisionSteps } from '../core/rollout/input';
import type { RolloutInput } from '../core/rollout/input';
import { readDocument } from '../intake/files';
import { getEnvelope } from './registry-client';

export interface RolloutRequest {
  specPath: string;
  inventoryPath: string;
  profilesDir: string;
  startedBy: string;
  /**
   * Take the target and from revisions from the profile's registry (`registry:<profile>`) through this
   * client, verified against `profiles/<profile>/trust.yaml`. Without it they come from the profile's
   * files (signed envelopes when the profile has pins, else revisions/<n>.yaml).
   */
  client?: Client;
}

/** A revision with the envelope it was verified from (none for an unsigned profile). */
export interface SignedRevision {
  revision: Revision;
  envelope?: Envelope;
}

export interface RolloutContent {
  spec: RolloutSpec;
  profile: Profile;
  /** The target revision. */
  revision: Revision;
  steps: RevisionSteps;
  rollbackSteps: RevisionSteps;
}

/**
 * Everything `start` validates before it contacts Temporal: the spec, the inventory, the profile and the
 * target revision, each against the same core/ schemas the workflow trusts. Any problem is INVALID_INPUT
 * (exit 2) and nothing starts. With `client` the revisions come from the registry and this returns a
 * promise; without, it reads files and returns synchronously.
 */
export function prepareRollout(req: RolloutRequest & { client?: undefined }): RolloutInput;
export function prepareRollout(req: RolloutRequest & { client: Client }): Promise<RolloutInput>;
export function prepareRollout(req: RolloutRequest): RolloutInput | Promise<RolloutInput>;
export function prepareRollout(req: RolloutRequest): RolloutInput | Promise<RolloutInput> {
  if (req.client) {
    const client = req.client;
    return loadRegisteredRolloutContent(client, req).then((content) => assembleInput(req, content));
  }
  return assembleInput(req, loadRolloutContent(req));
}

function assembleInput(req: RolloutRequest, content: RolloutContent): RolloutInput {
  const { spec, profile, revision, steps, rollbackSteps } = content;
  const inventoryPath = resolve(req.inventoryPath);
  const inventory = parseInventory(readDocument(inventoryPath), req.inventoryPath);
  checkSpecAgainstInventory(spec, inventory, req.specPath, devicesInScope(profile.scope, inventory.devices).map((d) => d.id));
  const poolBudgets: Record<string, number> = {};
  for (const pool of Object.values(inventory.pools)) poolBudgets[pool.name] = spec.disruptionBudget[pool.name] ?? pool.disruptionBudget;
  return {
    rolloutId: `rollout:${spec.profile}`,
    spec,
    profile,
    steps,
    rollbackSteps,
    provable: classifyRevision(revision).provable,
    risk: revision.risk,
    inventoryPath,
    poolBudgets,
    startedBy: req.startedBy,
  };
}

function loadSpecAndProfile(req: Pick<RolloutRequest, 'specPath' | 'profilesDir'>) {
  const spec = parseRolloutSpec(readDocument(req.specPath), req.specPath);
  const profileDir = resolve(req.profilesDir, spec.profile);
  const profilePath = join(profileDir, 'profile.yaml');
  if (!existsSync(profilePath)) {
    throw new WavegateError('INVALID_INPUT', `${req.specPath}: rollout.profile: no profile "${spec.profile}" (expected ${profilePath})`);
  }
  return { spec, profileDir, profile: parseProfile(readDocument(profilePath), profilePath) };
}

/** The profile's pins (`<profileDir>/trust.yaml`), or undefined for an unsigned profile. */
export function loadProfileTrust(profileDir: string): Trust | undefined {
  const path = join(profileDir, 'trust.yaml');
  return existsSync(path) ? parseTrust(readDocument(path), path) : undefined;
}

/** Verify an envelope of revision `n` against the profile's pins; any refusal is INVALID_INPUT with its reason code. */
export function openEnvelope(envelope: unknown, trust: Trust, expect: { profile: string; revision: number; source: string; now?: number }): SignedRevision {
  const verdict = verifyEnvelope(envelope, trust, { now: expect.now ?? Date.now() });
  if (!verdict.ok) {
    throw new WavegateError('INVALID_INPUT', `${expect.source}: envelope refused (${verdict.reason}): ${verdict.message}`, { reason: verdict.reason, source: expect.source });
  }
  if (verdict.revision.profile !== expect.profile || verdict.revision.revision !== expect.revision) {
    throw new WavegateError('INVALID_INPUT', `${expect.source}: the envelope holds ${verdict.revision.profile} r${verdict.revision.revision}, expected ${expect.profile} r${expect.revision}`, { source: expect.source });
  }
  return { revision: verdict.revision, envelope: parseWith(Envelope, envelope, expect.source) };
}

/**
 * Device steps from a (verified) revision: payload sources resolved against the profile directory. The
 * way back is fromRevision itself (its verify proves a device is back); an explicit rollback command of
 * the target revision replaces its apply, and the target's envelope rides along so the worker can check it.
 */
export function stepsOf(profileDir: string, signed: SignedRevision, rollbackOf?: SignedRevision): RevisionSteps {
  const { revision, envelope } = signed;
  const rollback = rollbackOf?.revision.rollback;
  return {
    profile: revision.profile,
    revision: revision.revision,
    apply: rollback ?? revision.apply,
    verify: revision.verify,
    payload: revision.payload.map((f) => ({ ...f, source: resolve(profileDir, f.source) })),
    ...(envelope ? { envelope } : {}),
    ...(rollback !== undefined && rollbackOf?.envelope ? { rollbackOf: rollbackOf.envelope } : {}),
  };
}

function contentOf(spec: RolloutSpec, profile: Profile, profileDir: string, load: (n: number, field: string) => SignedRevision): RolloutContent {
  const target = load(spec.toRevision, 'toRevision');
  const from = load(spec.fromRevision, 'fromRevision');
  return { spec, profile, revision: target.revision, steps: stepsOf(profileDir, target), rollbackSteps: stepsOf(profileDir, from, target) };
}

/**
 * The spec with its profile and target revision, validated, from the profile's files; no inventory
 * needed yet. A profile with pins (trust.yaml) must have a signed envelope `envelopes/<n>.json` for each
 * revision used, verified here and carried to the workers; its revisions/<n>.yaml, when present, must
 * be the signed content (a changed file must be signed again).
 */
export function loadRolloutContent(req: Pick<RolloutRequest, 'specPath' | 'profilesDir'>): RolloutContent {
  const { spec, profileDir, profile } = loadSpecAndProfile(req);
  const trust = loadProfileTrust(profileDir);
  const load = (n: number, field: string): SignedRevision => {
    const path = join(profileDir, 'revisions', `${n}.yaml`);
    const envelopePath = join(profileDir, 'envelopes', `${n}.json`);
    if (trust) {
      if (!existsSync(envelopePath)) {
        throw new WavegateError('INVALID_INPUT', `${req.specPath}: rollout.${field}: profile "${spec.profile}" has pins (${join(profileDir, 'trust.yaml')}) but revision ${n} has no signed envelope (expected ${envelopePath}; wavegate sign + cosign)`);
      }
      const signed = openEnvelope(readDocument(envelopePath), trust, { profile: spec.profile, revision: n, source: envelopePath });
      if (existsSync(path)) {
        const source = parseRevision(readDocument(path), path);
        // `sign` adds expiresAt to a file without one; everything else must be what was signed.
        const signedContent = source.expiresAt ? signed.revision : { ...signed.revision, expiresAt: undefined };
        if (canonicalize(source) !== canonicalize(signedContent)) {
          throw new WavegateError('INVALID_INPUT', `${path}: differs from its signed envelope ${envelopePath}; sign the changed revision again`, { source: path });
        }
      }
      return signed;
    }
    if (!existsSync(path)) {
      throw new WavegateError('INVALID_INPUT', `${req.specPath}: rollout.${field}: profile "${spec.profile}" has no revision ${n} (expected ${path})`);
    }
    const revision = parseRevision(readDocument(path), path);
    if (revision.profile !== spec.profile || revision.revision !== n) {
      throw new WavegateError('INVALID_INPUT', `${path}: declares ${revision.profile} r${revision.revision}, expected ${spec.profile} r${n}`);
    }
    return { revision };
  };
  return contentOf(spec, profile, profileDir, load);
}

/**
 * The same from the profile's registry: each revision's registered envelope, verified again here against
 * the profile's pins (a registry is not trusted further than the pins on this side).
 */
export async function loadRegisteredRolloutContent(client: Client, req: Pick<RolloutRequest, 'specPath' | 'profilesDir'>): Promise<RolloutContent> {
  const { spec, profileDir, profile } = loadSpecAndProfile(req);
  const trust = loadProfileTrust(profileDir);
  if (!trust) {
    throw new WavegateError('INVALID_INPUT', `${req.specPath}: rollout.profile: profile "${spec.profile}" has no pins (expected ${join(profileDir, 'trust.yaml')}) to verify its registered revisions against`);
  }
  const fetched = new Map<number, unknown>();
  for (const [n, field] of [[spec.toRevision, 'toRevision'], [spec.fromRevision, 'fromRevision']] as const) {
    try {
      fetched.set(n, await getEnvelope(client, spec.profile, n));
    } catch (err) {
      if (err instanceof WavegateError && err.code === 'NOT_FOUND') {
        throw new WavegateError('INVALID_INPUT', `${req.specPath}: rollout.${field}: ${err.message}`, { ...err.details, field });
      }
      throw err;
    }
  }
  return contentOf(spec, profile, profileDir, (n) => openEnvelope(fetched.get(n), trust, { profile: spec.profile, revision: n, source: `registry:${spec.profile} r${n}` }));
}
