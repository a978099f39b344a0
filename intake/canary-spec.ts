import type { Client } from '@temporalio/client';
import { WavegateError } from '../core/errors';
import type { Profile, RevisionHealth } from '../core/revision';
import { parseRolloutSpec, type RolloutSpec } from '../core/spec';
import { readDocument } from './files';
import { profileDir } from './profile-dir';
import { registeredRevision, registryTrust } from './revisions';
import { loadProfileTrust } from './trust';

export interface CanarySpecRequest {
  profile: Profile;
  /** A rollout spec file whose first phase is the canary (its profile and revisions are replaced). */
  specPath?: string;
  fromRevision: number;
  toRevision: number;
  /** The target revision's signed health section: which device-side checks the default canary phase can select. */
  health?: RevisionHealth;
}

/**
 * The canary phase when no spec is given: one device of the majority class, a short gate, and the checks
 * there is something to run for (the target revision's signed runtimes and error-rate command, the
 * profile's worker-side error-rate source).
 */
function defaultCanaryRollout(profile: Profile, health: RevisionHealth | undefined): Record<string, unknown> {
  const healthGate = [
    ...(health?.runtimes?.length ? ['all-runtimes-healthy'] : []),
    ...(health?.errorRate || profile.metrics ? ['error-rate < 0.01'] : []),
    'devices-online',
  ];
  return { phases: [{ canary: '1 device', gate: '5m', healthGate }] };
}

/**
 * A nightly canary's rollout spec, validated: the spec file's `rollout:` body (or the default canary
 * phase) with the profile and the night's revisions filled in. `specSource` names it in errors.
 */
export function canarySpec(req: CanarySpecRequest): { spec: RolloutSpec; specSource: string } {
  let base = defaultCanaryRollout(req.profile, req.health);
  const specSource = req.specPath ?? `nightly canary of ${req.profile.name}`;
  if (req.specPath) {
    const rollout = (readDocument(req.specPath) as { rollout?: unknown } | null)?.rollout ?? {};
    if (typeof rollout !== 'object' || rollout === null || Array.isArray(rollout)) {
      throw new WavegateError(
        'INVALID_INPUT',
        `${req.specPath}: invalid\n  rollout: must be a rollout spec mapping (got ${JSON.stringify(rollout)})`,
        { source: req.specPath },
      );
    }
    base = rollout as Record<string, unknown>;
  }
  const spec = parseRolloutSpec(
    { rollout: { ...base, profile: req.profile.name, fromRevision: req.fromRevision, toRevision: req.toRevision } },
    specSource,
  );
  return { spec, specSource };
}

/**
 * The same for a nightly canary from the registry: without a spec file, the default phase selects from
 * the signed health section of the registered target revision (verified against the profile's pins).
 */
export async function registeredCanarySpec(
  client: Client,
  req: CanarySpecRequest & { profilesRoot: string },
): Promise<{ spec: RolloutSpec; specSource: string }> {
  if (req.specPath || req.health) return canarySpec(req);
  const layout = profileDir(req.profilesRoot, req.profile.name);
  const trust = registryTrust(layout, loadProfileTrust(layout), 'profile');
  const target = await registeredRevision(client, layout, trust, req.toRevision, 'toRevision');
  return canarySpec({ ...req, ...(target.revision.health ? { health: target.revision.health } : {}) });
}
