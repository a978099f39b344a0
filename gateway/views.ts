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
import { TwinFeed, type TwinChange, type TwinFeedLateness } from '../clients/twin-feed';
import { AnswerDelivery, deliveriesOf, type AnswerDeliveryStats } from './answers';
import type { AgentGone } from './agent-gone';
import { CallLimit } from './call-limit';

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
  /**
   * Run when a device with no twin syncs for the first time (gateway/enrolled.ts); true when it asked the twin
   * for something (then the twin is read again), false when it left the device as it was.
   */
  onFirstSync?: (deviceId: string) => Promise<boolean>;
  /** How often the feed is read (default 500 ms). */
  feedIntervalMs?: number;
  /** How often the seen marks are written (default 15 s). */
  presenceFlushMs?: number;
  /** How long past its wait a sync is held for its report's write (default WRITE_MARGIN_MS). */
  writeMarginMs?: number;
  /** Twin reads at once (first syncs, feed refreshes); more wait their turn (default 64). */
  maxReads?: number;
  /** Report writes to twins at once; more wait their turn (default 64). */
  maxWrites?: number;
  /** Completes the applies a written report answers (./answers.ts); default: one on `client`. */
  answers?: AnswerDelivery;
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
  /** The report being written to the twin now (one write per device at a time). */
  writing?: Promise<void>;
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
  /** How late the desired feed saw its changes (clients/twin-feed.ts TwinFeedLateness). */
  feedLateness: TwinFeedLateness;
  /** Syncs answered before their report's write ended (it went on; see `sync`). */
  writesOutlastingSyncs: number;
  /** Applies completed from the reports written (./answers.ts). */
  answers: AnswerDeliveryStats;
}

const AGENT_LEFT = 'the agent closed the connection before its answer';

/** `work`, or a rejection as soon as `gone` aborts (the work itself goes on). */
function untilGone<T>(work: Promise<T>, gone: AgentGone | undefined): Promise<T> {
  if (!gone) return work;
  if (gone.aborted) return Promise.reject(new Error(AGENT_LEFT));
  return new Promise<T>((resolve, reject) => {
    const forget = gone.whenGone(() => reject(new Error(AGENT_LEFT)));
    work.then(resolve, reject).finally(forget);
  });
}

/**
 * How long past its wait a sync may be held for its report's write before it is answered without it: half the agent's
 * margin (agent/gateway-client.ts gives a sync its wait and 20 s), so the answer reaches the agent before it gives up.
 */
export const WRITE_MARGIN_MS = 10_000;

