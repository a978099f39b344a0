import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import { WavegateError } from '../core/errors';
import {
  byShard,
  PRESENCE_LIMITS,
  presenceBatches,
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
  const queries: Array<{ shard: number; devices: string[] }> = [];
  for (const [shard, pairs] of byShard(new Set(deviceIds).entries())) {
    for (let i = 0; i < pairs.length; i += PRESENCE_LIMITS.query)
      queries.push({ shard, devices: pairs.slice(i, i + PRESENCE_LIMITS.query).map(([id]) => id) });
  }
  const outcomes = await settledInRounds(queries, ({ shard, devices }) =>
    client.workflow.getHandle(presenceWorkflowId(shard)).query(presenceOfQuery, { devices }),
  );
  const out = new Map<string, SeenEntry>();
  for (const outcome of outcomes) {
    if (outcome.status === 'rejected') {
      if (outcome.reason instanceof WorkflowNotFoundError) continue;
      throw outcome.reason;
    }
    for (const [deviceId, entry] of Object.entries(outcome.value)) out.set(deviceId, entry);
  }
  return out;
}

/** How long a presence read waits for others to share its shard queries (readers at scale ask one device at a time). */
export const SEEN_BATCH_MS = 20;

/**
 * Coalesces one-device presence reads: every device asked within SEEN_BATCH_MS goes into one `readSeen`, so a
 * rollout's hundred applies in flight (or a snapshot's pages) cost a query per shard per batch, not one per device,
 * and no shard's consistent-query buffer fills up with queries that all ask the same thing.
 */
class SeenBatcher {
  private pending = new Map<
    string,
    Array<{ resolve: (e: SeenEntry | undefined) => void; reject: (e: unknown) => void }>
  >();
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly client: Client) {}

  seen(deviceId: string): Promise<SeenEntry | undefined> {
    return new Promise((resolve, reject) => {
      const waiting = this.pending.get(deviceId) ?? [];
      waiting.push({ resolve, reject });
      this.pending.set(deviceId, waiting);
      this.timer ??= setTimeout(() => void this.flush(), SEEN_BATCH_MS);
    });
  }

  private async flush(): Promise<void> {
    const batch = this.pending;
    this.pending = new Map();
    this.timer = undefined;
    try {
      const seen = await readSeen(this.client, batch.keys());
      for (const [deviceId, waiting] of batch) for (const w of waiting) w.resolve(seen.get(deviceId));
    } catch (err) {
      for (const waiting of batch.values()) for (const w of waiting) w.reject(err);
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
