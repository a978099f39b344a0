import { writeFileSync } from 'node:fs';
import { stringify } from 'yaml';
import type { SimDeviceSpec } from './device';

/**
 * What an inventory needs of a fleet. A Fleet has it; so do the benchmark's shards, whose devices live
 * in other processes (only their addresses and host keys come back).
 */
export interface FleetAddresses {
  user: string;
  clientKeyPath: string;
  devices: Array<{ id: string; host: string; port: number; hostKeyFingerprint: string; spec: SimDeviceSpec }>;
}

/**
 * The inventory document of a simulated fleet: every device with its loopback port, pinned host key and
 * the fleet's client key file (a path: key material never leaves the disk).
 */
export function fleetInventory(
  fleet: FleetAddresses,
  opts: { budgets?: Record<string, number>; runtimes?: string[] } = {},
) {
  const pools: Record<string, { disruptionBudget: number }> = {};
  for (const d of fleet.devices)
    pools[d.spec.pool ?? 'default'] = { disruptionBudget: opts.budgets?.[d.spec.pool ?? 'default'] ?? 0.05 };
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

export function writeFleetInventory(
  fleet: FleetAddresses,
  path: string,
  opts: Parameters<typeof fleetInventory>[1] = {},
): string {
  writeFileSync(path, stringify(fleetInventory(fleet, opts)));
  return path;
}