/** Whether `work` settled within `ms` (rejecting if it failed within it); it goes on either way. */
async function settledBy(work: Promise<unknown>, ms: number): Promise<boolean> {
  if (ms <= 0) return false;
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), ms);
  });
  try {
    return await Promise.race([work.then(() => true as const), late]);
  } finally {
    clearTimeout(timer);
  }
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
  private readonly reads: CallLimit;
  private readonly writes: CallLimit;
  private readonly answers: AnswerDelivery;
  private readonly now: () => number;
  private readonly log: (line: string) => void;
  private readonly counts = {
    reads: 0,
    forwards: 0,
    seenMarks: 0,
    presenceWrites: 0,
    feedChangeBatches: 0,
    feedChanges: 0,
    writesOutlastingSyncs: 0,
  };

  constructor(private readonly opts: DeviceViewsOptions) {
    this.now = opts.now ?? Date.now;
    this.log = opts.log ?? (() => {});
    this.reads = new CallLimit(opts.maxReads ?? 64);
    this.writes = new CallLimit(opts.maxWrites ?? 64);
    this.answers = opts.answers ?? new AnswerDelivery({ client: opts.client, log: this.log });
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
  async sync(deviceId: string, input: TwinSyncInput, gone?: AgentGone): Promise<TwinView> {
    // The wait counts from the sync's arrival: an agent gives up `waitMs` and a margin after it asked, so time spent
    // reading its twin (a first sync in a storm of them) comes off the hold, not on top of it.
    const arrived = this.now();
    // An agent that gives up while its twin is read (a first sync in a storm of them) frees its slot at once; the
    // read goes on and its record serves the agent's next sync.
    const record = await untilGone(this.record(deviceId), gone);
    // The latest this sync is answered: its wait and a margin, within the agent's own (its wait + 20 s).
    const answerBy = arrived + input.waitMs + (this.opts.writeMarginMs ?? WRITE_MARGIN_MS);
    // One write per device at a time: a sync that finds one in flight waits for it, then decides on its own report.
    // (Its failure is the other sync's: this one then writes its own report.)
    if (record.writing)
      await untilGone(
        settledBy(
          record.writing.catch(() => {}),
          answerBy - this.now(),
        ),
        gone,
      );
    const nowMs = this.now();
    const decision = forwardDecision({
      view: record.state,
      sync: input,
      forwardedAtMs: record.forwardedAtMs,
      nowMs,
    });
    if (decision === 'forward' && input.report && !record.writing) {
      // Answered once the report is in the twin; a write that outlasts the sync's time (a storm of first syncs, each
      // starting a twin) goes on, and the sync is answered with what is known. Nothing is lost: an agent sends its
      // whole report with every sync, so its next one finds this write done, waits for it, or writes it again.
      const written = await untilGone(
        settledBy(this.write(deviceId, record, input, nowMs), answerBy - this.now()),
        gone,
      );
      if (!written) this.counts.writesOutlastingSyncs++;
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
    return {
      records: this.records.size,
      held,
      presencePending: this.seen.size,
      ...this.counts,
      feedLateness: this.feed.latenessSoFar(),
      answers: this.answers.stats(),
    };
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

  private news(deviceId: string, input: TwinSyncInput, holdMs: number, gone?: AgentGone): Promise<void> {
    return new Promise<void>((resolve) => {
      const set = this.waiting.get(deviceId) ?? new Set<Waiter>();
      this.waiting.set(deviceId, set);
      let forget: (() => void) | undefined;
      const waiter: Waiter = {
        done: () => {
          clearTimeout(timer);
          forget?.();
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
      set.add(waiter);
      forget = gone?.whenGone(waiter.done);
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
      const reading = this.loading.get(change.deviceId);
      // A device this gateway has not served (and is not reading) reads its twin at its first sync here.
      if (!record && !reading) continue;
      if (record && !reading && change.version !== null && change.version <= record.state.version) continue;
      this.counts.feedChanges++;
      // A read in flight may have been sent before this change (a device's first read, as a rollout desires it):
      // the feed delivers a change once, so the record is read again after it unless it already shows the change.
      (reading ?? Promise.resolve())
        .catch(() => undefined)
        .then(() => {
          const now = this.records.get(change.deviceId);
          if (now && change.version !== null && change.version <= now.state.version) return now;
          return this.reload(change.deviceId);
        })
        .then(
          () => this.wake(change.deviceId),
          (err: Error) => {
            // Read again at the device's next sync.
            const now = this.records.get(change.deviceId);
            if (now) now.loadedAt = 0;
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
    const load = this.reads
      .run(async () => {
        const loadedAt = this.now();
        let view = await readTwinRecord(this.opts.client, deviceId);
        // A hook that asked nothing left no twin to read: a second query would only say so again, and in a storm of
        // first syncs each query waits behind the others (bench/README.md at 8f9a7e9, the gateway's third round).
        if (!view && (await this.opts.onFirstSync?.(deviceId))) view = await readTwinRecord(this.opts.client, deviceId);
        this.counts.reads++;
        const previous = this.records.get(deviceId);
        // A pending re-verify was asked at this version or before: a report knowing it answers it.
        const state = restoreTwinState(
          deviceId,
          view
            ? {
                ...view,
                desired: this.shared(view.desired),
                reverifyVersion: view.reverify ? view.version : 0,
                syncs: 0,
              }
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
      })
      .finally(() => this.loading.delete(deviceId));
    this.loading.set(deviceId, load);
    return load;
  }

  /**
   * Write a sync's report to the twin and record it as written. A write that fails rejects its sync when the sync is
   * still waiting for it; one that fails after its sync was answered is logged, and the record stays as it was, so
   * the device's next sync writes the report again. Once written, the applies its final answers answer are
   * completed (./answers.ts); the twin is told so, and stamps no change for a report whose answers all go so.
   */
  private write(deviceId: string, record: DeviceRecord, input: TwinSyncInput, nowMs: number): Promise<void> {
    const report = input.report!;
    const { deliveries, allDelivered } = deliveriesOf(deviceId, record.state, report);
    const writing = this.writes
      .run(() =>
        reportToTwin(this.opts.client, this.opts.taskQueue, deviceId, {
          report,
          knownVersion: input.knownVersion,
          sentAt: new Date(nowMs).toISOString(),
          ...(allDelivered ? { answersDelivered: true } : {}),
        }),
      )
      .then(() => {
        recordSync(record.state, input, new Date(nowMs).toISOString());
        record.forwardedAtMs = nowMs;
        this.counts.forwards++;
        if (deliveries.length > 0) void this.answers.deliver(deliveries);
      })
      .finally(() => {
        if (record.writing === writing) record.writing = undefined;
      });
    record.writing = writing;
    writing.catch((err: Error) =>
      this.log(
        `${deviceId}: report not written to the twin (${err.message.slice(0, 200)}); written again at the next sync`,
      ),
    );
    return writing;
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
}
