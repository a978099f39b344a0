import { dependencyLabel, type Dependency } from '../core/dependencies';
import { WavegateError } from '../core/errors';
import type { Revision } from '../core/revision';
import { profileDir } from '../intake/profile-dir';
import { findFileRevision } from '../intake/revisions';
import { EnvelopeRejected, loadWorkerTrust, shellFor, type DependencyChecker } from './steps';

/**
 * The worker's side of ordering between profiles (docs/formats.md, "after"): whether a device verifies
 * each profile the rollout waits for. The history carries only (profile, revision) references; the
 * command run on the device is the `verify` inside the dependency's envelope of that revision, opened
 * here from the worker's own profiles root against the worker's own pins.
 */

export interface DependencyCheckOptions {
  /** The worker's profiles root: the dependency's pins and envelopes come from here and nowhere else. */
  profilesRoot: string;
  /** Refuse a dependency without a signed envelope even when the worker holds no pins for it. */
  requireEnvelope: boolean;
  /** Each verify (and the marker read) gets this long. */
  timeoutMs: number;
}

/**
 * A dependency revision as this worker may run its verify: the signed content from its own files, or
 * EnvelopeRejected (never retried: no device state changes that) when it cannot be opened. Undefined
 * only for `optional` revisions (a marker's newer revision the worker does not ship).
 */
export function openDependency(
  dep: Dependency,
  opts: Pick<DependencyCheckOptions, 'profilesRoot' | 'requireEnvelope'>,
  optional = false,
): Revision | undefined {
  const trust = loadWorkerTrust(opts.profilesRoot, dep.profile);
  const layout = profileDir(opts.profilesRoot, dep.profile);
  if (!trust && opts.requireEnvelope) {
    throw new EnvelopeRejected(
      'NO_TRUST',
      `this worker has no pins for the dependency profile "${dep.profile}" (no ${layout.trustFile}) to verify ${dependencyLabel(dep)} against`,
    );
  }
  let found: ReturnType<typeof findFileRevision>;
  try {
    found = findFileRevision(layout, trust, dep.revision);
  } catch (err) {
    if (!(err instanceof WavegateError)) throw err;
    const reason = typeof err.details.reason === 'string' ? err.details.reason : 'DEPENDENCY_REFUSED';
    throw new EnvelopeRejected(reason, `dependency ${dependencyLabel(dep)}: ${err.message}`);
  }
  if (found || optional) return found?.revision;
  throw new EnvelopeRejected(
    'NO_DEPENDENCY',
    `this worker has no ${trust ? 'signed envelope' : 'revision file'} of the dependency ${dependencyLabel(dep)} (expected ${trust ? layout.envelopeFile(dep.revision) : layout.revisionFile(dep.revision)})`,
  );
}

/**
 * The checker `applyRevision` hands to the apply: for each dependency, its signed verify run on the
 * device. A failing verify is not yet the answer: the device's marker for that profile may name a newer
 * revision (a dependency that moved on), whose own signed verify then decides. The marker is only a
 * pointer to which verify to run, never the proof. Runs nothing but verify commands and marker reads.
 */
export function dependencyChecker(opts: DependencyCheckOptions): DependencyChecker {
  return async (session, _device, after) => {
    const open = { profilesRoot: opts.profilesRoot, requireEnvelope: opts.requireEnvelope };
    // Every envelope is opened before the device runs any of them: a refusal runs nothing.
    const revisions = after.map((dep) => ({ dep, revision: openDependency(dep, open)! }));
    const verifies = async (profile: string, revision: Revision) =>
      (
        await session.exec(shellFor({ profile, revision: revision.revision }, revision.verify), {
          timeoutMs: opts.timeoutMs,
        })
      ).code === 0;
    const unmet: Dependency[] = [];
    const notes: string[] = [];
    for (const { dep, revision } of revisions) {
      if (await verifies(dep.profile, revision)) continue;
      const marker = await session.readMarker(dep.profile, { timeoutMs: opts.timeoutMs });
      if (marker !== null && marker > dep.revision) {
        const newer = openDependency({ profile: dep.profile, revision: marker }, open, true);
        if (newer && (await verifies(dep.profile, newer))) continue;
      }
      unmet.push(dep);
      notes.push(`${dependencyLabel(dep)} verify failed, ${marker === null ? 'no marker' : `marker r${marker}`}`);
    }
    return unmet.length ? { unmet, detail: notes.join('; ') } : null;
  };
}
