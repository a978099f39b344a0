import type { DeviceFloor } from '../../core/floor';
import type { DeviceTarget } from '../../core/rollout-state';

/**
 * A session to a device: what the SSH channel (device/channel/ssh.ts) runs snapshot reads, applies,
 * the board's verify and health commands over, and what the pull agent applies over on its own device
 * (./local.ts). Activities never open one themselves: they ask the device's channel (device/channel/).
 */
export interface DeviceTransport {
  /** Open a session to the device. Throws TransportError; `retryable` says whether another attempt can help. */
  connect(target: DeviceTarget, opts?: ConnectOptions): Promise<DeviceSession>;
}

export interface ConnectOptions {
  /** Limit for reaching the device and logging in (per hop, for a device behind a jump host). */
  connectTimeoutMs?: number;
}

export interface ExecResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

export interface ExecOptions {
  timeoutMs?: number;
  env?: Record<string, string>;
  /**
   * Called every `progressIntervalMs` while the command runs, with the time it has run so far: long
   * applies heartbeat through it so Temporal knows the worker is alive.
   */
  onProgress?: (elapsedMs: number) => void;
  /** Default 5 s: well inside any sensible heartbeat timeout. */
  progressIntervalMs?: number;
  /**
   * Bytes for the command's standard input, then end of file (the apply script streams small payloads
   * this way). A transport that cannot send them gives the command an empty input.
   */
  stdin?: Buffer;
}

/** One payload file to put on the device. */
export interface StagedFile {
  name: string;
  /** Hex SHA-256 the copy on the device must have. */
  sha256: string;
  /**
   * The file's bytes, asked for just before they are sent: one file in memory at a time. The caller
   * checks the local copy against `sha256` here and throws if it does not match.
   */
  read(): Buffer;
}

export interface StageOptions {
  timeoutMs: number;
  /** Called after each file lands: many or large files must not look like a dead worker. */
  onStaged?: (name: string) => void;
}

/**
 * An open connection to one device. Every operation fails with TransportError when the device cannot
 * be talked to, and with StepFailed when the device ran something and said no. `close()` also ends
 * operations in flight (they fail as `dropped`): health probes use it to stop at their deadline.
 */
export interface DeviceSession {
  /** Run a shell command on the device; a non-zero exit is a result, not an error. */
  exec(command: string, opts?: ExecOptions): Promise<ExecResult>;
  /**
   * Put files into `dir` (relative to the device login's $HOME) and confirm their SHA-256 on the device
   * itself, so a file corrupted on the way is caught before anything runs it.
   */
  stage(dir: string, files: readonly StagedFile[], opts: StageOptions): Promise<void>;
  /** The revision the device's marker for `profile` names, or null when it has none (or garbage). */
  readMarker(profile: string, opts: { timeoutMs: number }): Promise<number | null>;
  /** Record on the device that `revision` of `profile` is in place. */
  writeMarker(profile: string, revision: number, opts: { timeoutMs: number }): Promise<void>;
  /** The device's floor for `profile` (core/floor.ts), or null when it has none. */
  readFloor(profile: string, opts: { timeoutMs: number }): Promise<DeviceFloor | null>;
  /**
   * Take the device's apply lock for `profile` (atomically), or say who holds it. When the holder is the
   * same unit (rollout, run, activity), the lock records `holder.attempt` as its attempt (`ours`).
   *
   * With `breakOwnerless`, a lock with no owner and no launch (a claim cut off between taking the lock
   * and naming its owner: the claimer died) is put aside as `last-apply` and taken.
   */
  claimApplyLock(
    profile: string,
    claim: { holder: ApplyHolder; revision: number; step: string; breakOwnerless?: boolean },
    opts: { timeoutMs: number },
  ): Promise<ApplyLockClaim>;
  /** The lock's record, or null when no lock is held. */
  readApplyLock(profile: string, opts: { timeoutMs: number }): Promise<ApplyLockRecord | null>;
  /**
   * Start `command` on the device detached from this session, inside the held lock, at most once per
   * lock: it keeps running when the session drops, and records its exit status and output there.
   */
  launchApply(profile: string, command: string, opts: { timeoutMs: number }): Promise<'launched' | 'already-launched'>;
  /** Release the lock (kept as the device's last-apply record, with `reason`) if this exact attempt of `holder` holds it. */
  releaseApplyLock(profile: string, holder: ApplyHolder, reason: string, opts: { timeoutMs: number }): Promise<boolean>;
  close(): void;
}

/**
 * Who runs an apply: one activity of one workflow run. Its retries are the same unit (same rollout,
 * run and activity) with a higher attempt; anything else is another unit.
 */
export interface ApplyHolder {
  rollout: string;
  run: string;
  activity: string;
  attempt: number;
}

/** What the device's apply lock records (docs/formats.md, "The apply lock"). */
export interface ApplyLockRecord {
  /** null: the lock directory exists but names no holder (being taken this instant, or damaged). */
  holder: ApplyHolder | null;
  revision: number | null;
  step: string | null;
  /** When the lock was taken, and when the holder's current attempt claimed it (worker clock, ISO 8601). */
  takenAt: string | null;
  attemptAt: string | null;
  /** The apply was started under this lock (it is started at most once). */
  launched: boolean;
  /** The detached wrapper's pid, once known. */
  pid: number | null;
  /** The wrapper or the apply process is still running on the device. */
  running: boolean;
  /** Written when the apply ended: its exit status (null if unreadable) and the last 400 bytes of its output. */
  outcome: { code: number | null; tail: string } | null;
}

export type ApplyLockClaim = { state: 'acquired' | 'ours' | 'theirs'; record: ApplyLockRecord };
