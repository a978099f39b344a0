/**
 * core/inventory.ts as it was at 00a78b0, before issue 26 made it faster: the oracle the current one is
 * compared with (test/unit/core/before-issue-26.test.ts). Never edit it to follow a change: whatever the
 * input, the current one must give what this one gives (a plan that differs stops recorded histories replaying).
 */
import type { z } from 'zod';
import { isReservedName, ownValue, RESERVED_NAME_RULE } from '../../../core/own-keys';
import {
  formatPath,
  invalidFields,
  parseWith,
  PRINTABLE,
  PRINTABLE_RULE,
  type FieldProblem,
} from '../../../core/validation';
import { lazySchema, zod } from '../../../core/lazy-schema';

/**
 * The inventory: the membership source for a fleet (docs/formats.md). Devices inherit `defaults`; each belongs
 * to a pool whose disruption budget bounds how many of its devices are in flight at once.
 */
const ID = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;

/** The most devices one inventory (and so one phase, or a minimum sample) may hold. */
export const MAX_DEVICES = 100_000;
export const MAX_PHASE_DEVICES = MAX_DEVICES;

/** A name that is also a record key or a Map key somewhere: the ID rule, and never a reserved name. */
function named(rule: RegExp, message: string) {
  return zod()
    .string()
    .regex(rule, message)
    .refine((name) => !isReservedName(name), RESERVED_NAME_RULE);
}

/** Device classes, OS names and runtime names: plain identifiers (no path, shell or whitespace syntax). */
export const Identifier = lazySchema(() =>
  named(
    /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/,
    'must be 1-64 letters, digits, ".", "_" or "-", starting with a letter or digit',
  ),
);
export const PoolName = lazySchema(() => named(ID, 'must be a name of 1-128 letters, digits, ".", "_", ":" or "-"'));

/**
 * A host name or address as ssh takes it: no leading "-" (it would read as an option to a command
 * line), no whitespace, control characters or shell syntax.
 */
const Host = lazySchema(() =>
  zod()
    .string()
    .regex(
      /^[A-Za-z0-9_.:%][A-Za-z0-9_.:%-]{0,252}$/,
      'must be a host name or IP address (letters, digits, ".", ":", "-", "_", "%"; not starting with "-")',
    ),
);
/** A login name: the same rules (letters, digits, ".", "_", "-", "@"; no leading "-"). */
const User = lazySchema(() =>
  zod()
    .string()
    .regex(
      /^[A-Za-z0-9_.][A-Za-z0-9_.@-]{0,63}$/,
      'must be a login name of 1-64 letters, digits, ".", "_", "-" or "@" (not starting with "-")',
    ),
);
/** A file on the worker (a key or a known_hosts file): one line, bounded. */
const WorkerPath = lazySchema(() => zod().string().min(1).max(4096).regex(PRINTABLE, PRINTABLE_RULE));
const LabelKey = lazySchema(() =>
  zod()
    .string()
    .min(1)
    .max(128)
    .regex(PRINTABLE, PRINTABLE_RULE)
    .refine((key) => !isReservedName(key), RESERVED_NAME_RULE),
);
const LabelValue = lazySchema(() => zod().string().max(256).regex(PRINTABLE, PRINTABLE_RULE));

export const UpdateClass = lazySchema(() => zod().enum(['required', 'best-effort', 'left-behind']));
export type UpdateClass = z.infer<typeof UpdateClass>;
export const Transport = lazySchema(() => zod().enum(['ssh', 'agent']));

/**
 * An agent device's identity key pin (`transport: agent`): the Ed25519 public key its `wavegate agent`
 * signs every gateway request with (`wavegate agent enroll` prints it).
 */
export const AgentKey = lazySchema(() =>
  zod()
    .string()
    .regex(
      /^ed25519:[A-Za-z0-9+/]{43}=$/,
      'must be "ed25519:<base64 of the 32-byte public key>" (as `wavegate agent enroll` prints it)',
    ),
);

export const SshSettings = lazySchema(() =>
  zod()
    .object({
      /** Pinned host key: OpenSSH fingerprint `SHA256:...`. */
      hostKey: zod()
        .string()
        .regex(/^SHA256:[A-Za-z0-9+/]{43}$/, 'must be an OpenSSH fingerprint "SHA256:<43 base64 chars>"')
        .optional(),
      /** Or a known_hosts file to pin against. */
      knownHosts: WorkerPath.optional(),
      /** Private key file (never its contents: keys stay on the worker's disk). */
      key: WorkerPath.optional(),
      /** Use the SSH agent at $SSH_AUTH_SOCK instead of a key file. */
      agent: zod().boolean().optional(),
      jumpHost: zod()
        .object({
          host: Host,
          port: zod().number().int().min(1).max(65535).default(22),
          user: User,
          hostKey: zod()
            .string()
            .regex(/^SHA256:[A-Za-z0-9+/]{43}$/)
            .optional(),
        })
        .strict()
        .optional(),
    })
    .strict(),
);
export type SshSettings = z.infer<typeof SshSettings>;

/** A device's fields, built when the inventory schema first is (see lazySchema). */
const deviceFields = () => ({
  host: Host,
  port: zod().number().int().min(1, 'must be a TCP port 1-65535').max(65535, 'must be a TCP port 1-65535'),
  user: User,
  pool: PoolName,
  class: Identifier,
  os: Identifier,
  labels: zod()
    .record(LabelKey, LabelValue)
    .refine((labels) => Object.keys(labels).length <= 64, 'at most 64 labels'),
  updateClass: UpdateClass,
  runtimes: zod().array(Identifier).max(64, 'at most 64 runtimes'),
  transport: Transport,
  ssh: SshSettings,
  agentKey: AgentKey,
});

