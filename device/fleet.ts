import { devicesInScope } from '../core/gates';
import type { Device, Inventory } from '../core/inventory';
import { proofOf, type DeviceTarget } from '../core/rollout-state';
import type { VerdictStanding } from '../core/node-down';
import { mapLimit } from '../core/map-limit';
import { channelFor, type ChannelDeps, type TwinReader } from './channel';

/**
 * Operator reads of the fleet, computed NOW on the devices (never from a stored flag): the fleet board,
 * drift and the fleet's current revision. Used directly by the CLI (an operator read, not a rollout) and
 * by the nightly canary's activities. Each device is read through its channel (./channel), as its applies run.
 */

/**
 * The board states (seed §1): only `applied` counts as rolled out. `ahead`: the device's marker names a
 * higher revision and that revision's verify passes there now: past the revision checked, never behind it.
 */
export type BoardState = 'applied' | 'claimed' | 'pending' | 'ahead' | 'not-for-me';

export interface BoardRow {
  id: string;
  pool: string;
  class: string;
  state: BoardState;
  /** Why: `verify exited 1`, `never answered: ...`, `left-behind`, `out of scope` ... */
  reason?: string;
  /** The revision marker on the device (null: none; absent: not read). */
  marker?: number | null;
  /** The first 400 chars of what verify printed (evidence). */
  evidence?: string;
  /**
   * For an applied or claimed row: `proven` when the device's own receipt of this revision verifies (an agent's
   * report), `claimed` when the read is the control plane's own (an SSH verify now, a report without a receipt).
   */
  proof?: 'proven' | 'claimed';
  /** The revision its marker names is revoked by the profile's signers (core/revocation.ts): it runs what they no longer stand behind. */
  revoked?: { revision: number; reason: string };
}

export interface BoardCounts {
  applied: number;
  claimed: number;
  pending: number;
  ahead: number;
  notForMe: number;
  total: number;
}

export interface FleetBoard {
  profile: string;
  revision: number;
  provable: boolean;
  rows: BoardRow[];
  counts: BoardCounts;
  /** The devices whose marker names a revoked revision (their rows carry `revoked`): each to be rolled forward. */
  revoked: Array<{ id: string; revision: number; reason: string }>;
}

export interface ProbeOptions {
  concurrency?: number;
  connectTimeoutMs?: number;
  commandTimeoutMs?: number;
  /** How devices whose channel reads twins (`transport: agent`) are read: their latest reports. Without it they are pending. */
  twins?: TwinReader;
}

/** The channel of a fleet device: the board and drift ask it and never look at the transport themselves. */
function channelOf(device: Device, probe: ProbeOptions) {
  const deps: ChannelDeps = probe.twins ? { twins: probe.twins } : {};
  return channelFor(device, deps);
}

/** What the workflow keeps of a device, as its channel says: an agent device is never dialled, so it carries no ssh settings. */
export function targetOf(device: Device): DeviceTarget {
  return channelFor(device).target(device);
}

/** Which inventory devices a profile is for, and why the others are not-for-me. */
export function partitionFleet(
  inventory: Inventory,
  scope: Record<string, string>,
): { targets: Device[]; notForMe: Array<{ device: Device; reason: string }> } {
  const inScope = new Set(devicesInScope(scope, inventory.devices).map((d) => d.id));
  const targets: Device[] = [];
  const notForMe: Array<{ device: Device; reason: string }> = [];
  for (const device of inventory.devices) {
    if (!inScope.has(device.id))
      notForMe.push({
        device,
        reason: `out of scope (${Object.entries(scope)
          .map(([k, v]) => `${k}=${v}`)
          .join(', ')})`,
      });
    else if (device.updateClass === 'left-behind') notForMe.push({ device, reason: 'left-behind' });
    else targets.push(device);
  }
  return { targets, notForMe };
}

export function countBoard(rows: BoardRow[]): BoardCounts {
  const counts: BoardCounts = { applied: 0, claimed: 0, pending: 0, ahead: 0, notForMe: 0, total: rows.length };
  for (const r of rows) {
    if (r.state === 'not-for-me') counts.notForMe++;
    else counts[r.state]++;
  }
  return counts;
}

/** Every target applied, ahead or not-for-me, none on a revoked revision: the only state in which the board is green. */
export function boardIsGreen(board: Pick<FleetBoard, 'counts'> & { revoked?: FleetBoard['revoked'] }): boolean {
  return board.counts.claimed === 0 && board.counts.pending === 0 && !board.revoked?.length;
}

/**
 * The fleet board for one revision: for each device in scope, run that revision's verify on it now.
 * Exit 0 of a provable verify is `applied`; of a non-provable one only `claimed`; anything else
 * (verify failed, never answered) is `pending`, unless the device's marker names a higher revision
 * whose verify (from `verifyOf`) passes there now: that device is `ahead`, never behind. Out-of-scope
 * and left-behind devices are not-for-me.
 */
