import { createHash } from 'node:crypto';
import type { Client } from '@temporalio/client';
import {
  forwardDecision,
  recordSync,
  reportDigest,
  restoreTwinState,
  settledReport,
  viewOf,
  type DesiredEntry,
  type TwinState,
  type TwinSyncInput,
  type TwinView,
} from '../core/twin';
import type { SeenEntry } from '../core/presence';
import { readTwinRecord, reportToTwin } from '../clients/twin';
import { unwrittenSeen, writeSeen } from '../clients/presence';
import { TwinFeed, type TwinChange } from '../clients/twin-feed';

/**
 * What the gateway knows of each device's twin, so an idle sync never reaches Temporal (docs/architecture.md,
 * "Idle syncs stay in the gateway"). Per device it holds the twin's record as last read or written, and the
 * long-polls waiting on it:
 *   - a sync is answered from the record; the first sync of a device (or after the record went stale) reads the
 *     twin once, running the enrolment hook when the device has none;
 *   - a report that says something new is written to the twin (`twinReport`, before the sync is answered); any
 *     other sync only marks the device seen, and the marks go to the presence shards in one batch per interval;
 *   - the twin change feed (one list call per interval) says which twins' desired state moved: their records are
 *     read again and their held long-polls answered at once.
 * Several gateways may serve one fleet: each follows the feed, and a record another gateway wrote is only ever
 * older here, never wrong in what it desires once the feed has been read.
 */
export interface DeviceViewsOptions {
  client: Client;
  taskQueue: string;
  /** Run when a device with no twin syncs for the first time (gateway/enrolled.ts). */
  onFirstSync?: (deviceId: string) => Promise<void>;
  /** How often the feed is read (default 500 ms). */
  feedIntervalMs?: number;
  /** How often the seen marks are written (default 15 s). */
  presenceFlushMs?: number;
  /** Twin reads at once (first syncs, feed refreshes); more wait their turn (default 64). */
  maxReads?: number;
  log?: (line: string) => void;
  now?: () => number;
}

/** Past this long without a working feed, every record is read again on its device's next sync. */
export const FEED_STALE_MS = 30_000;

interface Waiter {
  /** Answer if the device has news for this long-poll. */
  check(): void;
  /** Answer now. */
  done(): void;
}

interface DeviceRecord {
  state: TwinState;
  /** Whether this gateway has marked the device seen since it read the record. */
  seenOnce?: boolean;
  /** When it was read from the twin or last refreshed (ms). */
  loadedAt: number;
  forwardedAtMs: number;
}

export interface DeviceViewsStats {
  records: number;
  held: number;
  reads: number;
  forwards: number;
  seenMarks: number;
  presenceWrites: number;
  presencePending: number;
  feedChangeBatches: number;
  feedChanges: number;
}

const AGENT_LEFT = 'the agent closed the connection before its answer';

/** `work`, or a rejection as soon as `gone` aborts (the work itself goes on). */
function untilGone<T>(work: Promise<T>, gone: AbortSignal | undefined): Promise<T> {
  if (!gone) return work;
  if (gone.aborted) return Promise.reject(new Error(AGENT_LEFT));
  return new Promise<T>((resolve, reject) => {
    const onGone = () => reject(new Error(AGENT_LEFT));
    gone.addEventListener('abort', onGone, { once: true });
    work.then(resolve, reject).finally(() => gone.removeEventListener('abort', onGone));
  });
}

/** Distinct desired steps kept for sharing (revisions in flight at once; the oldest is dropped past it). */
const SHARED_STEPS_MAX = 256;

export class DeviceViews {
  /**
   * One copy of each desired entry's steps (the signed content) for every device that desires it: each read or feed
   * change brings its own copy, and at 10,000 devices desiring one revision those copies were most of the gateway's
   * heap (bench/README.md, "Gateway memory").
   */
  private readonly sharedSteps = new Map<string, DesiredEntry['steps']>();
  private readonly records = new Map<string, DeviceRecord>();
  private readonly loading = new Map<string, Promise<DeviceRecord>>();
  private readonly waiting = new Map<string, Set<Waiter>>();
  private seen = new Map<string, SeenEntry>();
  private readonly feed: TwinFeed;
  private readonly flusher: NodeJS.Timeout;
  private readonly staleChecker: NodeJS.Timeout;
  private staleBefore = 0;
  private readsInFlight = 0;
  private readonly readQueue: Array<() => void> = [];
  private readonly now: () => number;
  private readonly log: (line: string) => void;
  private readonly counts = {
    reads: 0,
    forwards: 0,
    seenMarks: 0,
    presenceWrites: 0,
    feedChangeBatches: 0,
    feedChanges: 0,
  };

