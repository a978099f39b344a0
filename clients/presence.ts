import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import { WavegateError } from '../core/errors';
import {
  byShard,
  PRESENCE_LIMITS,
  presenceBatches,
  presenceShardOf,
  presenceWorkflowId,
  type PresenceBatch,
  type SeenEntry,
} from '../core/presence';
import { PRESENCE_WORKFLOW, presenceOfQuery, presenceSeenSignal, type PresenceWorkflow } from '../contracts/presence';

/**
 * The one client of presence shards `presence:<n>` (workflows/presence.ts; messages in
 * contracts/presence.ts): the gateway writes the devices it saw, one signal-with-start per shard per flush;
 * the twin's readers read them back, one query per shard. In the entity clients' one style
 * (docs/architecture.md, "Layers"): a write that needs no answer is signal-with-start, a read never starts
 * anything (a shard not found holds nothing).
 */

/** Shards written or read at once: a flush to 32 shards is 8 rounds of 4. */
export const PRESENCE_CONCURRENCY = 4;

/** How a shard is started: an entity that never ends must follow the current build under Worker Versioning. */
export function presenceStartOptions(shard: number, taskQueue: string) {
  return {
    workflowId: presenceWorkflowId(shard),
    taskQueue,
    args: [{ shard }] as Parameters<PresenceWorkflow>,
    versioningOverride: 'AUTO_UPGRADE' as const,
  };
}

/** What a flush wrote. */
export interface SeenWrite {
  /** Signals sent (one per shard, more for a shard with over PRESENCE_LIMITS.batch entries). */
  signals: number;
  devices: number;
  /** Entries never sent, with why (a device id no shard may hold, a malformed time or digest): a retry would not help. */
  refused: Array<{ deviceId: string; problem: string }>;
}

/** Run `fn` over `items`, at most PRESENCE_CONCURRENCY at once, every one tried; the outcomes in input order. */
async function settledInRounds<T, R>(items: readonly T[], fn: (item: T) => Promise<R>) {
  const out: Array<PromiseSettledResult<R>> = [];
  for (let i = 0; i < items.length; i += PRESENCE_CONCURRENCY)
    out.push(...(await Promise.allSettled(items.slice(i, i + PRESENCE_CONCURRENCY).map(fn))));
  return out;
}

/**
 * Write what a gateway saw since its last flush: grouped by shard, one signal-with-start per shard (a
 * shard with no workflow yet is started), at most PRESENCE_CONCURRENCY at once. Every batch is tried;
 * when any failed, the first failure is thrown after the others, as an UNAVAILABLE WavegateError whose
 * `cause` is that failure and whose details carry `unwritten` (the entries of every failed batch: re-queue
 * them with `unwrittenSeen`, so nothing is lost), `failedShards`, `refused` and `written`.
 */
export async function writeSeen(client: Client, taskQueue: string, seen: Map<string, SeenEntry>): Promise<SeenWrite> {
  const { batches, refused } = presenceBatches(seen);
  const outcomes = await settledInRounds(batches, (batch) =>
    client.workflow.signalWithStart<PresenceWorkflow, [PresenceBatch]>(PRESENCE_WORKFLOW, {
      ...presenceStartOptions(batch.shard, taskQueue),
      signal: presenceSeenSignal,
      signalArgs: [batch],
    }),
  );
  const written: SeenWrite = { signals: 0, devices: 0, refused };
  const unwritten = new Map<string, SeenEntry>();
  const failedShards = new Set<number>();
  let first: unknown;
  outcomes.forEach((outcome, i) => {
    const batch = batches[i]!;
    if (outcome.status === 'fulfilled') {
      written.signals += 1;
      written.devices += Object.keys(batch.seen).length;
      return;
    }
    first ??= outcome.reason;
    failedShards.add(batch.shard);
    for (const [deviceId, entry] of Object.entries(batch.seen)) unwritten.set(deviceId, entry);
  });
  if (failedShards.size === 0) return written;
  const shards = [...failedShards].sort((a, b) => a - b);
  const error = new WavegateError(
    'UNAVAILABLE',
    `presence: ${unwritten.size} devices in shards ${shards.join(', ')} not written (kept for the next flush): ${first instanceof Error ? first.message : String(first)}`.slice(
      0,
      400,
    ),
    { failedShards: shards, unwritten, refused, written },
  );
  error.cause = first;
  throw error;
}

/** The entries a failed `writeSeen` did not write (to re-queue for the next flush), or null for any other error. */
export function unwrittenSeen(err: unknown): Map<string, SeenEntry> | null {
  const unwritten = err instanceof WavegateError ? err.details.unwritten : undefined;
  return unwritten instanceof Map ? (unwritten as Map<string, SeenEntry>) : null;
}