export async function readFleetBoard(opts: {
  inventory: Inventory;
  profile: string;
  scope: Record<string, string>;
  revision: number;
  verify: string;
  provable: boolean;
  probe?: ProbeOptions;
  /** Node-down verdicts as judged now (intake/node-down-recheck.ts): one that holds makes its device not-for-me, uncontacted. */
  verdicts?: ReadonlyMap<string, VerdictStanding>;
  /** A higher revision's verify (and whether it is provable), to tell a device ahead from one behind; undefined: unknown here. */
  verifyOf?: (revision: number) => { verify: string; provable: boolean } | undefined;
  /** Why a revision is revoked (the profile's revocation list), or undefined: a device whose marker names one is listed. */
  revokedOf?: (revision: number) => string | undefined;
}): Promise<FleetBoard> {
  const partition = partitionFleet(opts.inventory, opts.scope);
  const holding = (d: Device) => opts.verdicts?.get(d.id)?.kind === 'holds';
  const targets = partition.targets.filter((d) => !holding(d));
  const notForMe = [
    ...partition.notForMe,
    ...partition.targets.filter(holding).map((device) => ({ device, reason: opts.verdicts!.get(device.id)!.text })),
  ];
  const probe = opts.probe ?? {};
  const probed = await mapLimit(
    targets,
    probe.concurrency ?? 16,
    async (device): Promise<BoardRow> =>
      withRevocation(withVerdictNote(await probeBoardRow(device), opts.verdicts?.get(device.id)), opts.revokedOf),
  );
  async function probeBoardRow(device: Device): Promise<BoardRow> {
    const base = { id: device.id, pool: device.pool, class: device.class };
    const ask = (revision: number, verify: string, provable: boolean) =>
      channelOf(device, probe).boardRead(targetOf(device), {
        profile: opts.profile,
        revision,
        verify,
        provable,
        connectTimeoutMs: probe.connectTimeoutMs,
        commandTimeoutMs: probe.commandTimeoutMs,
      });
    const answer = await ask(opts.revision, opts.verify, opts.provable);
    const above = aheadCandidate(answer, opts.revision);
    if (above === undefined) return { ...base, ...answer, ...rowProof(answer) };
    const higher = opts.verifyOf?.(above);
    if (!higher)
      return {
        ...base,
        ...answer,
        reason: `${answer.reason ?? 'pending'}; its marker says r${above}, above r${opts.revision}, a revision not known here`,
      };
    // The device claims a higher revision: its own verify decides, as the board's never trusts a marker alone.
    const there = await ask(above, higher.verify, higher.provable);
    if (there.state !== 'applied' && there.state !== 'claimed')
      return {
        ...base,
        ...answer,
        reason: `${answer.reason ?? 'pending'}; its marker says r${above} but r${above}'s verify fails there too`,
      };
    return {
      ...base,
      state: 'ahead',
      marker: above,
      reason: `at r${above} (${there.state === 'applied' ? 'verified' : 'claimed'} now), above r${opts.revision}`,
    };
  }
  const rows = [
    ...probed,
    ...notForMe.map(
      ({ device, reason }): BoardRow => ({
        id: device.id,
        pool: device.pool,
        class: device.class,
        state: 'not-for-me',
        reason,
      }),
    ),
  ];
  const order = new Map(opts.inventory.devices.map((d, i) => [d.id, i]));
  rows.sort((a, b) => order.get(a.id)! - order.get(b.id)!);
  const revoked = rows.flatMap((r) => (r.revoked ? [{ id: r.id, ...r.revoked }] : []));
  return {
    profile: opts.profile,
    revision: opts.revision,
    provable: opts.provable,
    rows,
    counts: countBoard(rows),
    revoked,
  };
}

/** A row whose marker names a revoked revision says so, first: "revoked: r2 (reason)". */
function withRevocation(row: BoardRow, revokedOf: ((revision: number) => string | undefined) | undefined): BoardRow {
  const reason = typeof row.marker === 'number' ? revokedOf?.(row.marker) : undefined;
  if (reason === undefined || typeof row.marker !== 'number') return row;
  const note = `revoked: r${row.marker} (${reason})`;
  return { ...row, revoked: { revision: row.marker, reason }, reason: row.reason ? `${note}; ${row.reason}` : note };
}

/** How an applied or claimed row is backed: its device's receipt, or the control plane's word. */
function rowProof(answer: Pick<BoardRow, 'state' | 'proof'>): Pick<BoardRow, 'proof'> {
  const proof = proofOf({ state: answer.state, ...(answer.proof === 'proven' ? { proven: true as const } : {}) });
  return proof ? { proof } : {};
}

/** The revision a pending device's marker names above the one checked (undefined: none such). */
function aheadCandidate(answer: { state: string; marker?: number | null }, revision: number): number | undefined {
  return answer.state === 'pending' && typeof answer.marker === 'number' && answer.marker > revision
    ? answer.marker
    : undefined;
}

/** Devices truly below `revision`: pending with a marker read that is absent or lower (converge brings exactly these there). */
export function behindRows(board: Pick<FleetBoard, 'rows' | 'revision'>): BoardRow[] {
  return board.rows.filter(
    (r) => r.state === 'pending' && 'marker' in r && (r.marker === null || (r.marker ?? 0) < board.revision),
  );
}

