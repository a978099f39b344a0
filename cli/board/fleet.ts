import { createHash } from 'node:crypto';
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import type { Client } from '@temporalio/client';
import { sortFleetWorstFirst, type FleetDevice } from '../../core/board';
import { WavegateError } from '../../core/errors';
import { isExpired, verdictStanding } from '../../core/node-down';
import { checkProfileName } from '../../core/profile-name';
import { readSeen } from '../../clients/presence';
import { loadInventory } from '../../intake/inventory';
import { readVerdicts, verdictsPathFor } from '../../intake/node-down';
import { resolveProfilesRoot } from '../../intake/profiles-root';
import type { TemporalFlags } from '../../workers/connection';
import { checkConverge, nothingBehind, startConverge } from '../commands/converge';
import { devicesWithTwins, transportName } from '../../device/channel';
import { behindRows } from '../../device/fleet';
import { readInventoryFlags } from '../membership-client';
import { driftOf, fleetStatusOf, revokedReason } from '../commands/fleet';
import { loadProfile } from '../../intake/profile';
import { loadProfileTrust } from '../../intake/trust';
import type { SignedStatement } from '../../core/approval';

/**
 * The board's fleet view: per profile, what `wavegate fleet status` and `wavegate drift` compute (each
 * device verified now over SSH, or its twin for an agent device), the node-down verdicts beside the
 * inventory with their expiry, and each agent's last sync. Expensive (a command on every device): one
 * check of a profile runs at a time, and its answer is reused for FLEET_CACHE_MS.
 */
export interface FleetSource {
  client: Client;
  inventory: string;
  profiles?: string;
  temporal: TemporalFlags;
}

const FLEET_CACHE_MS = 10_000;

export function fleetProfiles(src: FleetSource): { inventory: string; profilesRoot: string; profiles: string[] } {
  const root = resolveProfilesRoot(src.profiles !== undefined ? { flag: src.profiles } : {}).dir;
  const profiles = existsSync(root)
    ? readdirSync(root, { withFileTypes: true })
        .filter((e) => e.isDirectory() && existsSync(join(root, e.name, 'profile.yaml')))
        .map((e) => e.name)
        .sort()
    : [];
  return { inventory: src.inventory, profilesRoot: root, profiles };
}

type FleetAnswer = Awaited<ReturnType<typeof checkFleet>>;
const running = new Map<string, Promise<FleetAnswer>>();
const answered = new Map<string, { at: number; answer: FleetAnswer }>();

async function checkFleet(src: FleetSource, profile: string, revision?: number) {
  const flags = {
    ...src.temporal,
    profile,
    inventory: src.inventory,
    ...(src.profiles !== undefined ? { profiles: src.profiles } : {}),
    ...(revision !== undefined ? { revision } : {}),
    concurrency: 16,
  };
  const { board, why, active, revisions, last: lastCompleted } = await fleetStatusOf(flags);
  const { rows: drift } = await driftOf(flags);
  const inventory = loadInventory(src.inventory);
  const now = Date.now();
  const verdicts = new Map(
    readVerdicts(verdictsPathFor(src.inventory), { inventory: inventory.devices }).verdicts.map((v) => [v.device, v]),
  );
  const agents = devicesWithTwins(inventory.devices).map((d) => d.id);
  const seen = agents.length ? await readSeen(src.client, agents).catch(() => new Map()) : new Map();
  const byId = new Map(inventory.devices.map((d) => [d.id, d]));
  const driftOfId = new Map(drift.map((d) => [d.id, d]));
  const devices: FleetDevice[] = board.rows.map((r) => {
    const v = verdicts.get(r.id);
    const d = driftOfId.get(r.id);
    const transport = transportName(byId.get(r.id) ?? {});
    const last = seen.get(r.id) as { at: string } | undefined;
    return {
      id: r.id,
      pool: r.pool,
      class: r.class,
      transport,
      state: r.state,
      ...(r.proof ? { proof: r.proof } : {}),
      ...(r.marker !== undefined ? { marker: r.marker } : {}),
      ...(r.reason ? { reason: r.reason } : {}),
      ...(r.evidence ? { evidence: r.evidence } : {}),
      ...(d ? { drift: d.status, ...(d.detail ? { driftDetail: d.detail } : {}) } : {}),
      ...(v
        ? {
            verdict: {
              standing: isExpired(v, now) ? 'expired' : 'holds',
              text: verdictStanding(v, now).text,
              reason: v.reason,
              by: v.by,
              since: v.since,
              expiresAt: v.expiresAt,
              ...(v.lastCheckResult ? { lastCheckResult: v.lastCheckResult } : {}),
            },
          }
        : {}),
      ...(last ? { lastSeen: last.at } : {}),
      ...(r.revoked ? { revoked: r.revoked } : {}),
    };
  });
  // What `wavegate converge` would touch: the devices behind the revision the last completed rollout went
  // to (fleet status's hint, the same rows converge reads), and the command that brings exactly them there.
  const last = lastCompleted;
  const behind = behindRows(board).map((r) => r.id);
  // A converge refuses to start beside a running rollout of the profile: no advice while one runs.
  const converge =
    last && last.toRevision === board.revision && active.length === 0
      ? {
          lastCompleted: last.rolloutId,
          revision: last.toRevision,
          devices: behind,
          digest: deviceSetDigest(behind),
          command: behind.length
            ? `wavegate converge --profile ${profile} --file <the spec of ${last.rolloutId}: r${last.fromRevision} → r${last.toRevision}> --inventory ${src.inventory}${src.profiles ? ` --profiles ${src.profiles}` : ''}`
            : null,
        }
      : null;
  // Devices on a revoked revision: the board's converge brings devices to what the last rollout ran, never forward,
  // so the roll-forward is a spec of a newer revision, from a shell (`wavegate converge` rolls them forward).
  const lastRevoked = last ? revokedIn(src, profile)(last.toRevision) : undefined;
  const rollForward =
    board.revoked.length || lastRevoked !== undefined
      ? `wavegate converge --profile ${profile} --file <a spec to r${board.revision} or newer, its fromRevision one not revoked> --inventory ${src.inventory}${src.profiles ? ` --profiles ${src.profiles}` : ''}`
      : null;
  return {
    converge,
    revoked: board.revoked,
    rollForward,
    // The revision the last completed rollout went to, when its signers revoked it: no converge goes there.
    revokedTarget: last && lastRevoked !== undefined ? { revision: last.toRevision, reason: lastRevoked } : null,
    profile: board.profile,
    revision: board.revision,
    revisionWhy: why,
    active,
    // The revisions the view can check instead (the profile's files), as `fleet status --revision` does.
    revisions,
    provable: board.provable,
    counts: board.counts,
    drifted: drift.filter((d) => d.status === 'drifted').length,
    checkedAt: new Date(now).toISOString(),
    devices: sortFleetWorstFirst(devices),
  };
}

