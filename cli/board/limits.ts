/**
 * The board's bounds (docs/operations.md, "The board"; SECURITY.md, "The board"): every request's size and
 * time, its live streams, sessions, wrong tokens and how long an answer waits for Temporal.
 */
export const BOARD_LIMITS = {
  maxBodyBytes: 16 * 1024,
  maxUrlChars: 2048,
  maxHeaderBytes: 8 * 1024,
  headersTimeoutMs: 10_000,
  requestTimeoutMs: 30_000,
  keepAliveMs: 5_000,
  /** Live-update streams open at once; more are answered 503 BUSY. */
  maxStreams: 32,
  /** A live stream ends after this long (the page's EventSource opens another): none is held for ever. */
  streamMs: 10 * 60_000,
  /** A stream's bytes waiting for a client that does not read them: past this the stream is dropped. */
  streamBufferBytes: 1024 * 1024,
  maxSessions: 1_000,
  /** Sessions of one operator: a new one ends that operator's oldest, never another operator's. */
  sessionsPerOperator: 16,
  sessionMs: 12 * 3600_000,
  /** An answer that needs Temporal comes within this, else 503 UNAVAILABLE (docs/operations.md). */
  temporalMs: 10_000,
  /** A control, once Temporal answered: the workflow takes it (a worker's task, slower on a busy host). */
  controlMs: 30_000,
  /** A revert or converge start, once Temporal answered: its checks and the worker preflight (30 s). */
  startMs: 60_000,
  /** What a wrong token costs: this long, and a log line (without the token). */
  wrongTokenMs: 250,
  /** Wrong tokens from one client address: a burst of this many, then one per guessRefillMs (429 beyond). */
  guessBurst: 10,
  guessRefillMs: 6_000,
  /** How often a stream polls the rollout's status (one query; the whole view only when it changed). */
  pollMs: 1_000,
  heartbeatMs: 15_000,
} as const;