/** A verdict that no longer holds (expired, lifted by its recheck) is said beside the device's state. */
function withVerdictNote(row: BoardRow, standing: VerdictStanding | undefined): BoardRow {
  if (!standing || standing.kind === 'holds') return row;
  return { ...row, reason: row.reason ? `${standing.text}; ${row.reason}` : standing.text };
}

export interface DriftRow {
  id: string;
  /** The revision the device's marker claims (null: no marker). */
  marker: number | null;
  /** `ok` (marker's revision verifies), `drifted` (it no longer does), `no-marker`, `unreachable`, `refused` (host key, login or config not as pinned), `unknown-revision`. */
  status: 'ok' | 'drifted' | 'no-marker' | 'unreachable' | 'refused' | 'unknown-revision';
  detail?: string;
}

/**
 * Drift: for every target device with a marker, run the verify of the revision its marker names. A
 * device whose marker says rN while rN's verify fails has drifted: something changed it behind the
 * marker's back.
 */
export async function readDrift(opts: {
  inventory: Inventory;
  profile: string;
  scope: Record<string, string>;
  /** The verify command of a revision, or undefined when that revision is unknown here. */
  verifyOf: (revision: number) => string | undefined;
  probe?: ProbeOptions;
}): Promise<DriftRow[]> {
  const { targets } = partitionFleet(opts.inventory, opts.scope);
  const probe = opts.probe ?? {};
  return mapLimit(
    targets,
    probe.concurrency ?? 16,
    async (device): Promise<DriftRow> => ({
      id: device.id,
      ...(await channelOf(device, probe).drift(targetOf(device), {
        profile: opts.profile,
        verifyOf: opts.verifyOf,
        connectTimeoutMs: probe.connectTimeoutMs,
        commandTimeoutMs: probe.commandTimeoutMs,
      })),
    }),
  );
}

/**
 * The fleet's revision: the revision most reachable target devices' markers name (ties: the lower one,
 * the safer baseline), or null when no device has a marker. A canary kept on one device does not move it.
 */
export async function readFleetRevision(opts: {
  inventory: Inventory;
  profile: string;
  scope: Record<string, string>;
  probe?: ProbeOptions;
}): Promise<{ revision: number | null; markers: Record<string, number | null>; unreachable: string[] }> {
  const { targets } = partitionFleet(opts.inventory, opts.scope);
  const probe = opts.probe ?? {};
  const markers: Record<string, number | null> = {};
  const unreachable: string[] = [];
  await mapLimit(targets, probe.concurrency ?? 16, async (device) => {
    try {
      markers[device.id] = await channelOf(device, probe).readMarker(targetOf(device), opts.profile, probe);
    } catch {
      unreachable.push(device.id);
    }
  });
  return { revision: modeRevision(Object.values(markers)), markers, unreachable: unreachable.sort() };
}

export interface ReverifyOutcome {
  asked: string[];
  answered: string[];
  /** Asked but no fresh answer within the wait. */
  silent: string[];
  /** Not asked: its channel cannot ask it now (an agent not syncing, no twin). */
  offline: string[];
}

/**
 * `fleet status --reverify`: ask every device whose channel verifies on request (an agent, through its
 * twin) to verify again now, then wait at most `waitMs` for their answers. A device its channel reads
 * live (SSH: the board runs verify as it reads) is neither asked nor waited for.
 */
export async function reverifyFleet(
  devices: readonly Device[],
  deps: Pick<ChannelDeps, 'client' | 'twins'>,
  opts: { waitMs: number; concurrency?: number; now?: () => number; pollMs?: number },
): Promise<ReverifyOutcome> {
  const now = opts.now ?? Date.now;
  const offline: string[] = [];
  const asked: Device[] = [];
  await mapLimit(devices, opts.concurrency ?? 16, async (device) => {
    const answer = await channelFor(device, deps).askReverify(targetOf(device), { now });
    if (answer === 'asked') asked.push(device);
    else if (answer === 'offline') offline.push(device.id);
  });
  const deadline = now() + opts.waitMs;
  let waiting = [...asked];
  while (waiting.length && now() < deadline) {
    await new Promise((r) => setTimeout(r, opts.pollMs ?? 500));
    const answered = await mapLimit(waiting, opts.concurrency ?? 16, (device) =>
      channelFor(device, deps).reverified(targetOf(device), { now }),
    );
    waiting = waiting.filter((_, i) => !answered[i]);
  }
  const silent = new Set(waiting.map((d) => d.id));
  const ids = asked.map((d) => d.id).sort();
  return {
    asked: ids,
    answered: ids.filter((id) => !silent.has(id)),
    silent: [...silent].sort(),
    offline: offline.sort(),
  };
}

export function modeRevision(markers: Array<number | null>): number | null {
  const tally = new Map<number, number>();
  for (const m of markers) if (m !== null) tally.set(m, (tally.get(m) ?? 0) + 1);
  let best: number | null = null;
  for (const [rev, n] of tally)
    if (best === null || n > tally.get(best)! || (n === tally.get(best)! && rev < best)) best = rev;
  return best;
}