/**
 * The presence entries of the named devices: one `presenceOf` query per shard (more for a shard asked
 * about over PRESENCE_LIMITS.query devices), at most PRESENCE_CONCURRENCY at once. A shard whose workflow
 * is not found contributes nothing; any other failure is thrown once every query has been tried.
 */
export async function readSeen(client: Client, deviceIds: Iterable<string>): Promise<Map<string, SeenEntry>> {
  const { seen, failed } = await readSeenSettled(client, deviceIds);
  const first = failed.values().next();
  if (!first.done) throw first.value;
  return seen;
}

/** As `readSeen`, but a shard that fails fails only its own devices: `failed` names each with its shard's error. */
async function readSeenSettled(
  client: Client,
  deviceIds: Iterable<string>,
): Promise<{ seen: Map<string, SeenEntry>; failed: Map<string, unknown> }> {
  const queries: Array<{ shard: number; devices: string[] }> = [];
  for (const [shard, pairs] of byShard(new Set(deviceIds).entries())) {
    for (let i = 0; i < pairs.length; i += PRESENCE_LIMITS.query)
      queries.push({ shard, devices: pairs.slice(i, i + PRESENCE_LIMITS.query).map(([id]) => id) });
  }
  const outcomes = await settledInRounds(queries, ({ shard, devices }) =>
    client.workflow.getHandle(presenceWorkflowId(shard)).query(presenceOfQuery, { devices }),
  );
  const seen = new Map<string, SeenEntry>();
  const failed = new Map<string, unknown>();
  outcomes.forEach((outcome, i) => {
    if (outcome.status === 'rejected') {
      if (outcome.reason instanceof WorkflowNotFoundError) return;
      for (const device of queries[i]!.devices) failed.set(device, outcome.reason);
      return;
    }
    for (const [deviceId, entry] of Object.entries(outcome.value)) seen.set(deviceId, entry);
  });
  return { seen, failed };
}

/** How long a presence read waits for others to share its shard queries (readers at scale ask one device at a time). */
export const SEEN_BATCH_MS = 20;

type SeenWaiter = { resolve: (e: SeenEntry | undefined) => void; reject: (e: unknown) => void };

/**
 * Coalesces one-device presence reads, per shard: every device of a shard asked within SEEN_BATCH_MS goes into one
 * `presenceOf` query, and while a shard's query is out the devices asked of it wait for the next one. So a rollout's
 * hundred applies in flight (or a snapshot's pages) cost at most one query per shard at a time, not one per device.
 * That bound matters beyond the cost: queries piling up on one shard filled its consistent-query buffer (seen at
 * 10,000 agents), and several query tasks arriving for a shard the worker had evicted, while its workflow cache was
 * full, wedged that shard in the worker (the SDK dropped an activation: "Extra buffered run should not have produced
 * an activation"), every later query to it refused.
 */
class SeenBatcher {
  private readonly shards = new Map<
    number,
    { pending: Map<string, SeenWaiter[]>; timer?: NodeJS.Timeout; querying: boolean }
  >();

  constructor(private readonly client: Client) {}

  seen(deviceId: string): Promise<SeenEntry | undefined> {
    const shard = presenceShardOf(deviceId);
    let queue = this.shards.get(shard);
    if (!queue) {
      queue = { pending: new Map(), querying: false };
      this.shards.set(shard, queue);
    }
    const q = queue;
    return new Promise((resolve, reject) => {
      const waiting = q.pending.get(deviceId) ?? [];
      waiting.push({ resolve, reject });
      q.pending.set(deviceId, waiting);
      if (!q.querying) q.timer ??= setTimeout(() => void this.flush(shard), SEEN_BATCH_MS);
    });
  }

  private async flush(shard: number): Promise<void> {
    const q = this.shards.get(shard)!;
    const batch = q.pending;
    q.pending = new Map();
    q.timer = undefined;
    q.querying = true;
    try {
      const { seen, failed } = await readSeenSettled(this.client, batch.keys());
      for (const [deviceId, waiting] of batch) {
        for (const w of waiting) {
          if (failed.has(deviceId)) w.reject(failed.get(deviceId));
          else w.resolve(seen.get(deviceId));
        }
      }
    } catch (err) {
      for (const waiting of batch.values()) for (const w of waiting) w.reject(err);
    } finally {
      q.querying = false;
      // Devices asked while the query was out go in the next one, at once: they have waited for this one already.
      if (q.pending.size > 0) void this.flush(shard);
      else this.shards.delete(shard);
    }
  }
}

const batchers = new WeakMap<Client, SeenBatcher>();

/** One device's presence entry (undefined: never seen, or its shard not started), read in a batch with others. */
export function readSeenOne(client: Client, deviceId: string): Promise<SeenEntry | undefined> {
  const batcher = batchers.get(client) ?? new SeenBatcher(client);
  batchers.set(client, batcher);
  return batcher.seen(deviceId);
}
