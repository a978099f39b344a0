import type { z } from 'zod';
import { isReservedName, ownValue, RESERVED_NAME_RULE } from './own-keys';
import { documentProblems } from './document-bounds';
import {
  formatPath,
  invalidFields,
  parseWith,
  PRINTABLE,
  PRINTABLE_RULE,
  shapeProblem,
  type FieldProblem,
} from './validation';
import { lazySchema, zod } from './lazy-schema';

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

/**
 * The only command an inventory may name for an SSH device's receipt signer: the signer itself (a file named
 * wavegate-sign-receipt, by absolute path, run directly, by sudo -n or by sh) and at most its state directory. The
 * inventory is not signed content, so it may choose which signer runs, never what else runs on the device.
 */
export const RECEIPT_COMMAND =
  /^(sudo -n )?((\/bin\/)?sh )?\/[A-Za-z0-9._/+-]*\/wavegate-sign-receipt( \/[A-Za-z0-9._/+-]+)?$/;
export const RECEIPT_COMMAND_RULE =
  'must be the signer by absolute path, optionally after "sudo -n" or "sh", and at most its state directory ("sudo -n /usr/local/sbin/wavegate-sign-receipt")';

/**
 * An SSH device's receipt key (`receipts`): the public half of the key wavegate-receipt-setup made on the device
 * (root's, unreadable by the login), and the command that signs with it there (docs/operations.md).
 */
export const ReceiptSettings = lazySchema(() =>
  zod()
    .object({
      // The type and the key alone (no comment), its 51-byte wire form spelled out: the string "ssh-ed25519" and a
      // 32-byte key (AAAAC3NzaC1lZDI1NTE5AAAAI and A-P are those lengths and that name; core/receipt.ts sshEd25519Key
      // reads the same lines).
      key: zod()
        .string()
        .regex(
          /^ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI[A-P][A-Za-z0-9+/]{42}$/,
          'must be an OpenSSH ssh-ed25519 key line "ssh-ed25519 AAAA…" with no comment (as wavegate-receipt-setup prints it)',
        ),
      /** Run in the login's shell with the claim on its input (default: sudo -n /usr/local/sbin/wavegate-sign-receipt). */
      command: zod().string().min(1).max(1024).regex(RECEIPT_COMMAND, RECEIPT_COMMAND_RULE).optional(),
    })
    .strict(),
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
  receipts: ReceiptSettings,
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

/** The inventory's top level, with `devices` a list of what each device must be. */
function inventoryObject<D extends z.ZodType>(device: D) {
  return zod()
    .object({
      pools: zod()
        .record(PoolName, zod().object({ disruptionBudget: Budget.optional() }).strict())
        .default({}),
      defaults: DeviceInput.omit({ id: true }).partial().default({}),
      devices: zod()
        .array(device)
        .min(1, 'an inventory needs at least one device')
        .max(MAX_DEVICES, `at most ${MAX_DEVICES} devices`),
    })
    .strict();
}

export const InventoryInput = lazySchema(() => inventoryObject(DeviceInput));

/** The top level alone (the devices are only counted): parseInventory then validates them one by one. */
const InventoryTopLevel = lazySchema(() => inventoryObject(zod().unknown()));

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
  /** `transport: ssh` only: the device's receipt key and signing command (ReceiptSettings). */
  receipts?: { key: string; command?: string };
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

/**
 * `receipts` is for SSH devices only (an agent signs its receipts with its identity key, `agentKey`), and one key
 * names one device: a device that could sign another's receipts would make that device's history its own word.
 */
function receiptKeyProblems(
  index: number,
  transport: string,
  receipts: { key: string } | undefined,
  seen: Map<string, number>,
): FieldProblem[] {
  if (!receipts) return [];
  const path = `devices[${index}].receipts`;
  if (transport !== 'ssh')
    return [
      {
        path,
        value: receipts.key,
        message: `only for transport: ssh devices (this one is ${transport}: it signs its receipts with its agentKey)`,
      },
    ];
  const first = seen.get(receipts.key);
  if (first !== undefined)
    return [
      {
        path: `${path}.key`,
        value: receipts.key,
        message: `the same key as devices[${first}]; every device has its own receipt key (wavegate-receipt-setup makes one)`,
      },
    ];
  seen.set(receipts.key, index);
  return [];
}

/**
 * The inventory document checked by InventoryInput, its top level first and then device by device, each
 * device's checked copy made into its Device at once: a 100,000-device inventory never has a second copy
 * of every device alive beside the document and the result. Any problem: the whole document is checked
 * again by InventoryInput itself, for exactly the errors it gives (every field named, in its order).
 */
function checkedInventory(
  data: unknown,
  source: string,
  device: (input: z.output<typeof DeviceInput>, index: number, defaults: DeviceDefaults) => Device,
): { pools: z.output<typeof InventoryInput>['pools']; devices: Device[] } {
  const whole = (): never => {
    parseWith(InventoryInput, data, source);
    // parseWith refused the document before: it cannot pass it now.
    throw new Error(`${source}: the inventory passed as a whole but not device by device`);
  };
  const shape = documentProblems(data);
  if (shape.length) invalidFields(source, shape.map(shapeProblem));
  const checkedTop = InventoryTopLevel.safeParse(data);
  if (!checkedTop.success) return whole();
  const top = checkedTop.data;
  const devices: Device[] = [];
  for (const [i, raw] of top.devices.entries()) {
    const checked = DeviceInput.safeParse(raw);
    if (!checked.success) return whole();
    devices.push(device(checked.data, i, top.defaults));
  }
  return { pools: top.pools, devices };
}

type DeviceDefaults = z.output<typeof InventoryInput>['defaults'];

/** Validate a parsed inventory document and resolve defaults. `source` names the file in errors. */
export function parseInventory(data: unknown, source: string): Inventory {
  const problems: FieldProblem[] = [];
  // Ids are unique ignoring case: they name directories, workflow ids and audit records, some of them
  // on case-insensitive file systems, and "WEB-01" next to "web-01" is a typo, not a second device.
  const seen = new Map<string, { index: number; id: string }>();
  const agentKeys = new Map<string, number>();
  const receiptKeys = new Map<string, number>();
  const input = checkedInventory(data, source, (d, i, defaults) => {
    const first = seen.get(d.id.toLowerCase());
    if (first !== undefined) {
      const same = first.id === d.id;
      problems.push({
        path: `devices[${i}].id`,
        value: d.id,
        message: `duplicate device id; every id must be unique${same ? '' : ' ignoring case'} (devices[${first.index}] is ${JSON.stringify(first.id)})`,
      });
    } else seen.set(d.id.toLowerCase(), { index: i, id: d.id });
    const merged = { ...defaults, ...d, ssh: { ...defaults.ssh, ...d.ssh } };
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
    problems.push(...receiptKeyProblems(i, merged.transport ?? 'ssh', merged.receipts, receiptKeys));
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
      ...(!agent && merged.receipts ? { receipts: merged.receipts } : {}),
    };
  });
  const { devices } = input;
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
