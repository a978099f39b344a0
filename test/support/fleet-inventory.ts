import { writeFileSync } from 'node:fs';
import { stringify } from 'yaml';
import type { Fleet } from './fleet-sim';

/**
 * The inventory document of a simulated fleet: every device with its loopback port, pinned host key and
 * the fleet's client key file (a path: key material never leaves the disk).
 */
export function fleetInventory(fleet: Fleet, opts: { budgets?: Record<string, number>; runtimes?: string[] } = {}) {
  const pools: Record<string, { disruptionBudget: number }> = {};
  for (const d of fleet.devices) pools[d.spec.pool ?? 'default'] = { disruptionBudget: opts.budgets?.[d.spec.pool ?? 'default'] ?? 0.05 };
  return {
    pools,
    defaults: { user: fleet.user, ssh: { key: fleet.clientKeyPath }, runtimes: opts.runtimes ?? ['motd'] },
    devices: fleet.devices.map((d) => ({
      id: d.id,
      host: d.host,
      port: d.port,
      pool: d.spec.pool ?? 'default',
      class: d.spec.class ?? 'server',
      os: d.spec.os ?? 'linux',
      labels: d.spec.labels ?? {},
      updateClass: d.spec.updateClass ?? 'required',
      ssh: { hostKey: d.hostKeyFingerprint },
    })),
  };
}

export function writeFleetInventory(fleet: Fleet, path: string, opts: Parameters<typeof fleetInventory>[1] = {}): string {
  writeFileSync(path, stringify(fleetInventory(fleet, opts)));
  return path;
}
