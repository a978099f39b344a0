import { resolve } from 'node:path';
import { WavegateError } from '../core/errors';
import { devicesInScope } from '../core/gates';
import type { Device, Inventory } from '../core/inventory';
import { ownValue } from '../core/own-keys';
import { classifyRevision } from '../core/provability';
import type { Profile } from '../core/revision';
import type { RevisionSteps, RolloutInput } from '../core/rollout/input';
import { checkSpecAgainstInventory, type RolloutSpec } from '../core/spec';
import type { SignedRevision } from './envelope';
import { checkHealthSelections } from './health-selection';
import type { ProfileDir } from './profile-dir';

/** Everything a rollout's input is made of, each already parsed (and verified, for signed revisions). */
export interface RolloutParts {
  spec: RolloutSpec;
  /** Names the spec in errors: its file, or what made it (the nightly canary). */
  specSource: string;
  inventory: Inventory;
  /** The inventory file: the worker reads it again at snapshot time. Names the inventory in errors. */
  inventoryPath: string;
  profile: Profile;
  /** Where the profile's files are (payload sources resolve against it). */
  layout: ProfileDir;
  /** The target revision (`spec.toRevision`). */
  target: SignedRevision;
  /** The revision the way back goes to (`spec.fromRevision`). */
  from: SignedRevision;
  startedBy: string;
  /** Default `rollout:<profile>`, the id every rollout had before per-rollout ids: `start` and `revert` give each rollout one of its own (cli/client.ts). */
  rolloutId?: string;
}

/**
 * The rollout's input, assembled from objects: no file is read here. What `start`, `plan`, the nightly
 * canary and the tests all go through, so what is planned is what runs.
 */
export function assembleRolloutInput(parts: RolloutParts): RolloutInput {
  const { spec, profile, layout, target, from } = parts;
  if (target.revision.revision !== spec.toRevision || from.revision.revision !== spec.fromRevision) {
    throw new WavegateError(
      'INVALID_INPUT',
      `${parts.specSource}: rollout: revisions r${from.revision.revision} → r${target.revision.revision} given for a spec of r${spec.fromRevision} → r${spec.toRevision}`,
    );
  }
  const inScope = scopedDevices(spec, parts.inventory, profile, parts);
  checkHealthSelections(spec, profile, target, parts.specSource, inScope);
  return {
    rolloutId: parts.rolloutId ?? `rollout:${spec.profile}`,
    spec,
    profile,
    // Only the way forward waits for dependencies: putting a device back never does.
    steps: { ...stepsOf(layout, target), ...(spec.after?.length ? { after: spec.after } : {}) },
    rollbackSteps: stepsOf(layout, from, target),
    provable: classifyRevision(target.revision).provable,
    risk: target.revision.risk,
    // A URL (--inventory-url, read by the CLI) is named as it is; a file by its absolute path.
    inventoryPath: /^https?:\/\//.test(parts.inventoryPath) ? parts.inventoryPath : resolve(parts.inventoryPath),
    poolBudgets: poolBudgetsOf(spec, parts.inventory),
    startedBy: parts.startedBy,
  };
}

/**
 * The devices of the inventory in the profile's scope (every device without a profile), checked
 * against the spec: at least one device, a `canaryClass` among them, known pools, a transport that
 * exists. INVALID_INPUT naming the spec or the inventory otherwise.
 */
export function scopedDevices(
  spec: RolloutSpec,
  inventory: Inventory,
  profile: Pick<Profile, 'scope'> | undefined,
  sources: { specSource: string; inventoryPath: string },
): Device[] {
  const inScope = devicesInScope(profile?.scope, inventory.devices);
  if (inScope.length === 0) {
    throw new WavegateError(
      'INVALID_INPUT',
      `${sources.inventoryPath}: invalid\n  devices: no device matches the scope of profile "${spec.profile}" (${JSON.stringify(profile?.scope ?? {})})`,
      { source: sources.inventoryPath },
    );
  }
  checkSpecAgainstInventory(
    spec,
    inventory,
    sources.specSource,
    inScope.map((d) => d.id),
  );
  return inScope;
}

/** In-flight fraction per pool: the spec's `disruptionBudget` for a pool where it names one, else the inventory's. */
export function poolBudgetsOf(
  spec: Pick<RolloutSpec, 'disruptionBudget'>,
  inventory: Inventory,
): Record<string, number> {
  // Built from entries (own properties only, whatever the names) and read with own-property lookups.
  return Object.fromEntries(
    Object.values(inventory.pools).map((pool) => [
      pool.name,
      ownValue(spec.disruptionBudget, pool.name) ?? pool.disruptionBudget,
    ]),
  );
}

/**
 * Device steps from a (verified) revision: payload sources resolved against the profile directory. The
 * way back is fromRevision itself (its verify proves a device is back); an explicit rollback command of
 * the target revision replaces its apply, and the target's envelope rides along so the worker can check it.
 */
export function stepsOf(layout: ProfileDir, signed: SignedRevision, rollbackOf?: SignedRevision): RevisionSteps {
  const { revision, envelope } = signed;
  const rollback = rollbackOf?.revision.rollback;
  return {
    profile: revision.profile,
    revision: revision.revision,
    apply: rollback ?? revision.apply,
    verify: revision.verify,
    payload: revision.payload.map((f) => ({ ...f, source: layout.payloadSource(f.source) })),
    ...(envelope ? { envelope } : {}),
    ...(rollback !== undefined && rollbackOf?.envelope ? { rollbackOf: rollbackOf.envelope } : {}),
  };
}
