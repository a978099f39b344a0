import { devicesInScope } from '../core/gates';
import type { Device, Inventory } from '../core/inventory';
import type { DeviceTarget } from '../core/rollout-state';
import type { VerdictStanding } from '../core/node-down';
import { shellFor } from './device-steps';
import { connectDevice, TransportError, type DeviceSession, type ExecResult } from './transport';
import { mapLimit } from './map-limit';
import { agentBoardAnswer, agentDriftAnswer, type TwinReader } from './agent/board';

/**
 * Operator reads of the fleet, computed NOW on the devices (never from a stored flag): the fleet board,
 * drift and the fleet's current revision. Used directly by the CLI (an operator read, not a rollout) and
 * by the nightly canary's activities. One session per device, over the same transport as applies.
 */

/** The board states (seed §1): only `applied` counts as rolled out. */
export type BoardState = 'applied' | 'claimed' | 'pending' | 'not-for-me';

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
}

export interface BoardCounts {
  applied: number;
  claimed: number;
  pending: number;
  notForMe: number;
  total: number;
}

export interface FleetBoard {
  profile: string;
  revision: number;
  provable: boolean;
  rows: BoardRow[];
  counts: BoardCounts;
}

export interface ProbeOptions {
  concurrency?: number;
  connectTimeoutMs?: number;
  commandTimeoutMs?: number;
  /** How `transport: agent` devices are read: their twins' latest reports (activities/agent/board.ts). Without it they are pending. */
  twins?: TwinReader;
}

const NO_TWIN_READER = 'agent device: read from its twin, and no Temporal client was given to read it';

export function targetOf(device: Device): DeviceTarget {
  const { hostKey, knownHosts, key, agent, jumpHost } = device.ssh;
  return {
    id: device.id,
    host: device.host,
    port: device.port,
    user: device.user,
    pool: device.pool,
    class: device.class,
    transport: device.transport,
    ssh: { hostKey, knownHosts, key, agent, ...(jumpHost ? { jumpHost } : {}) },
  };
}


/** Which inventory devices a profile is for, and why the others are not-for-me. */
export function partitionFleet(inventory: Inventory, scope: Record<string, string>): { targets: Device[]; notForMe: Array<{ device: Device; reason: string }> } {
  const inScope = new Set(devicesInScope(scope, inventory.devices).map((d) => d.id));
  const targets: Device[] = [];
  const notForMe: Array<{ device: Device; reason: string }> = [];
  for (const device of inventory.devices) {
    if (!inScope.has(device.id)) notForMe.push({ device, reason: `out of scope (${Object.entries(scope).map(([k, v]) => `${k}=${v}`).join(', ')})` });
    else if (device.updateClass === 'left-behind') notForMe.push({ device, reason: 'left-behind' });
    else targets.push(device);
  }
  return { targets, notForMe };
}

function evidence(res: ExecResult): string {
  return (res.stdout || res.stderr).trim().slice(0, 400);
}

export function countBoard(rows: BoardRow[]): BoardCounts {
  const counts: BoardCounts = { applied: 0, claimed: 0, pending: 0, notForMe: 0, total: rows.length };
  for (const r of rows) {
    if (r.state === 'not-for-me') counts.notForMe++;
    else counts[r.state]++;
  }
  return counts;
}

/** Why a device gave no answer: a refusal (host key, login, config) is named as such, not as silence. */
function unreachableReason(err: unknown): string {
  if (err instanceof TransportError && !err.retryable) return `refused (${err.kind}): ${err.message}`;
  return `never answered: ${(err as Error).message}`;
}

/** Every target applied or not-for-me: the only state in which the board is green. */
export function boardIsGreen(board: Pick<FleetBoard, 'counts'>): boolean {
  return board.counts.claimed === 0 && board.counts.pending === 0;
}

/**
 * The fleet board for one revision: for each device in scope, run that revision's verify on it now.
 * Exit 0 of a provable verify is `applied`; of a non-provable one only `claimed`; anything else
 * (verify failed, never answered) is `pending`. Out-of-scope and left-behind devices are not-for-me.
 */
