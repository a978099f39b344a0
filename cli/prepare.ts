import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { WavegateError } from '../core/errors';
import { parseInventory } from '../core/inventory';
import { classifyRevision } from '../core/provability';
import { parseProfile, parseRevision, type Revision } from '../core/revision';
import { parseRolloutSpec } from '../core/spec';
import type { RevisionSteps } from '../activities/device-steps';
import type { RolloutInput } from '../workflows/rollout';
import { readDocument } from './files';

export interface RolloutRequest {
  specPath: string;
  inventoryPath: string;
  profilesDir: string;
  startedBy: string;
}

/**
 * Everything `start` validates before it contacts Temporal: the spec, the inventory, the profile and the
 * target revision, each against the same core/ schemas the workflow trusts. Any problem is INVALID_INPUT
 * (exit 2) and nothing starts.
 */
export function prepareRollout(req: RolloutRequest): RolloutInput {
  const { spec, profile, revision, steps, rollbackSteps } = loadRolloutContent(req);
  const inventoryPath = resolve(req.inventoryPath);
  const inventory = parseInventory(readDocument(inventoryPath), req.inventoryPath);
  for (const pool of Object.keys(spec.disruptionBudget)) {
    if (!inventory.pools[pool]) {
      throw new WavegateError('INVALID_INPUT', `${req.specPath}: rollout.disruptionBudget.${pool}: no such pool in ${req.inventoryPath} (pools: ${Object.keys(inventory.pools).join(', ')})`);
    }
  }
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

/** The spec with its profile and target revision, validated; no inventory needed yet. */
export function loadRolloutContent(req: Pick<RolloutRequest, 'specPath' | 'profilesDir'>) {
  const spec = parseRolloutSpec(readDocument(req.specPath), req.specPath);
  const profileDir = resolve(req.profilesDir, spec.profile);
  const profilePath = join(profileDir, 'profile.yaml');
  if (!existsSync(profilePath)) {
    throw new WavegateError('INVALID_INPUT', `${req.specPath}: rollout.profile: no profile "${spec.profile}" (expected ${profilePath})`);
  }
  const profile = parseProfile(readDocument(profilePath), profilePath);
  const loadRevision = (n: number, field: string): Revision => {
    const path = join(profileDir, 'revisions', `${n}.yaml`);
    if (!existsSync(path)) {
      throw new WavegateError('INVALID_INPUT', `${req.specPath}: rollout.${field}: profile "${spec.profile}" has no revision ${n} (expected ${path})`);
    }
    const revision = parseRevision(readDocument(path), path);
    if (revision.profile !== spec.profile || revision.revision !== n) {
      throw new WavegateError('INVALID_INPUT', `${path}: declares ${revision.profile} r${revision.revision}, expected ${spec.profile} r${n}`);
    }
    return revision;
  };
  const stepsOf = (revision: Revision, apply = revision.apply): RevisionSteps => ({
    profile: spec.profile,
    revision: revision.revision,
    apply,
    verify: revision.verify,
    payload: revision.payload.map((f) => ({ ...f, source: resolve(profileDir, f.source) })),
  });
  const revision = loadRevision(spec.toRevision, 'toRevision');
  // The way back is fromRevision itself: its verify proves a device is back; an explicit rollback
  // command of the target revision replaces its apply.
  const from = loadRevision(spec.fromRevision, 'fromRevision');
  return { spec, profile, revision, steps: stepsOf(revision), rollbackSteps: stepsOf(from, revision.rollback ?? from.apply) };
}
