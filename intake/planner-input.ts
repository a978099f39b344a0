import type { Device } from '../core/inventory';
import type { NodeDownMark } from '../core/node-down';
import type { PlanDevice } from '../core/planner';

/** Inventory devices as the planner sees them, with the revision each is at (null: unknown) and any node-down verdict. */
export function planDevices(
  devices: readonly Device[],
  current: ReadonlyMap<string, number> = new Map(),
  nodeDown: ReadonlyMap<string, NodeDownMark> = new Map(),
): PlanDevice[] {
  return devices.map((d) => {
    const mark = nodeDown.get(d.id);
    return {
      id: d.id,
      pool: d.pool,
      class: d.class,
      os: d.os,
      updateClass: d.updateClass,
      current: current.get(d.id) ?? null,
      ...(mark ? { nodeDown: mark } : {}),
    };
  });
}
