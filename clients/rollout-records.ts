import type { Client } from '@temporalio/client';
import { sliceRecordsQuery, type RolloutStatus } from '../contracts/rollout';
import type { DeviceStatus } from '../core/rollout-state';
import type { SliceUnit } from '../core/rollout/sliced-records';

/**
 * A rollout's device records wherever they live: in its status, and with sliced records
 * (core/rollout/sliced-plan.ts) in its slices, read with each slice's `sliceRecords` query (a closed
 * slice answers too). Every caller that needs a device of a sliced phase — `status --device`, the device
 * list, a revert's changed devices, the board — reads them here.
 */

/** Slices queried at once. */
const CONCURRENCY = 8;

/** Each slice's devices, CONCURRENCY queries at a time, in the slices' order. */
async function slicesDevices(client: Client, units: readonly SliceUnit[]): Promise<DeviceStatus[][]> {
  const out: DeviceStatus[][] = [];
  for (let i = 0; i < units.length; i += CONCURRENCY)
    out.push(...(await Promise.all(units.slice(i, i + CONCURRENCY).map((u) => sliceDevices(client, u)))));
  return out;
}

/**
 * Records of slices that ended, by workflow id: an ended slice's records never change, and a process that
 * reads a rollout again and again (the board's live page) asks each slice once. Bounded by devices held.
 */
const ENDED_CACHE_DEVICES = 200_000;
const ended = new Map<string, DeviceStatus[]>();
let endedDevices = 0;

async function sliceDevices(client: Client, unit: SliceUnit): Promise<DeviceStatus[]> {
  const cached = ended.get(unit.workflowId);
  if (cached) return cached;
  const records = await client.workflow.getHandle(unit.workflowId).query(sliceRecordsQuery);
  const devices = records.states.map(([id, state, reason, proven]) => ({
    id,
    state,
    phase: unit.phase,
    ...(reason ? { reason } : {}),
    ...(proven ? { proven } : {}),
  }));
  // A slice's counts are in the status once it ended: from then on its records are final.
  if (unit.counts) {
    ended.set(unit.workflowId, devices);
    endedDevices += devices.length;
    for (const [id, held] of ended) {
      if (endedDevices <= ENDED_CACHE_DEVICES) break;
      ended.delete(id);
      endedDevices -= held.length;
    }
  }
  return devices;
}

/**
 * Every device with a record: the status's own, then each apply slice's, a rollback slice's state
 * replacing its apply slice's for the devices it put back. Devices of slices that never started are not
 * listed (the counts hold them, pending or not-started), nor those the plan settled (already at the
 * target, not-for-me: counts, and the plan record in the audit trail).
 */
export async function deviceRecords(client: Client, status: RolloutStatus): Promise<DeviceStatus[]> {
  const slices = status.slices ?? [];
  if (slices.length === 0) return status.devices;
  const byId = new Map(status.devices.map((d) => [d.id, d]));
  const applies = slices.filter((s) => s.mode === 'apply');
  for (const devices of await slicesDevices(client, applies)) for (const d of devices) byId.set(d.id, d);
  const rollbacks = slices.filter((s) => s.mode === 'rollback');
  const phaseOf = new Map(applies.map((s) => [s.workflowId, s.phase]));
  for (const [k, devices] of (await slicesDevices(client, rollbacks)).entries())
    for (const d of devices) byId.set(d.id, { ...d, phase: phaseOf.get(rollbacks[k]!.undoes ?? '') ?? d.phase });
  return [...byId.values()];
}

/** One device's record, or undefined when no record names it (see deviceRecords). */
export async function findDevice(client: Client, status: RolloutStatus, id: string): Promise<DeviceStatus | undefined> {
  const inline = status.devices.find((d) => d.id === id);
  const slices = status.slices ?? [];
  let found = inline;
  // A rollback slice's record is the later one: read the apply slices first, then the rollbacks.
  for (const mode of ['apply', 'rollback'] as const) {
    for (const s of slices.filter((u) => u.mode === mode)) {
      const hit = (await sliceDevices(client, s)).find((d) => d.id === id);
      if (hit) {
        found = mode === 'rollback' && found ? { ...hit, phase: found.phase } : hit;
        break;
      }
    }
  }
  return found;
}
