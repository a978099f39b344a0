import { resolve } from 'node:path';
import type { Client } from '@temporalio/client';
import type { Command } from 'commander';
import { judgeVerdicts } from '../intake/node-down-recheck';
import { markOf } from '../core/node-down';
import type { RolloutInput } from '../core/rollout/input';
import { loadRolloutInventory } from '../intake/inventory';
import { bearerToken, checkInventoryUrl, fetchInventory, parseInventoryDeadline } from '../intake/inventory-url';
import { WavegateError } from '../core/errors';
import type { Inventory } from '../core/inventory';
import type { NodeDownMark } from '../core/node-down';
import { storeMembership } from '../clients/membership';
import { SLICED_RECORDS_FROM, slicedSliceSize } from '../core/rollout/sliced-plan';

/** The inventory flags of start, plan, converge and revert. */
export interface InventoryFlags {
  inventory?: string;
  inventoryUrl?: string;
  inventoryTokenEnv?: string;
  inventoryDeadline?: string;
  inventoryOnWorker?: boolean;
}

export function withInventoryOptions(
  cmd: Command,
  fileHelp = 'inventory file, read and validated here, then stored in a membership entity for the workers',
): Command {
  return cmd
    .option('--inventory <fleet.yaml>', fileHelp)
    .option(
      '--inventory-url <url>',
      'read the inventory from a device registry serving JSON pages { devices, next } (docs/formats.md "Inventory over HTTP")',
    )
    .option(
      '--inventory-token-env <NAME>',
      'with --inventory-url: send the bearer token held in this environment variable (never put it in the URL)',
    )
    .option(
      '--inventory-deadline <duration>',
      'with --inventory-url: the whole listing, every page, within this (default 120s; each page within 15s)',
    )
    .option(
      '--inventory-on-worker',
      'with --inventory: the worker reads the file from its own disk at snapshot time (and runs the node-down rechecks there), as before the membership entity',
    );
}

export interface ReadInventory {
  inventory: Inventory;
  /** The file path, or the URL (without credentials): names the inventory in errors and in the rollout. */
  inventoryPath: string;
  kind: 'file' | 'url';
  onWorker: boolean;
}

function flagConflict(field: string, message: string): never {
  throw new WavegateError('INVALID_INPUT', `${field}: ${message}`, { field });
}

/**
 * The inventory flags checked on their own, reading nothing: conflicts, the URL, the token's variable
 * (INVALID_INPUT, exit 2). For a command that must ask Temporal before it knows what to read (revert).
 */
export function checkInventoryFlags(opts: InventoryFlags): void {
  if (opts.inventory && opts.inventoryUrl)
    flagConflict('--inventory-url', 'give --inventory or --inventory-url, not both');
  if (opts.inventoryTokenEnv && !opts.inventoryUrl) flagConflict('--inventory-token-env', 'only with --inventory-url');
  if (opts.inventoryDeadline !== undefined && !opts.inventoryUrl)
    flagConflict('--inventory-deadline', 'only with --inventory-url');
  if (opts.inventoryOnWorker && opts.inventoryUrl)
    flagConflict('--inventory-on-worker', 'only with --inventory <file> (the worker reads a path on its own disk)');
  if (opts.inventoryUrl) {
    checkInventoryUrl(opts.inventoryUrl);
    bearerToken({ tokenEnv: opts.inventoryTokenEnv });
    parseInventoryDeadline(opts.inventoryDeadline);
  }
}

/** The inventory the flags name, read and validated now (INVALID_INPUT, exit 2, before Temporal is contacted). */
export async function readInventoryFlags(opts: InventoryFlags, fallbackPath?: string): Promise<ReadInventory> {
  checkInventoryFlags(opts);
  if (opts.inventoryUrl) {
    const inventory = await fetchInventory(opts.inventoryUrl, {
      tokenEnv: opts.inventoryTokenEnv,
      deadlineMs: parseInventoryDeadline(opts.inventoryDeadline),
    });
    const url = new URL(opts.inventoryUrl);
    return { inventory, inventoryPath: `${url.origin}${url.pathname}`, kind: 'url', onWorker: false };
  }
  const path = opts.inventory ?? fallbackPath;
  if (!path) flagConflict('--inventory', 'an inventory is required: --inventory <file> or --inventory-url <url>');
  if (/^https?:\/\//.test(path))
    flagConflict(
      '--inventory',
      `${JSON.stringify(path)} is a URL: the rollout read it with --inventory-url; give --inventory-url again (or a file)`,
    );
  return {
    inventory: loadRolloutInventory(path),
    inventoryPath: path,
    kind: 'file',
    onWorker: !!opts.inventoryOnWorker,
  };
}

/**
 * The rollout input with its membership stored in the entity, unless `--inventory-on-worker`. A file
 * inventory's node-down verdicts (beside it) are judged here, on the operator's host, now: each
 * device's standing is stored with its record, and no worker runs a recheck for this rollout.
 */
export async function withMembership(
  client: Client,
  taskQueue: string,
  input: RolloutInput,
  read: ReadInventory,
  by: string,
): Promise<RolloutInput> {
  if (read.onWorker) return input;
  // A converge or a revert names its devices: the membership holds only those, and the rollout no list of
  // them (sliced, the list was in the rollout's input and in every slice's activity input: 100,000 ids at
  // 100,000 devices). The scope and the plan then see the same devices `onlyDevices` would have left.
  const named = input.onlyDevices ? new Set(input.onlyDevices) : undefined;
  const subset = named ? read.inventory.devices.filter((d) => named.has(d.id)) : [];
  const narrowed = subset.length > 0;
  const devices = narrowed ? subset : read.inventory.devices;
  const { onlyDevices: _listed, ...unlisted } = input;
  const rest = narrowed ? unlisted : input;
  const marks = new Map<string, NodeDownMark>();
  if (read.kind === 'file') {
    for (const [id, standing] of await judgeVerdicts({
      inventoryPath: read.inventoryPath,
      devices,
      inventory: read.inventory.devices,
      by,
    }))
      marks.set(id, markOf(standing));
  }
  const membership = await storeMembership(
    client,
    taskQueue,
    narrowed ? { ...read.inventory, devices } : read.inventory,
    read.kind === 'file' ? resolve(read.inventoryPath) : read.inventoryPath,
    marks,
  );
  // A large fleet keeps its device records in the slices, never in the rollout (core/rollout/sliced-plan.ts).
  if (membership.devices < SLICED_RECORDS_FROM) return { ...rest, membership };
  return {
    ...rest,
    membership,
    records: 'slices',
    sliceSize: input.sliceSize ?? slicedSliceSize(membership.devices),
  };
}