  constructor(private readonly opts: DeviceViewsOptions) {
    this.now = opts.now ?? Date.now;
    this.log = opts.log ?? (() => {});
    this.feed = new TwinFeed(opts.client, 'desired', {
      intervalMs: opts.feedIntervalMs ?? 500,
      onChanges: (changes) => this.onChanges(changes),
      onError: (err) => this.log(`twin change feed: ${err.message.slice(0, 200)}; looking again`),
      now: this.now,
    });
    this.feed.start();
    this.flusher = setInterval(() => void this.flushSeen(), opts.presenceFlushMs ?? 15_000);
    this.flusher.unref();
    // A feed that has not worked for a while may have missed changes: read every record again when next used.
    this.staleChecker = setInterval(() => {
      if (this.feed.failingFor() > FEED_STALE_MS) this.staleBefore = this.now();
    }, 1_000);
    this.staleChecker.unref();
  }

  /**
   * One agent sync: record what it says (written to the twin when it is news, else a seen mark), then answer the
   * view, at once when the device has news or the sync does not wait, else when news comes or `waitMs` passes.
   */
  async sync(deviceId: string, input: TwinSyncInput, gone?: AbortSignal): Promise<TwinView> {
    // The wait counts from the sync's arrival: an agent gives up `waitMs` and a margin after it asked, so time spent
    // reading its twin (a first sync in a storm of them) comes off the hold, not on top of it.
    const arrived = this.now();
    // An agent that gives up while its twin is read (a first sync in a storm of them) frees its slot at once; the
    // read goes on and its record serves the agent's next sync.
    const record = await untilGone(this.record(deviceId), gone);
    const nowMs = this.now();
    const decision = forwardDecision({
      view: record.state,
      sync: input,
      forwardedAtMs: record.forwardedAtMs,
      nowMs,
    });
    if (decision === 'forward' && input.report) {
      await reportToTwin(this.opts.client, this.opts.taskQueue, deviceId, {
        report: input.report,
        knownVersion: input.knownVersion,
        sentAt: new Date(nowMs).toISOString(),
      });
      recordSync(record.state, input, new Date(nowMs).toISOString());
      record.forwardedAtMs = nowMs;
      this.counts.forwards++;
    } else {
      const said = input.report ? settledReport(record.state.report, input.report) : record.state.report;
      const firstSighting = !record.seenOnce;
      record.seenOnce = true;
      this.seen.set(deviceId, { at: new Date(nowMs).toISOString(), digest: reportDigest(said) });
      this.counts.seenMarks++;
      // A device with no twin is known to readers only by its presence: write its first sighting within a second,
      // not at the next flush (a rollout started right after the agent must not find it "never seen").
      if (firstSighting && record.state.version === 0 && !record.state.report) this.flushSoon();
    }
    const holdMs = input.waitMs - (this.now() - arrived);
    if (holdMs > 0 && record.state.version <= input.knownVersion) await this.news(deviceId, input, holdMs, gone);
    // The agent went away while held: nobody to answer (the server logs it as a client that left).
    if (gone?.aborted) throw new Error(AGENT_LEFT);
    return viewOf(this.records.get(deviceId)?.state ?? record.state);
  }

  /** The device's view for a payload request: read again when it does not desire what the agent asks for yet. */
  async view(deviceId: string, wants?: (view: TwinView) => boolean): Promise<TwinView> {
    const record = await this.record(deviceId);
    if (!wants || wants(viewOf(record.state))) return viewOf(record.state);
    return viewOf((await this.reload(deviceId)).state);
  }

  stats(): DeviceViewsStats {
    let held = 0;
    for (const set of this.waiting.values()) held += set.size;
    return { records: this.records.size, held, presencePending: this.seen.size, ...this.counts };
  }

  /** Stop following the feed, answer every held long-poll with what is known, and write the seen marks. */
  async close(): Promise<void> {
    this.feed.stop();
    clearInterval(this.flusher);
    clearTimeout(this.soon);
    clearInterval(this.staleChecker);
    for (const waiters of this.waiting.values()) for (const waiter of [...waiters]) waiter.done();
    await this.flushSeen();
  }

  private soon: NodeJS.Timeout | undefined;

  /** Write the seen marks within a second (first sightings arriving together share one write). */
  private flushSoon(): void {
    if (this.soon) return;
    this.soon = setTimeout(() => {
      this.soon = undefined;
      void this.flushSeen();
    }, 500);
    this.soon.unref();
  }

  /** Write the seen marks to the presence shards; marks a write could not take are kept for the next one. */
  async flushSeen(): Promise<void> {
    if (this.seen.size === 0) return;
    const batch = this.seen;
    this.seen = new Map();
    try {
      await writeSeen(this.opts.client, this.opts.taskQueue, batch);
      this.counts.presenceWrites++;
    } catch (err) {
      for (const [device, mark] of unwrittenSeen(err) ?? batch) {
        const newer = this.seen.get(device);
        if (!newer || Date.parse(newer.at) < Date.parse(mark.at)) this.seen.set(device, mark);
      }
      this.log(
        `presence: ${batch.size} seen marks not written (${(err as Error).message.slice(0, 200)}); kept for the next write`,
      );
    }
  }

