import { formatDurationMs } from '../duration';
import { DEFAULT_REVERT_WINDOW_MS, revertUntilOf } from '../floor';
import type { RolloutState } from '../rollout-state';
import type { PhaseSpec, RolloutSpec } from '../spec';
import type { RevertOf } from './input';
import type { RolloutStatus } from './status';

/**
 * The decisions of `wavegate revert` (README, "Revert and roll-forward"), pure: which finished rollouts
 * may be reverted, whether the revert window is still open (the same rule the device floor applies),
 * the revert's spec, and the roll-forward commands printed when it is too late.
 */

/** What the CLI read about the rollout to revert: Temporal's view of the run and the workflow's own. */
export interface FinishedRollout {
  rolloutId: string;
  runId: string;
  /** Temporal's execution status: RUNNING, COMPLETED, FAILED, CANCELLED, TERMINATED, TIMED_OUT, ... */
  execution: string;
  /** The rollout's own state (its result, or its status query while it runs), when known. */
  state?: RolloutState;
  /** Epoch milliseconds the run closed (absent while it runs). */
  closedAt?: number;
  spec: Pick<RolloutSpec, 'profile' | 'fromRevision' | 'toRevision'> & { revertWindow?: number };
  /** The rollout was itself a revert of this one. */
  reverts?: RevertOf;
  /** A nightly canary run. */
  canary?: boolean;
  /** The devices it changed and left at its target (see changedDevices). */
  changed: string[];
}

/**
 * Why an `applied` device was not changed by its rollout: its verify first found the revision already in
 * place, so nothing ran there. Such a device is applied for the board but never compensated or reverted.
 */
export const IN_PLACE_REASON = 'already in place (verify only)';

/**
 * The devices a rollout changed and left at its target: applied or claimed in one of its phases. A device
 * counted as applied at plan time (already at the target, phase -1) or found in place by its apply's
 * verify first was not changed by it, nor were skipped, failed, not-for-me or rolled-back ones.
 */
export function changedDevices(status: Pick<RolloutStatus, 'devices'>): string[] {
  return status.devices
    .filter((d) => (d.state === 'applied' || d.state === 'claimed') && d.phase >= 0 && d.reason !== IN_PLACE_REASON)
    .map((d) => d.id);
}

/** Why this rollout cannot be reverted whatever the time (its state), with what to do instead; null when it can. */
export function revertStateRefusal(r: FinishedRollout): string | null {
  const { rolloutId: id } = r;
  const { fromRevision: from, toRevision: to } = r.spec;
  if (r.execution === 'RUNNING') {
    return `${id} is ${r.state ?? 'running'}: only a completed rollout can be reverted; to undo it now, abort it (\`wavegate abort ${id}\` puts back every device it changed)`;
  }
  if (r.canary)
    return `${id} is a nightly canary run: it puts its canary back itself (unless --keep); nothing to revert`;
  if (r.execution === 'CANCELLED' || r.state === 'cancelled')
    return `${id} is cancelled: it put back every device it changed before it closed; nothing to revert`;
  if (r.execution !== 'COMPLETED')
    return `${id} ${r.execution === 'TERMINATED' ? 'was terminated' : `is ${r.execution.toLowerCase().replace(/_/g, ' ')}`}: it did not complete, so no floor was raised; read \`wavegate status ${id}\` and \`wavegate audit ${id}\` for where its devices are`;
  if (r.state === 'rolled-back')
    return `${id} is rolled-back: it already put back every device it changed to r${from}; nothing to revert`;
  if (r.state === 'aborted') {
    return r.changed.length
      ? `${id} is aborted: only a completed rollout can be reverted; ${r.changed.length} device(s) it changed were kept at r${to} (abort --no-rollback) with no revert window, so roll forward to move them`
      : `${id} is aborted: it put back every device it changed; nothing to revert`;
  }
  if (r.state !== 'completed')
    return `${id} is ${r.state ?? 'in an unknown state'}: only a completed rollout can be reverted`;
  if (r.reverts) {
    return `${id} is itself a revert of ${r.reverts.rolloutId} (run ${r.reverts.runId}): to go back up to r${from}, start a rollout r${to} → r${from} again (going up is always allowed)`;
  }
  if (r.changed.length === 0)
    return `${id} completed without changing any device (every one was already at r${to}, not-for-me or left out); nothing to revert`;
  return null;
}

/** The revert window of a completed rollout: its spec's `revertWindow` (the default for older inputs). */
export function revertWindowOf(spec: { revertWindow?: number }): number {
  return spec.revertWindow ?? DEFAULT_REVERT_WINDOW_MS;
}