export const DeviceInput = lazySchema(() =>
  zod()
    .object({ id: named(ID, 'must be 1-128 letters, digits, ".", "_", ":" or "-"') })
    .extend(
      Object.fromEntries(Object.entries(deviceFields()).map(([k, v]) => [k, v.optional()])) as {
        [K in keyof ReturnType<typeof deviceFields>]: z.ZodOptional<ReturnType<typeof deviceFields>[K]>;
      },
    )
    .strict(),
);

const Budget = lazySchema(() =>
  zod().union([
    zod()
      .number()
      .min(0, 'must be a fraction 0-1 or a percentage like "5%"')
      .max(1, 'must be a fraction 0-1 or a percentage like "5%"'),
    zod()
      .string()
      .regex(/^\d+(\.\d+)?%$/, 'must be a fraction 0-1 or a percentage like "5%"'),
  ]),
);

export const InventoryInput = lazySchema(() =>
  zod()
    .object({
      pools: zod()
        .record(PoolName, zod().object({ disruptionBudget: Budget.optional() }).strict())
        .default({}),
      defaults: DeviceInput.omit({ id: true }).partial().default({}),
      devices: zod()
        .array(DeviceInput)
        .min(1, 'an inventory needs at least one device')
        .max(MAX_DEVICES, `at most ${MAX_DEVICES} devices`),
    })
    .strict(),
);

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
  /** `transport: agent` only (required there): the pin of the device's identity key, read by the gateway. */
  agentKey?: string;
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

/**
 * `agentKey` is required for an agent device and refused for any other (a pin nothing checks is a
 * false comfort), and one key names one device: a request signed by it must say which twin it may reach.
 */
function agentKeyProblems(
  index: number,
  transport: string,
  agentKey: string | undefined,
  seen: Map<string, number>,
): FieldProblem[] {
  const path = `devices[${index}].agentKey`;
  if (transport !== 'agent')
    return agentKey === undefined
      ? []
      : [{ path, value: agentKey, message: `only for transport: agent devices (this one is ${transport})` }];
  if (agentKey === undefined)
    return [
      {
        path,
        value: undefined,
        message: 'required for transport: agent (the pin `wavegate agent enroll` prints on the device)',
      },
    ];
  const first = seen.get(agentKey);
  if (first !== undefined)
    return [
      {
        path,
        value: agentKey,
        message: `the same key as devices[${first}]; every agent device has its own identity key`,
      },
    ];
  seen.set(agentKey, index);
  return [];
}

/** Validate a parsed inventory document and resolve defaults. `source` names the file in errors. */
export function parseInventory(data: unknown, source: string): Inventory {
  const input = parseWith(InventoryInput, data, source);
  const problems: FieldProblem[] = [];
  // Ids are unique ignoring case: they name directories, workflow ids and audit records, some of them
  // on case-insensitive file systems, and "WEB-01" next to "web-01" is a typo, not a second device.
  const seen = new Map<string, number>();
  const agentKeys = new Map<string, number>();
  const devices: Device[] = input.devices.map((d, i) => {
    const first = seen.get(d.id.toLowerCase());
    if (first !== undefined) {
      const same = input.devices[first]!.id === d.id;
      problems.push({
        path: `devices[${i}].id`,
        value: d.id,
        message: `duplicate device id; every id must be unique${same ? '' : ' ignoring case'} (devices[${first}] is ${JSON.stringify(input.devices[first]!.id)})`,
      });
    } else seen.set(d.id.toLowerCase(), i);
    const merged = { ...input.defaults, ...d, ssh: { ...input.defaults.ssh, ...d.ssh } };
    const agent = merged.transport === 'agent';
    // An agent device is never dialled: it pulls through the gateway, so it needs no host or login.
    for (const field of agent ? (['pool'] as const) : (['host', 'user', 'pool'] as const)) {
      if (!merged[field])
        problems.push({
          path: `devices[${i}].${field}`,
          value: undefined,
          message: 'required (set it on the device or in defaults)',
        });
    }
    problems.push(...agentKeyProblems(i, merged.transport ?? 'ssh', merged.agentKey, agentKeys));
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
      ...(agent && merged.agentKey ? { agentKey: merged.agentKey } : {}),
    };
  });
  for (const [name, pool] of Object.entries(input.pools)) {
    if (budgetFraction(pool.disruptionBudget) > 1) {
      problems.push({
        path: formatPath(['pools', name, 'disruptionBudget']),
        value: pool.disruptionBudget,
        message: 'must be a fraction 0-1 or a percentage like "5%" (at most 100%)',
      });
    }
  }
  if (problems.length) invalidFields(source, problems);
  const pools: Record<string, Pool> = {};
  for (const [name, pool] of Object.entries(input.pools))
    pools[name] = { name, disruptionBudget: budgetFraction(pool.disruptionBudget) };
  for (const device of devices)
    if (!ownValue(pools, device.pool))
      pools[device.pool] = { name: device.pool, disruptionBudget: DEFAULT_DISRUPTION_BUDGET };
  return { pools, devices };
}
