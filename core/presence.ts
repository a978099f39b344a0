import { seedFrom } from './random';

/**
 * Presence shards `presence:<n>`: where the gateways write that a device was seen, so that an
 * unchanged agent sync never touches the device's twin. A gateway remembers "device D seen at T with a
 * report whose digest is X" and every ~15 s writes what it saw in batches, one signal per shard
 * (clients/presence.ts); the readers (snapshot, health gates, board, the apply's offline check) merge the
 * shard's entry into the twin view's lastSeenAt (`mergeSeen`). This module holds the shard's whole state
 * and every check, pure (usable in workflow code); workflows/presence.ts is a thin shell around it.
 *
 * Device ids come from gateways and are used as record keys: every read goes through Object.hasOwn, and a
 * batch naming `__proto__`, `constructor` or `prototype` is refused.
 */

/** How many shards the fleet's presence is spread over (fixed: a device's shard is a function of its id). */
export const PRESENCE_SHARDS = 32;
/** A shard continues as new past this many history events (or when Temporal suggests it). */
export const PRESENCE_HISTORY_LIMIT = 2_000;
/** A device not seen for this long is dropped from its shard, so the carried state stays bounded by the live fleet. */
export const PRESENCE_MAX_AGE_MS = 7 * 24 * 60 * 60 * 1000;

export const PRESENCE_LIMITS = {
  /** Entries in one batch (one signal): 10,000 entries of ~125 bytes (1.24 MB) stay under Temporal's 2 MB payload. */
  batch: 10_000,
  /** Device names in one `presenceOf` query. */
  query: 10_000,
  deviceId: 128,
  digest: 64,
} as const;

/** That a device was seen, by a gateway. */
export interface SeenEntry {
  /** When the gateway saw it (gateway clock, ISO 8601 UTC). */
  at: string;
  /** The digest of the report the device synced with (at most 64 characters; the gateway's choice of hash). */
  digest: string;
}

/** One signal to one shard: the devices of that shard a gateway saw since its last flush. */
export interface PresenceBatch {
  shard: number;
  seen: Record<string, SeenEntry>;
}

/** A shard's state, carried over continue-as-new. */
export interface PresenceState {
  shard: number;
  seen: Record<string, SeenEntry>;
}

/** The shard a device's presence is written to: a stable hash of its id (FNV-1a, mixed), mod PRESENCE_SHARDS. */
export function presenceShardOf(deviceId: string): number {
  return seedFrom(deviceId)[0] % PRESENCE_SHARDS;
}

export function presenceWorkflowId(shard: number): string {
  return `presence:${shard}`;
}

export function newPresenceState(shard: number): PresenceState {
  return { shard, seen: {} };
}

/** The shard's state from what a previous run carried (or a fresh one): a carried state of another shard is refused. */
export function restorePresenceState(shard: number, carried: PresenceState | undefined): PresenceState {
  if (!carried) return newPresenceState(shard);
  if (carried.shard !== shard)
    throw new Error(`presence:${shard}: carried state is of shard ${JSON.stringify(carried.shard)}`);
  return { shard, seen: { ...carried.seen } };
}

// ---- validation: a batch is checked before it touches the state ----

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const RESERVED_KEYS = new Set(['__proto__', 'constructor', 'prototype']);
const ISO_UTC = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?Z$/;

function quoted(value: unknown): string {
  const text = value === undefined ? 'undefined' : (JSON.stringify(value) ?? String(value));
  return text.length > 60 ? `${text.slice(0, 60)}…` : text;
}

function isShard(value: unknown): value is number {
  return typeof value === 'number' && Number.isInteger(value) && value >= 0 && value < PRESENCE_SHARDS;
}

/** Why a device id cannot be a presence key, or null. */
export function presenceDeviceProblem(deviceId: unknown): string | null {
  if (typeof deviceId !== 'string' || deviceId.length < 1 || deviceId.length > PRESENCE_LIMITS.deviceId)
    return `device id: must be 1-${PRESENCE_LIMITS.deviceId} characters (got ${quoted(deviceId)})`;
  if (RESERVED_KEYS.has(deviceId)) return `device id: ${quoted(deviceId)} is reserved`;
  return null;
}

/** Why one entry (seen[deviceId]) is malformed, or null; `field` names it in the message. */
export function seenEntryProblem(entry: unknown, field: string): string | null {
  if (!isRecord(entry)) return `${field}: must be { at, digest } (got ${quoted(entry)})`;
  if (typeof entry.at !== 'string' || !ISO_UTC.test(entry.at) || Number.isNaN(Date.parse(entry.at)))
    return `${field}.at: must be an ISO 8601 UTC time such as 2026-12-01T10:00:00.000Z (got ${quoted(entry.at)})`;
  if (typeof entry.digest !== 'string' || entry.digest.length > PRESENCE_LIMITS.digest)
    return `${field}.digest: must be a string of at most ${PRESENCE_LIMITS.digest} characters (got ${quoted(entry.digest)})`;
  return null;
}

/**
 * Why a batch is malformed, or null: an object, its shard an integer 0..PRESENCE_SHARDS-1 (and `shard`
 * when given: the shard that received it), at most PRESENCE_LIMITS.batch entries, each a valid device id
 * of that shard with a valid entry. The first problem is named, with its field and value.
 */
