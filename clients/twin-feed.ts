import type { Client } from '@temporalio/client';
import { WavegateDesiredAt, WavegateReportedAt, WavegateTwinVersion } from '../contracts/search-attributes';
import { TWIN_WORKFLOW } from '../contracts/twin';

/**
 * The twin change feed (docs/architecture.md, "The twin change feed"): a twin stamps `WavegateDesiredAt` (and
 * `WavegateTwinVersion`) when its desired state or a re-verify request changes, and `WavegateReportedAt` when it
 * records a report. A reader learns every change since it last looked with ONE visibility list call per interval,
 * whatever the size of the fleet: the gateway follows `desired` (to wake the long-polls it holds), the worker
 * follows `reported` (to finish the applies waiting for an agent's answer). Visibility is eventually consistent,
 * so each call looks back `overlapMs` past the newest change it saw and drops what it already delivered.
 */
export type TwinFeedKind = 'desired' | 'reported';

export interface TwinChange {
  deviceId: string;
  /** When the twin stamped the change (its workflow clock, ms). */
  atMs: number;
  /** The desired version stamped with a `desired` change (null for `reported`, or a twin that carries none). */
  version: number | null;
}

const ATTRIBUTE = { desired: WavegateDesiredAt, reported: WavegateReportedAt } as const;
const TWIN_ID = /^device:(.+)$/;

/** One list call: the twins whose `kind` changed after `sinceMs` (a run continued-as-new counts once, the newest). */
export async function listTwinChanges(
  client: Client,
  kind: TwinFeedKind,
  sinceMs: number,
  limit = 20_000,
): Promise<TwinChange[]> {
  const key = ATTRIBUTE[kind];
  const query = `WorkflowType = '${TWIN_WORKFLOW}' AND ${key.name} > '${new Date(sinceMs).toISOString()}'`;
  const newest = new Map<string, TwinChange>();
  let seen = 0;
  for await (const info of client.workflow.list({ query, pageSize: 1_000 })) {
    if (++seen > limit) break;
    const id = TWIN_ID.exec(info.workflowId)?.[1];
    const at = info.typedSearchAttributes.get(key);
    if (id === undefined || !(at instanceof Date)) continue;
    const version = kind === 'desired' ? (info.typedSearchAttributes.get(WavegateTwinVersion) ?? null) : null;
    const change = { deviceId: id, atMs: at.getTime(), version };
    const known = newest.get(id);
    if (!known || known.atMs < change.atMs) newest.set(id, change);
  }
  return [...newest.values()];
}

export interface TwinFeedOptions {
  /** How often to look (default 500 ms). */
  intervalMs?: number;
  /**
   * How far back past the newest change seen each look reaches, for visibility's lag (default 3 s: at 10,000 agents
   * every desired change showed within 2 s of the newest listed before it, 89% in order; bench/README.md).
   */
  overlapMs?: number;
  /**
   * Every wideEveryMs (default 30 s) a look reaches back wideOverlapMs (default 60 s) instead: a twin stamps its
   * change with its workflow task's start time, and under load the task can complete (and the change become
   * visible) well after the newest change already listed.
   */
  wideOverlapMs?: number;
  wideEveryMs?: number;
  onChanges: (changes: TwinChange[]) => void;
  /** A failed look, once per failure streak (the feed goes on looking). */
  onError?: (err: Error) => void;
  now?: () => number;
}

/**
 * How late the feed saw its changes: each change first listed, by how far its stamp was behind the newest change
 * listed before it (visibility is eventually consistent, so a change can become visible after newer ones). In order
 * (not behind), up to 1 s, 2 s, 5 s behind, and further. Past `overlapMs` (3 s by default) only the wide look finds
 * a change, up to `wideEveryMs` later.
 */
export interface TwinFeedLateness {
  inOrder: number;
  upTo1s: number;
  upTo2s: number;
  upTo5s: number;
  later: number;
}

/** Follows one kind of twin change: delivers each change once, in one list call per interval. */
export class TwinFeed {
  private readonly lateness: TwinFeedLateness = { inOrder: 0, upTo1s: 0, upTo2s: 0, upTo5s: 0, later: 0 };
  private watermark: number;
  private readonly delivered = new Map<string, number>();
  private timer: NodeJS.Timeout | undefined;
  private running = false;
  private failingSince: number | null = null;
  private lastOkAt: number;
  private readonly intervalMs: number;
  private readonly overlapMs: number;
  private readonly wideOverlapMs: number;
  private readonly wideEveryMs: number;
  private lastWideAt = 0;
  private readonly now: () => number;

  constructor(
    private readonly client: Client,
    private readonly kind: TwinFeedKind,
    private readonly opts: TwinFeedOptions,
  ) {
    this.intervalMs = opts.intervalMs ?? 500;
    this.overlapMs = opts.overlapMs ?? 3_000;
    this.wideOverlapMs = Math.max(this.overlapMs, opts.wideOverlapMs ?? 60_000);
    this.wideEveryMs = opts.wideEveryMs ?? 30_000;
    this.now = opts.now ?? Date.now;
    this.watermark = this.now();
    this.lastOkAt = this.now();
  }

  start(): void {
    if (this.running) return;
    this.running = true;
    this.schedule(0);
  }

  stop(): void {
    this.running = false;
    clearTimeout(this.timer);
  }

  /** Since when the feed has failed to look (null: its last look worked). */
  failingFor(): number {
    return this.failingSince === null ? 0 : this.now() - this.failingSince;
  }

  /** When the feed last looked successfully: changes stamped before (minus the overlap) have been delivered. */
  lastLookAt(): number {
    return this.lastOkAt;
  }

  /** How late the changes delivered so far were seen (TwinFeedLateness). */
  latenessSoFar(): TwinFeedLateness {
    return { ...this.lateness };
  }

  private countLateness(behindMs: number): void {
    if (behindMs <= 0) this.lateness.inOrder++;
    else if (behindMs <= 1_000) this.lateness.upTo1s++;
    else if (behindMs <= 2_000) this.lateness.upTo2s++;
    else if (behindMs <= 5_000) this.lateness.upTo5s++;
    else this.lateness.later++;
  }

  /** Look now (tests, and the interval's tick). */
  async look(): Promise<void> {
    const started = this.now();
    const wide = started - this.lastWideAt >= this.wideEveryMs;
    try {
      const changes = await listTwinChanges(
        this.client,
        this.kind,
        this.watermark - (wide ? this.wideOverlapMs : this.overlapMs),
      );
      if (wide) this.lastWideAt = started;
      const fresh: TwinChange[] = [];
      const before = this.watermark;
      for (const change of changes) {
        const key = `${change.deviceId}@${change.atMs}`;
        if (this.delivered.has(key)) continue;
        this.delivered.set(key, change.atMs);
        fresh.push(change);
        this.countLateness(before - change.atMs);
        if (change.atMs > this.watermark) this.watermark = change.atMs;
      }
      // Forget what fell out of the look-back window: it cannot be listed again.
      for (const [key, at] of this.delivered)
        if (at < this.watermark - 2 * this.wideOverlapMs) this.delivered.delete(key);
      this.failingSince = null;
      this.lastOkAt = started;
      if (fresh.length > 0) this.opts.onChanges(fresh);
    } catch (err) {
      if (this.failingSince === null) {
        this.failingSince = started;
        this.opts.onError?.(err as Error);
      }
    }
  }

  private schedule(ms: number): void {
    if (!this.running) return;
    this.timer = setTimeout(() => {
      void this.look().finally(() => this.schedule(this.intervalMs));
    }, ms);
    this.timer.unref();
  }
}