/**
 * Why the revert window of a completed rollout is closed at `now`, or null while it is open: it runs from
 * the rollout's close (Temporal's close time) for the spec's `revertWindow`, as the devices judge a revert
 * (core/floor.ts `floorRefusal`). Each device also holds it to its own way back (counted from its own
 * confirmation, as the revision signs it), which only a device knows: a device past it refuses the revert.
 */
export function revertWindowRefusal(
  r: Pick<FinishedRollout, 'rolloutId' | 'runId' | 'closedAt' | 'spec'>,
  now: number,
): string | null {
  const windowMs = revertWindowOf(r.spec);
  const closedAt = r.closedAt ?? now;
  if (windowMs > 0 && now < revertUntilOf(closedAt, windowMs)) return null;
  const closed =
    windowMs > 0
      ? `its revert window (revertWindow ${formatDurationMs(windowMs)}) closed at ${new Date(revertUntilOf(closedAt, windowMs)).toISOString()}`
      : 'it had no revert window (revertWindow 0)';
  return `${r.rolloutId} completed at ${new Date(closedAt).toISOString()} and ${closed}: its devices' floor is r${r.spec.toRevision} now, so nothing below it is applied there again; roll forward instead`;
}

/** The one phase of `revert --fast`: every device at once, no gate timer, every health check of the original's phases. */
export function fastRevertPhase(phases: readonly PhaseSpec[]): PhaseSpec {
  return {
    bulk: { kind: 'percent', percent: 100 },
    name: 'revert (fast)',
    gate: 0,
    healthGate: [...new Set(phases.flatMap((p) => p.healthGate))],
  };
}

/**
 * The revert's spec: the original's with the revisions swapped (from its toRevision down to its
 * fromRevision: only a revert may say that), its phases or with `fast` the one fast phase, and no revert
 * window of its own (its floor ends at its target; going up again is always allowed), and no watch (a
 * failed watch would put the devices back up to the revision the revert takes them from), and no two-person
 * rule (core/approval.ts: the way back waits for no second person, as a rollback never did; going up again does).
 */
export function revertSpec(original: RolloutSpec, fast: boolean): RolloutSpec {
  const { watch: _watch, approval: _approval, ...rest } = original;
  return {
    ...rest,
    fromRevision: original.toRevision,
    toRevision: original.fromRevision,
    phases: fast ? [fastRevertPhase(original.phases)] : original.phases,
    revertWindow: 0,
  };
}

export interface RollForwardRequest {
  profile: string;
  /** The profile's directory (`<profiles>/<profile>`). */
  profileDir: string;
  /** The profiles root, as `start --profiles` takes it. */
  profilesRoot: string;
  /** The content to go back to (the rollout's fromRevision) and the revision the fleet is at. */
  from: number;
  to: number;
  /** The new revision's number: above every revision the profile has. */
  next: number;
  /** The inventory file the rollout read, or the URL (origin and path) it read it from. */
  inventoryPath: string;
}

/**
 * The roll-forward: the old content as a new, higher revision, signed, then a rollout up to it (never
 * below a floor). The commands as an operator runs them (README, "Your own fleet": sign, cosign, start).
 */
export function rollForwardCommands(r: RollForwardRequest): string[] {
  const rev = (n: number) => `${r.profileDir}/revisions/${n}.yaml`;
  const env = `${r.profileDir}/envelopes/${r.next}.json`;
  // An inventory read over HTTP: start reads it again from there; sign's gates take a file of it.
  const overHttp = /^https?:\/\//.test(r.inventoryPath);
  const signInventory = overHttp ? '<the inventory, saved as a file>' : r.inventoryPath;
  const startInventory = overHttp ? `--inventory-url ${r.inventoryPath}` : `--inventory ${r.inventoryPath}`;
  return [
    `roll forward: r${r.from}'s content as a new revision r${r.next}, then a rollout r${r.to} → r${r.next}:`,
    `  sed -e 's/^revision: ${r.from}$/revision: ${r.next}/' -e '/^previous:/d' -e '/^issuedAt:/d' -e '/^expiresAt:/d' ${rev(r.from)} > ${rev(r.next)} && echo 'previous: ${r.to}' >> ${rev(r.next)}`,
    `  wavegate sign ${rev(r.next)} --key <your key> --out ${env} --inventory ${signInventory} --profile ${r.profileDir}/profile.yaml`,
    `  wavegate cosign ${env} --key <the next signer's key>    # until trust.yaml's threshold is met`,
    `  wavegate start -f <the rollout's spec with fromRevision: ${r.to}, toRevision: ${r.next}> ${startInventory} --profiles ${r.profilesRoot} --wait`,
    `  (revisions from the registry: \`wavegate register ${env} --trust ${r.profileDir}/trust.yaml\` before start --registry)`,
  ];
}