export function presenceBatchProblem(batch: unknown, shard?: number): string | null {
  if (!isRecord(batch)) return `presenceSeen: must be { shard, seen } (got ${quoted(batch)})`;
  if (!isShard(batch.shard))
    return `presenceSeen: shard: must be an integer 0-${PRESENCE_SHARDS - 1} (got ${quoted(batch.shard)})`;
  if (shard !== undefined && batch.shard !== shard) return `presenceSeen: shard: ${batch.shard} sent to shard ${shard}`;
  if (!isRecord(batch.seen)) return `presenceSeen: seen: must be an object of entries (got ${quoted(batch.seen)})`;
  const ids = Object.keys(batch.seen);
  if (ids.length > PRESENCE_LIMITS.batch)
    return `presenceSeen: seen: at most ${PRESENCE_LIMITS.batch} entries (got ${ids.length})`;
  for (const id of ids) {
    const deviceProblem = presenceDeviceProblem(id);
    if (deviceProblem) return `presenceSeen: seen: ${deviceProblem}`;
    const field = `seen[${quoted(id)}]`;
    const problem = seenEntryProblem(batch.seen[id], field);
    if (problem) return `presenceSeen: ${problem}`;
    if (presenceShardOf(id) !== batch.shard)
      return `presenceSeen: ${field}: the device is in shard ${presenceShardOf(id)}, not ${batch.shard}`;
  }
  return null;
}

/** Why a `presenceOf` query's argument is malformed, or null. */
export function presenceQueryProblem(arg: unknown): string | null {
  if (!isRecord(arg) || !Array.isArray(arg.devices))
    return `presenceOf: must be { devices: string[] } (got ${quoted(arg)})`;
  if (arg.devices.length > PRESENCE_LIMITS.query)
    return `presenceOf: devices: at most ${PRESENCE_LIMITS.query} names (got ${arg.devices.length})`;
  return null;
}

// ---- transitions and reads ----

function atMs(entry: SeenEntry | undefined): number {
  const at = entry ? Date.parse(entry.at) : Number.NaN;
  return Number.isFinite(at) ? at : Number.NEGATIVE_INFINITY;
}

/** The later of two entries (the first on a tie: a retried batch changes nothing). */
export function laterSeen(current: SeenEntry | undefined, next: SeenEntry | undefined): SeenEntry | undefined {
  if (!next) return current;
  if (!current) return next;
  return atMs(next) > atMs(current) ? next : current;
}

/** Take a (valid) batch: per device the entry with the later `at` stays, a later one replacing the digest. Returns how many changed. */
export function recordSeen(state: PresenceState, batch: PresenceBatch): number {
  let changed = 0;
  for (const [deviceId, entry] of Object.entries(batch.seen)) {
    const current = Object.hasOwn(state.seen, deviceId) ? state.seen[deviceId] : undefined;
    if (laterSeen(current, entry) === current) continue;
    state.seen[deviceId] = { at: entry.at, digest: entry.digest };
    changed += 1;
  }
  return changed;
}

/** Drop the devices not seen for maxAgeMs before `nowIso`. Returns how many were dropped. */
export function pruneSeen(state: PresenceState, nowIso: string, maxAgeMs = PRESENCE_MAX_AGE_MS): number {
  const oldest = Date.parse(nowIso) - maxAgeMs;
  const kept = Object.entries(state.seen).filter(([, entry]) => atMs(entry) >= oldest);
  const dropped = Object.keys(state.seen).length - kept.length;
  if (dropped > 0) state.seen = Object.fromEntries(kept);
  return dropped;
}

/** The entries of the named devices the shard holds (a device it does not hold is absent from the answer). */
export function seenOf(state: PresenceState, deviceIds: readonly string[]): Record<string, SeenEntry> {
  const out: Record<string, SeenEntry> = {};
  for (const id of deviceIds) {
    if (typeof id === 'string' && Object.hasOwn(state.seen, id)) out[id] = state.seen[id]!;
  }
  return out;
}

/** A twin view's lastSeenAt merged with the device's presence entry: the later of the two (null: neither). */
export function mergeSeen(lastSeenAt: string | null, entry: SeenEntry | undefined): string | null {
  if (!entry || !Number.isFinite(Date.parse(entry.at))) return lastSeenAt;
  if (lastSeenAt === null) return entry.at;
  const last = Date.parse(lastSeenAt);
  return !Number.isFinite(last) || Date.parse(entry.at) > last ? entry.at : lastSeenAt;
}

/** Device ids grouped by shard (in first-seen order within a shard). */
export function byShard<T>(entries: Iterable<[string, T]>): Map<number, Array<[string, T]>> {
  const out = new Map<number, Array<[string, T]>>();
  for (const pair of entries) {
    const shard = presenceShardOf(pair[0]);
    const list = out.get(shard);
    if (list) list.push(pair);
    else out.set(shard, [pair]);
  }
  return out;
}

/**
 * The batches one flush writes: the entries grouped by shard, a shard's split in batches of at most
 * PRESENCE_LIMITS.batch. A malformed entry (a device id no shard may hold, a bad time or digest) is put
 * in `refused` with its problem instead: sending it would get its whole batch dropped.
 */
export function presenceBatches(seen: Iterable<[string, SeenEntry]>): {
  batches: PresenceBatch[];
  refused: Array<{ deviceId: string; problem: string }>;
} {
  const batches: PresenceBatch[] = [];
  const refused: Array<{ deviceId: string; problem: string }> = [];
  for (const [shard, pairs] of byShard(seen)) {
    let batch: PresenceBatch | undefined;
    let size = 0;
    for (const [deviceId, entry] of pairs) {
      const problem = presenceDeviceProblem(deviceId) ?? seenEntryProblem(entry, `seen[${quoted(deviceId)}]`);
      if (problem) {
        refused.push({ deviceId, problem });
        continue;
      }
      if (!batch || size === PRESENCE_LIMITS.batch) {
        batch = { shard, seen: {} };
        size = 0;
        batches.push(batch);
      }
      batch.seen[deviceId] = { at: entry.at, digest: entry.digest };
      size += 1;
    }
  }
  return { batches, refused };
}