/** The fingerprint of a set of device ids (order aside): what a converge's or a revert's page showed, compared before it starts. */
export function deviceSetDigest(ids: readonly string[]): string {
  return createHash('sha256')
    .update([...ids].sort().join('\n'))
    .digest('hex');
}

/** Why a revision of the profile is revoked by its signers (the revocation list in the board's profiles root). */
function revokedIn(src: FleetSource, profile: string): (revision: number) => string | undefined {
  const files = loadProfile(fleetProfiles(src).profilesRoot, profile, 'profile');
  const trust = loadProfileTrust(files.layout);
  return (n) => revokedReason({ layout: files.layout, trust }, n);
}

function knownProfile(src: FleetSource, profile: string): void {
  checkProfileName(profile, 'profile');
  if (!fleetProfiles(src).profiles.includes(profile))
    throw new WavegateError('NOT_FOUND', `profile "${profile}": not in the profiles root`, {
      field: 'profile',
      value: profile,
    });
}

/**
 * Start the converge an operator confirmed on the fleet view, as `wavegate converge` starts it
 * (checkConverge, startConverge), started by the operator, over the board's inventory, with what the last
 * completed rollout ran (no spec file: ConvergeSource). Refused as the command refuses (no completed
 * rollout, a rollout of the profile running), when nothing is behind, and (CONFLICT) when the devices
 * behind now are not exactly the set the page showed.
 */
export async function startBoardConverge(
  src: FleetSource,
  taskQueue: string,
  profile: string,
  body: { devices: number; digest: string },
  by: string,
  /** The board's signed statement that `by` starts it (its --approval-key): the starter the two-person rule knows. */
  signStart?: (rolloutId: string) => SignedStatement,
): Promise<{ rolloutId: string; message: string }> {
  knownProfile(src, profile);
  const read = await readInventoryFlags({ inventory: src.inventory });
  const plan = await checkConverge(src.client, {
    profile,
    read,
    concurrency: 16,
    source: { recorded: true, startedBy: by },
    revoked: revokedIn(src, profile),
  });
  const ids = plan.behind.map((r) => r.id);
  if (ids.length === 0) {
    answered.delete(profile);
    throw new WavegateError('INVALID_STATE', `${nothingBehind(plan)}; nothing was started`, {
      state: 'nothing-behind',
    });
  }
  if (ids.length !== body.devices || deviceSetDigest(ids) !== body.digest) {
    answered.delete(profile);
    throw new WavegateError(
      'CONFLICT',
      `devices: the page showed ${body.devices} device(s) behind r${plan.last.toRevision}, ${ids.length} are behind now (${ids.slice(0, 20).join(', ')}${ids.length > 20 ? ', …' : ''}): check again before converging; nothing was started`,
      { field: 'devices' },
    );
  }
  const { handle } = await startConverge(src.client, taskQueue, plan, signStart);
  answered.delete(profile);
  return {
    rolloutId: handle.workflowId,
    message: `converge ${handle.workflowId} started by ${by}: ${ids.length} device(s) behind r${plan.last.toRevision} (last completed: ${plan.last.rolloutId}), with what it ran`,
  };
}

/** A profile's fleet, checked now (or within the last FLEET_CACHE_MS unless `fresh`); one check per profile at a time. */
export async function fleetView(
  src: FleetSource,
  profile: string,
  fresh = false,
  revision?: number,
): Promise<FleetAnswer> {
  knownProfile(src, profile);
  // One check per profile and revision at a time (the revision asked, as `fleet status --revision`; none: the default).
  const key = `${profile}\n${revision ?? ''}`;
  const cached = answered.get(key);
  if (cached && !fresh && Date.now() - cached.at < FLEET_CACHE_MS) return cached.answer;
  let pending = running.get(key);
  if (!pending) {
    pending = checkFleet(src, profile, revision).finally(() => running.delete(key));
    running.set(key, pending);
  }
  const answer = await pending;
  answered.set(key, { at: Date.now(), answer });
  return answer;
}

/** The fleet view's `?revision=`: a positive whole number (absent: the default revision). */
export function fleetRevisionParam(value: string | null): number | undefined {
  if (value === null || value === '') return undefined;
  if (!/^[1-9]\d{0,8}$/.test(value))
    throw new WavegateError(
      'INVALID_INPUT',
      `revision ${JSON.stringify(value.slice(0, 20))}: must be a positive whole number`,
      {
        field: 'revision',
        value: value.slice(0, 20),
      },
    );
  return Number(value);
}
