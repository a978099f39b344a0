/**
 * The gateway's bounds under load (docs/operations.md, "Gateway limits"): how many connections and
 * requests it holds, in all and per source address, how many long-polls per device, and how many
 * refusal lines it writes. Plain counters and decisions, no I/O: gateway/server.ts applies them.
 */
export interface GatewayLimits {
  /** Open TCP connections in all; one more is closed at once. */
  maxConnections: number;
  /** Open TCP connections from one source address (devices behind one NAT share one). */
  maxConnectionsPerSource: number;
  /** Requests being handled at once, in all (long-polls included); more are answered 503 BUSY. */
  maxRequests: number;
  /** Requests being handled at once from one source address. */
  maxRequestsPerSource: number;
  /** Long-polls (syncs that may wait) held at once in all. */
  maxLongPolls: number;
  /** Long-polls one device may hold at once (an agent holds one; two covers a reconnect racing the old one). */
  maxLongPollsPerDevice: number;
  /** Live nonces one device may hold in the replay cache (core/agent-auth.ts NonceCache). */
  noncesPerDevice: number;
  /** Refusal lines written per second; the rest are counted and summed up in one line. */
  refusalLogPerSecond: number;
}

export const DEFAULT_LIMITS: GatewayLimits = {
  // A held long-poll is a timer and a callback in the gateway's memory (no Temporal work): a gateway holds a fleet
  // of 10,000 syncing agents with these (bench/README.md, "Agent devices at scale"; each connection is a descriptor:
  // raise `ulimit -n` above maxConnections).
  maxConnections: 20_000,
  maxConnectionsPerSource: 1_000,
  maxRequests: 20_000,
  maxRequestsPerSource: 1_000,
  maxLongPolls: 20_000,
  maxLongPollsPerDevice: 2,
  noncesPerDevice: 256,
  refusalLogPerSecond: 20,
};

/** An authenticated request's body (a sync's report is a few KiB): past it, 413 TOO_LARGE. */
export const MAX_BODY_BYTES = 256 * 1024;

/** Connections the kernel queues before the gateway accepts them (capped by net.core.somaxconn). */
export const LISTEN_BACKLOG = 4096;

/** The time bounds (ms) that keep a slow or idle connection from holding the gateway's memory for long. */
export const GATEWAY_TIMEOUTS = {
  /** From a connection's first byte to the end of its request headers (Node's headersTimeout). */
  headersMs: 10_000,
  /** From a request's start to the end of its (bounded) body: Node's requestTimeout; a long-poll's wait is after it. */
  requestMs: 30_000,
  /**
   * From an authenticated request's headers to the end of its body (at most 256 KiB, a few KiB from an
   * agent): a client that declares more than it sends is answered 408 BODY_TIMEOUT and cut then, instead
   * of holding its request slot and its device's share until requestMs.
   */
  bodyMs: 5_000,
  /** A kept-alive connection between requests. */
  keepAliveMs: 5_000,
  /** A socket with no traffic at all (a connection that never sends a byte, a TLS handshake that stalls). */
  idleMs: 30_000,
  /** After a refusal sent with `Connection: close`, how long the gateway waits for the client to close. */
  lingerMs: 2_000,
  /** The largest request head (request line and headers); the Authorization header alone is at most 1 KB. */
  maxHeaderBytes: 8 * 1024,
} as const;

/** Counts per key with a cap; `take` says whether one more fits and counts it when it does. */
export class KeyedCounter {
  private readonly counts = new Map<string, number>();
  private sum = 0;

  constructor(
    private readonly perKey: number,
    private readonly total: number,
  ) {}

  /** 'ok' (counted), 'key' (this key holds its cap) or 'total' (all keys together do). */
  take(key: string): 'ok' | 'key' | 'total' {
    if (this.sum >= this.total) return 'total';
    const held = this.counts.get(key) ?? 0;
    if (held >= this.perKey) return 'key';
    this.counts.set(key, held + 1);
    this.sum++;
    return 'ok';
  }

  release(key: string): void {
    const held = this.counts.get(key);
    if (held === undefined) return;
    if (held <= 1) this.counts.delete(key);
    else this.counts.set(key, held - 1);
    this.sum--;
  }

  of(key: string): number {
    return this.counts.get(key) ?? 0;
  }

  get size(): number {
    return this.sum;
  }

  /** Keys holding anything: the map is emptied as counts return to 0, so a flood leaves nothing behind. */
  get keys(): number {
    return this.counts.size;
  }
}

/**
 * At most `perSecond` refusal lines in any one-second window; past that, lines are counted, and the
 * next window's first line (or `flush`, on a timer) says how many were suppressed. A flood of refused
 * requests costs a counter, not a log line each.
 */
export class RefusalLog {
  private windowStart = -Infinity;
  private written = 0;
  private suppressed = 0;

  constructor(
    private readonly write: (line: string) => void,
    private readonly perSecond: number,
    private readonly now: () => number = Date.now,
  ) {}

  line(text: string): void {
    const t = this.now();
    if (t - this.windowStart >= 1_000) {
      this.flush();
      this.windowStart = t;
      this.written = 0;
    }
    if (this.written < this.perSecond) {
      this.written++;
      this.write(text);
    } else this.suppressed++;
  }

  /** Write the summary of what was suppressed, if anything was. */
  flush(): void {
    if (this.suppressed === 0) return;
    this.write(
      `suppressed ${this.suppressed} refusal line${this.suppressed === 1 ? '' : 's'} (more than ${this.perSecond} a second)`,
    );
    this.suppressed = 0;
  }

  get pending(): number {
    return this.suppressed;
  }
}
