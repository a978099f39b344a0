import { WavegateError } from '../core/errors';
import type { Profile } from '../core/revision';
import { parseRolloutSpec, type RolloutSpec } from '../core/spec';
import { readDocument } from './files';

export interface CanarySpecRequest {
  profile: Profile;
  /** A rollout spec file whose first phase is the canary (its profile and revisions are replaced). */
  specPath?: string;
  fromRevision: number;
  toRevision: number;
}

/** The canary phase when no spec is given: one device of the majority class, a short gate, the profile's health checks. */
function defaultCanaryRollout(profile: Profile): Record<string, unknown> {
  const healthGate = [...(profile.runtimes.length ? ['all-runtimes-healthy'] : []), ...(profile.metrics ? ['error-rate < 0.01'] : []), 'devices-online'];
  return { phases: [{ canary: '1 device', gate: '5m', healthGate }] };
}

/**
 * A nightly canary's rollout spec, validated: the spec file's `rollout:` body (or the default canary
 * phase) with the profile and the night's revisions filled in. `specSource` names it in errors.
 */
export function canarySpec(req: CanarySpecRequest): { spec: RolloutSpec; specSource: string } {
  let base = defaultCanaryRollout(req.profile);
  const specSource = req.specPath ?? `nightly canary of ${req.profile.name}`;
  if (req.specPath) {
    const rollout = (readDocument(req.specPath) as { rollout?: unknown } | null)?.rollout ?? {};
    if (typeof rollout !== 'object' || rollout === null || Array.isArray(rollout)) {
      throw new WavegateError('INVALID_INPUT', `${req.specPath}: invalid\n  rollout: must be a rollout spec mapping (got ${JSON.stringify(rollout)})`, { source: req.specPath });
    }
    base = rollout as Record<string, unknown>;
  }
  const spec = parseRolloutSpec({ rollout: { ...base, profile: req.profile.name, fromRevision: req.fromRevision, toRevision: req.toRevision } }, specSource);
  return { spec, specSource };
}
