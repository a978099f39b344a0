import { z } from 'zod';
import { invalidFields, parseWith, type FieldProblem } from './validation';

/**
 * The inventory: the membership source for a fleet (docs/formats.md). Devices inherit `defaults`; each belongs
 * to a pool whose disruption budget bounds how many of its devices are in flight at once.
 */
const ID = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;

export const UpdateClass = z.enum(['required', 'best-effort', 'left-behind']);
export type UpdateClass = z.infer<typeof UpdateClass>;
export const Transport = z.enum(['ssh', 'agent']);

export const SshSettings = z
  .object({
    /** Pinned host key: OpenSSH fingerprint `SHA256:...`. */
    hostKey: z.string().regex(/^SHA256:[A-Za-z0-9+/]{43}$/, 'must be an OpenSSH fingerprint "SHA256:<43 base64 chars>"').optional(),
    /** Or a known_hosts file to pin against. */
    knownHosts: z.string().min(1).optional(),
    /** Private key file (never its contents: keys stay on the worker's disk). */
    key: z.string().min(1).optional(),
    /** Use the SSH agent at $SSH_AUTH_SOCK instead of a key file. */
    agent: z.boolean().optional(),
    jumpHost: z
      .object({
        host: z.string().min(1),
        port: z.number().int().min(1).max(65535).default(22),
        user: z.string().min(1),
        hostKey: z.string().regex(/^SHA256:[A-Za-z0-9+/]{43}$/).optional(),
      })
      .strict()
      .optional(),
  })
  .strict();
export type SshSettings = z.infer<typeof SshSettings>;

const DeviceFields = {
  host: z.string().min(1),
  port: z.number().int().min(1, 'must be a TCP port 1-65535').max(65535, 'must be a TCP port 1-65535'),
  user: z.string().min(1),
  pool: z.string().regex(ID, 'must be a name of letters, digits, ".", "_", ":" or "-"'),
  class: z.string().min(1),
  os: z.string().min(1),
  labels: z.record(z.string(), z.string()),
  updateClass: UpdateClass,
  runtimes: z.array(z.string().min(1)),
  transport: Transport,
  ssh: SshSettings,
};

export const DeviceInput = z
  .object({ id: z.string().regex(ID, 'must be 1-128 letters, digits, ".", "_", ":" or "-"') })
  .extend(Object.fromEntries(Object.entries(DeviceFields).map(([k, v]) => [k, v.optional()])) as {
    [K in keyof typeof DeviceFields]: z.ZodOptional<(typeof DeviceFields)[K]>;
  })
  .strict();

const Budget = z.union([
  z.number().min(0, 'must be a fraction 0-1 or a percentage like "5%"').max(1, 'must be a fraction 0-1 or a percentage like "5%"'),
  z.string().regex(/^\d+(\.\d+)?%$/, 'must be a fraction 0-1 or a percentage like "5%"'),
]);

export const InventoryInput = z
  .object({
    pools: z.record(z.string().regex(ID), z.object({ disruptionBudget: Budget.optional() }).strict()).default({}),
    defaults: DeviceInput.omit({ id: true }).partial().default({}),
    devices: z.array(DeviceInput).min(1, 'an inventory needs at least one device'),
  })
  .strict();

export interface Device {
  id: string;
  host: string;
  port: number;
  user: string;
  pool: string;
  class: string;
  os: string;
  labels: Record<string, string>;
  updateClass: UpdateClass;
  runtimes: string[];
  transport: z.infer<typeof Transport>;
  ssh: SshSettings;
}

export interface Pool {
  name: string;
  /** Fraction of the pool allowed in flight at once (default 5%; at least one device). */
  disruptionBudget: number;
}

export interface Inventory {
  pools: Record<string, Pool>;
  devices: Device[];
}

export const DEFAULT_DISRUPTION_BUDGET = 0.05;

function budgetFraction(value: number | string | undefined): number {
  if (value === undefined) return DEFAULT_DISRUPTION_BUDGET;
  return typeof value === 'number' ? value : Number(value.slice(0, -1)) / 100;
}

/** Validate a parsed inventory document and resolve defaults. `source` names the file in errors. */
export function parseInventory(data: unknown, source: string): Inventory {
  const input = parseWith(InventoryInput, data, source);
  const problems: FieldProblem[] = [];
  const seen = new Set<string>();
  const devices: Device[] = input.devices.map((d, i) => {
    if (seen.has(d.id)) problems.push({ path: `devices[${i}].id`, value: d.id, message: 'duplicate device id; every id must be unique' });
    seen.add(d.id);
    const merged = { ...input.defaults, ...d, ssh: { ...input.defaults.ssh, ...d.ssh } };
    for (const field of ['host', 'user', 'pool'] as const) {
      if (!merged[field]) problems.push({ path: `devices[${i}].${field}`, value: undefined, message: 'required (set it on the device or in defaults)' });
    }
    return {
      id: d.id,
      host: merged.host ?? '',
      port: merged.port ?? 22,
      user: merged.user ?? '',
      pool: merged.pool ?? '',
      class: merged.class ?? 'server',
      os: merged.os ?? 'linux',
      labels: merged.labels ?? {},
      updateClass: merged.updateClass ?? 'required',
      runtimes: merged.runtimes ?? [],
      transport: merged.transport ?? 'ssh',
      ssh: merged.ssh,
    };
  });
  for (const [name, pool] of Object.entries(input.pools)) {
    if (budgetFraction(pool.disruptionBudget) > 1) {
      problems.push({ path: `pools.${name}.disruptionBudget`, value: pool.disruptionBudget, message: 'must be a fraction 0-1 or a percentage like "5%" (at most 100%)' });
    }
  }
  if (problems.length) invalidFields(source, problems);
  const pools: Record<string, Pool> = {};
  for (const [name, pool] of Object.entries(input.pools)) pools[name] = { name, disruptionBudget: budgetFraction(pool.disruptionBudget) };
  for (const device of devices) pools[device.pool] ??= { name: device.pool, disruptionBudget: DEFAULT_DISRUPTION_BUDGET };
  return { pools, devices };
}
