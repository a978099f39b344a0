import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { WavegateError } from '../core/errors';
import { parseInventory } from '../core/inventory';
import { parseProfile, parseRevision } from '../core/revision';
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
  const { spec, profile, steps } = loadRolloutContent(req);
  const inventoryPath = resolve(req.inventoryPath);
  const inventory = parseInventory(readDocument(inventoryPath), req.inventoryPath);
  for (const pool of Object.keys(spec.disruptionBudget)) {
    if (!inventory.pools[pool]) {
      throw new WavegateError('INVALID_INPUT', `${req.specPath}: rollout.disruptionBudget.${pool}: no such pool in ${req.inventoryPath} (pools: ${Object.keys(inventory.pools).join(', ')})`);
    }
  }
  const poolBudgets: Record<string, number> = {};
  for (const pool of Object.values(inventory.pools)) poolBudgets[pool.name] = spec.disruptionBudget[pool.name] ?? pool.disruptionBudget;
  return { rolloutId: `rollout:${spec.profile}`, spec, scope: profile.scope, steps, inventoryPath, poolBudgets, startedBy: req.startedBy };
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
  const revisionPath = join(profileDir, 'revisions', `${spec.toRevision}.yaml`);
  if (!existsSync(revisionPath)) {
    throw new WavegateError('INVALID_INPUT', `${req.specPath}: rollout.toRevision: profile "${spec.profile}" has no revision ${spec.toRevision} (expected ${revisionPath})`);
  }
  const revision = parseRevision(readDocument(revisionPath), revisionPath);
  if (revision.profile !== spec.profile || revision.revision !== spec.toRevision) {
    throw new WavegateError('INVALID_INPUT', `${revisionPath}: declares ${revision.profile} r${revision.revision}, expected ${spec.profile} r${spec.toRevision}`);
  }
  const steps: RevisionSteps = {
    profile: spec.profile,
    revision: revision.revision,
    apply: revision.apply,
    verify: revision.verify,
    payload: revision.payload.map((f) => ({ ...f, source: resolve(profileDir, f.source) })),
  };
  return { spec, profile, revision, steps };
}