export async function readFleetBoard(opts: {
  inventory: Inventory;
  profile: string;
  scope: Record<string, string>;
  revision: number;
  verify: string;
  provable: boolean;
  probe?: ProbeOptions;
  /** Node-down verdicts as judged now (activities/node-down.ts): one that holds makes its device not-for-me, uncontacted. */
  verdicts?: ReadonlyMap<string, VerdictStanding>;
}): Promise<FleetBoard> {
  const partition = partitionFleet(opts.inventory, opts.scope);
  const holding = (d: Device) => opts.verdicts?.get(d.id)?.kind === 'holds';
  const targets = partition.targets.filter((d) => !holding(d));
  const notForMe = [...partition.notForMe, ...partition.targets.filter(holding).map((device) => ({ device, reason: opts.verdicts!.get(device.id)!.text }))];
  const probe = opts.probe ?? {};
  const probed = await mapLimit(targets, probe.concurrency ?? 16, async (device): Promise<BoardRow> => withVerdictNote(await probeBoardRow(device), opts.verdicts?.get(device.id)));
  async function probeBoardRow(device: Device): Promise<BoardRow> {
    const base = { id: device.id, pool: device.pool, class: device.class };
    if (device.transport === 'agent') {
      if (!probe.twins) return { ...base, state: 'pending', reason: NO_TWIN_READER };
      return { ...base, ...agentBoardAnswer(await probe.twins(device.id), opts.profile, opts.revision, opts.provable, Date.now()) };
    }
    let session: DeviceSession;
    try {
      session = await connectDevice(targetOf(device), { connectTimeoutMs: probe.connectTimeoutMs ?? 5_000 });
    } catch (err) {
      return { ...base, state: 'pending', reason: unreachableReason(err) };
    }
    try {
      const marker = await session.readMarker(opts.profile, { timeoutMs: probe.commandTimeoutMs ?? 30_000 });
      const res = await session.exec(shellFor({ profile: opts.profile, revision: opts.revision }, opts.verify), { timeoutMs: probe.commandTimeoutMs ?? 30_000 });
      if (res.code === 0) {
        return { ...base, state: opts.provable ? 'applied' : 'claimed', marker, evidence: evidence(res), ...(opts.provable ? {} : { reason: 'verify exits 0 but cannot prove the revision (non-provable)' }) };
      }
      // No marker at all: wavegate never brought this device anywhere — a signal, not an empty cell.
      return { ...base, state: 'pending', marker, reason: marker !== null ? `verify exited ${res.code} (marker says r${marker})` : `verify exited ${res.code} (never reported: no revision marker)`, evidence: evidence(res) };
    } catch (err) {
      return { ...base, state: 'pending', reason: `never answered: ${(err as Error).message}` };
    } finally {
      session.close();
    }
  }
  const rows = [...probed, ...notForMe.map(({ device, reason }): BoardRow => ({ id: device.id, pool: device.pool, class: device.class, state: 'not-for-me', reason }))];
  const order = new Map(opts.inventory.devices.map((d, i) => [d.id, i]));
  rows.sort((a, b) => order.get(a.id)! - order.get(b.id)!);
  return { profile: opts.profile, revision: opts.revision, provable: opts.provable, rows, counts: countBoard(rows) };
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
  /** `ok` (marker's revision verifies), `drifted` (it no longer does), `no-marker`, `unreachable`, `unknown-revision`. */
  status: 'ok' | 'drifted' | 'no-marker' | 'unreachable' | 'unknown-revision';
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
  return mapLimit(targets, probe.concurrency ?? 16, async (device): Promise<DriftRow> => {
    if (device.transport === 'agent') {
      if (!probe.twins) return { id: device.id, marker: null, status: 'unreachable', detail: NO_TWIN_READER };
      return { id: device.id, ...agentDriftAnswer(await probe.twins(device.id), opts.profile, Date.now()) };
    }
    let session: DeviceSession;
    try {
      session = await connectDevice(targetOf(device), { connectTimeoutMs: probe.connectTimeoutMs ?? 5_000 });
    } catch (err) {
      return { id: device.id, marker: null, status: 'unreachable', detail: (err as Error).message };
    }
    try {
      const marker = await session.readMarker(opts.profile, { timeoutMs: probe.commandTimeoutMs ?? 30_000 });
      if (marker === null) return { id: device.id, marker, status: 'no-marker' };
      const verify = opts.verifyOf(marker);
      if (verify === undefined) return { id: device.id, marker, status: 'unknown-revision', detail: `r${marker} is not a known revision of ${opts.profile}` };
      const res = await session.exec(shellFor({ profile: opts.profile, revision: marker }, verify), { timeoutMs: probe.commandTimeoutMs ?? 30_000 });
      return res.code === 0 ? { id: device.id, marker, status: 'ok' } : { id: device.id, marker, status: 'drifted', detail: `r${marker} verify exited ${res.code}: ${evidence(res) || '(no output)'}` };
    } catch (err) {
      return { id: device.id, marker: null, status: 'unreachable', detail: (err as Error).message };
    } finally {
      session.close();
    }
  });
}

/**
 * The fleet's revision: the revision most reachable target devices' markers name (ties: the lower one,
 * the safer baseline), or null when no device has a marker. A canary kept on one device does not move it.
 */
export async function readFleetRevision(opts: { inventory: Inventory; profile: string; scope: Record<string, string>; probe?: ProbeOptions }): Promise<{ revision: number | null; markers: Record<string, number | null>; unreachable: string[] }> {
  const { targets } = partitionFleet(opts.inventory, opts.scope);
  const probe = opts.probe ?? {};
  const markers: Record<string, number | null> = {};
  const unreachable: string[] = [];
  await mapLimit(targets, probe.concurrency ?? 16, async (device) => {
    if (device.transport === 'agent') {
      const answer = probe.twins ? agentDriftAnswer(await probe.twins(device.id).catch(() => null), opts.profile, Date.now()) : undefined;
      if (answer && answer.status !== 'unreachable') markers[device.id] = answer.marker;
      else unreachable.push(device.id);
      return;
    }
    try {
      const session = await connectDevice(targetOf(device), { connectTimeoutMs: probe.connectTimeoutMs ?? 5_000 });
      try {
        markers[device.id] = await session.readMarker(opts.profile, { timeoutMs: probe.commandTimeoutMs ?? 30_000 });
      } finally {
        session.close();
      }
    } catch {
      unreachable.push(device.id);
    }
  });
  return { revision: modeRevision(Object.values(markers)), markers, unreachable: unreachable.sort() };
}

export function modeRevision(markers: Array<number | null>): number | null {
  const tally = new Map<number, number>();
  for (const m of markers) if (m !== null) tally.set(m, (tally.get(m) ?? 0) + 1);
  let best: number | null = null;
  for (const [rev, n] of tally) if (best === null || n > tally.get(best)! || (n === tally.get(best)! && rev < best)) best = rev;
  return best;
}
