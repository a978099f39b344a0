import type { DeviceTarget } from '../../core/rollout-state';

/**
 * The one way activities reach a device. Snapshot, apply, the fleet board and health probes all go
 * through a DeviceSession, so a second transport (a pull agent on the device) only has to implement
 * these two interfaces; what to run and in which order stays in the callers.
 */
export interface DeviceTransport {
  /** The name inventories and DeviceTargets use for it (`transport: ssh`). */
  readonly name: string;
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
  close(): void;
}