  private news(deviceId: string, input: TwinSyncInput, holdMs: number, gone?: AbortSignal): Promise<void> {
    return new Promise<void>((resolve) => {
      const set = this.waiting.get(deviceId) ?? new Set<Waiter>();
      this.waiting.set(deviceId, set);
      const waiter: Waiter = {
        done: () => {
          clearTimeout(timer);
          gone?.removeEventListener('abort', waiter.done);
          set.delete(waiter);
          if (set.size === 0 && this.waiting.get(deviceId) === set) this.waiting.delete(deviceId);
          resolve();
        },
        check: () => {
          const state = this.records.get(deviceId)?.state;
          if (!state || state.version > input.knownVersion) waiter.done();
        },
      };
      const timer = setTimeout(waiter.done, holdMs);
      gone?.addEventListener('abort', waiter.done, { once: true });
      set.add(waiter);
    });
  }

  private wake(deviceId: string): void {
    const waiters = this.waiting.get(deviceId);
    if (waiters) for (const waiter of [...waiters]) waiter.check();
  }

  private onChanges(changes: TwinChange[]): void {
    this.counts.feedChangeBatches++;
    for (const change of changes) {
      const record = this.records.get(change.deviceId);
      // A device this gateway has not served reads its twin at its first sync here: nothing to refresh.
      if (!record || (change.version !== null && change.version <= record.state.version)) continue;
      this.counts.feedChanges++;
      this.reload(change.deviceId).then(
        () => this.wake(change.deviceId),
        (err: Error) => {
          // Read again at the device's next sync.
          record.loadedAt = 0;
          this.log(`${change.deviceId}: twin not readable after a change (${err.message.slice(0, 200)})`);
        },
      );
    }
  }

  private async record(deviceId: string): Promise<DeviceRecord> {
    const known = this.records.get(deviceId);
    if (known && known.loadedAt > this.staleBefore && known.loadedAt > 0) return known;
    return this.reload(deviceId);
  }

  /** Read the twin (once at a time per device, a bounded number at once); a device with none is enrolled first. */
  private reload(deviceId: string): Promise<DeviceRecord> {
    const inFlight = this.loading.get(deviceId);
    if (inFlight) return inFlight;
    const load = this.bounded(async () => {
      const loadedAt = this.now();
      let view = await readTwinRecord(this.opts.client, deviceId);
      if (!view && this.opts.onFirstSync) {
        await this.opts.onFirstSync(deviceId);
        view = await readTwinRecord(this.opts.client, deviceId);
      }
      this.counts.reads++;
      const previous = this.records.get(deviceId);
      // A pending re-verify was asked at this version or before: a report knowing it answers it.
      const state = restoreTwinState(
        deviceId,
        view
          ? { ...view, desired: this.shared(view.desired), reverifyVersion: view.reverify ? view.version : 0, syncs: 0 }
          : undefined,
      );
      // A slower read must not put back an older record than one already here.
      if (previous && previous.state.version > state.version) return previous;
      // Updated in place: a sync holding this record sees what the read found (one object per device).
      if (previous) {
        previous.state = state;
        previous.loadedAt = loadedAt;
        return previous;
      }
      const record = { state, loadedAt, forwardedAtMs: 0 };
      this.records.set(deviceId, record);
      return record;
    }).finally(() => this.loading.delete(deviceId));
    this.loading.set(deviceId, load);
    return load;
  }

  /** The desired entries with their steps replaced by the one shared copy of equal steps. */
  private shared(desired: Record<string, DesiredEntry>): Record<string, DesiredEntry> {
    const out: Record<string, DesiredEntry> = {};
    for (const [profile, entry] of Object.entries(desired)) {
      const key = createHash('sha256').update(JSON.stringify(entry.steps)).digest('base64');
      let steps = this.sharedSteps.get(key);
      if (!steps) {
        steps = entry.steps;
        this.sharedSteps.set(key, steps);
        if (this.sharedSteps.size > SHARED_STEPS_MAX) this.sharedSteps.delete(this.sharedSteps.keys().next().value!);
      }
      out[profile] = { ...entry, steps };
    }
    return out;
  }

  private async bounded<T>(fn: () => Promise<T>): Promise<T> {
    const max = this.opts.maxReads ?? 64;
    if (this.readsInFlight >= max) await new Promise<void>((resolve) => this.readQueue.push(resolve));
    this.readsInFlight++;
    try {
      return await fn();
    } finally {
      this.readsInFlight--;
      this.readQueue.shift()?.();
    }
  }
}
