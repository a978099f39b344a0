import { existsSync, mkdirSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { WavegateError } from '../core/errors';
import { lazySchema, zod } from '../core/lazy-schema';
import type { DeviceRotation } from '../core/rotation';
import { parseWith } from '../core/validation';
import { readDocument, writeFileAtomic } from './files';

/**
 * Where a rotation's per-device state lives on the operator's machine (docs/formats.md, "Rotation schedules"):
 * `<dir>/<rotation id>.json`, the dir `--state` or `<inventory's dir>/.wavegate-rotations/`. JSON, replaced
 * atomically after each device's step, so a run cut off keeps every step it finished. It names the schedule by
 * its digest: a different schedule of the same id is refused rather than mixed with this one's facts.
 */

export interface DeviceRecord extends DeviceRotation {
  /** The old key's file on the worker when the device moved (a path, never a key): retire proves it refused. */
  oldKey?: string;
}

export interface RotationLogEntry {
  at: string;
  event:
    | 'published'
    | 'active'
    | 'missed'
    | 'blocked'
    | 'retired'
    | 'lifeline'
    | 'old-key-still-accepted'
    | 'retire'
    | 'retire-forced';
  device?: string;
  detail?: string;
}

export interface RotationStateFile {
  type: 'wavegate/rotation-state';
  id: string;
  /** The schedule's body digest. */
  schedule: string;
  /** The old key's public line (`ssh-ed25519 AAAA...`), kept from the first device moved: retire removes its lines. */
  oldPublicKey?: string;
  devices: Record<string, DeviceRecord>;
  /** The retire, once it went ahead: its statement's digest, forced or not and past which devices. */
  retire?: { at: string; statement: string; forced: boolean; reason?: string; notActive: string[] };
  log: RotationLogEntry[];
}

/** The log keeps this many entries (the newest): a file read and rewritten after every device's step stays small. */
export const MAX_LOG_ENTRIES = 10_000;

const When = lazySchema(() => zod().string().max(64));
const Text = lazySchema(() => zod().string().max(2000));
const StateSchema = lazySchema(() =>
  zod()
    .object({
      type: zod().literal('wavegate/rotation-state'),
      id: zod().string().min(1).max(64),
      schedule: zod()
        .string()
        .regex(/^[0-9a-f]{64}$/),
      oldPublicKey: zod().string().max(16_384).optional(),
      devices: zod().record(
        zod().string().max(128),
        zod()
          .object({
            added: When.optional(),
            active: When.optional(),
            retired: When.optional(),
            blocked: Text.optional(),
            lastError: Text.optional(),
            triedAt: When.optional(),
            oldKey: zod().string().max(4096).optional(),
          })
          .strict(),
      ),
      retire: zod()
        .object({
          at: When,
          statement: zod().string(),
          forced: zod().boolean(),
          reason: Text.optional(),
          notActive: zod().array(zod().string()),
        })
        .strict()
        .optional(),
      log: zod().array(
        zod()
          .object({ at: When, event: zod().string(), device: zod().string().optional(), detail: Text.optional() })
          .strict(),
      ),
    })
    .strict(),
);

/** The state file of rotation `id`: under `stateDir` when given, else beside the inventory. */
export function rotationStatePath(id: string, inventoryPath: string, stateDir?: string): string {
  const dir = stateDir !== undefined ? resolve(stateDir) : join(dirname(resolve(inventoryPath)), '.wavegate-rotations');
  return join(dir, `${basename(id)}.json`);
}

/**
 * The rotation's state, or a fresh one when the file does not exist yet. A file of another schedule (same id,
 * another digest) is CONFLICT: its facts were proven for other keys or instants.
 */
export function readRotationState(path: string, id: string, schedule: string): RotationStateFile {
  if (!existsSync(path)) return { type: 'wavegate/rotation-state', id, schedule, devices: {}, log: [] };
  const state = parseWith(StateSchema, readDocument(path, 'json'), path) as RotationStateFile;
  if (state.id !== id || state.schedule !== schedule)
    throw new WavegateError(
      'CONFLICT',
      `${path}: the state of rotation ${state.id} for schedule ${state.schedule.slice(0, 12)}, not of this schedule (${id}, ${schedule.slice(0, 12)}); a rotation's id is used once: give the new schedule another id, or --state another directory`,
      { field: '--state', value: path },
    );
  return state;
}

/** Replace the state file at once (the directory made as needed), its log cut to the newest entries. */
export function writeRotationState(path: string, state: RotationStateFile): void {
  mkdirSync(dirname(path), { recursive: true });
  const log = state.log.length > MAX_LOG_ENTRIES ? state.log.slice(-MAX_LOG_ENTRIES) : state.log;
  writeFileAtomic(path, `${JSON.stringify({ ...state, log }, null, 2)}\n`);
}
