import { devicesInScope } from '../core/gates';
import type { Inventory } from '../core/inventory';
import { alsoScopeProblems, memberField, type ProfileSetSpec, type SetMember } from '../core/rollout/profile-set';
import { invalidFields } from '../core/validation';
import type { SignedRevision } from './envelope';
import { loadProfile, type LoadedProfile } from './profile';
import { fileRevision } from './revisions';
import { checkSignedPayload } from './signed-payload';
import { loadProfileTrust } from './trust';

/**
 * The profiles of a spec's `also` from the profiles root (docs/architecture.md, "Several profiles as one
 * rollout"): each opened with the main profile's own checks (intake/prepare.ts `loadRolloutContent`), against
 * its own trust.yaml, each refusal naming the member's field (`spec.yaml: rollout.also[0].toRevision`).
 */

/** An `also` profile, loaded: its profile, its target and from revisions (verified when it has pins). */
export interface AlsoContent extends LoadedProfile {
  member: SetMember;
  target: SignedRevision;
  from: SignedRevision;
}

/**
 * Each `also` profile and its two revisions, as the main one's are read: a revision its pins cannot verify
 * (no envelope, a signature that does not verify, below the threshold, another profile's or revision's
 * envelope) or a payload file that is not the one signed is INVALID_INPUT naming the member's field.
 */
export function loadAlsoContent(profilesRoot: string, spec: ProfileSetSpec, specSource: string): AlsoContent[] {
  return (spec.also ?? []).map((member, i) => {
    const field = (name: 'profile' | 'fromRevision' | 'toRevision') => `${specSource}: ${memberField(i + 1, name)}`;
    const loaded = loadProfile(profilesRoot, member.profile, field('profile'));
    const trust = loadProfileTrust(loaded.layout);
    const target = fileRevision(loaded.layout, trust, member.toRevision, field('toRevision'));
    const from = fileRevision(loaded.layout, trust, member.fromRevision, field('fromRevision'));
    checkSignedPayload(loaded.layout, trust, target, field('toRevision'));
    checkSignedPayload(loaded.layout, trust, from, field('fromRevision'));
    return { ...loaded, member, target, from };
  });
}

/** INVALID_INPUT naming `rollout.also[i].profile` when an `also` profile's scope leaves out a device of the main one's. */
export function checkAlsoScopes(
  spec: ProfileSetSpec,
  inventory: Inventory,
  mainScope: readonly string[],
  also: readonly AlsoContent[],
  specSource: string,
): void {
  const scopes = also.map((c) => new Set(devicesInScope(c.profile.scope, inventory.devices).map((d) => d.id)));
  const problems = alsoScopeProblems(spec, mainScope, scopes);
  if (problems.length) invalidFields(specSource, problems);
}
