import type { Device } from '../core/inventory';
import type { PlanDevice } from '../core/planner';

/** Inventory devices as the planner sees them, with the revision each is at (null: unknown). */
export function planDevices(devices: readonly Device[], current: ReadonlyMap<string, number> = new Map()): PlanDevice[] {
  return devices.map((d) => ({ id: d.id, pool: d.pool, class: d.class, os: d.os, updateClass: d.updateClass, current: current.get(d.id) ?? null }));
}
