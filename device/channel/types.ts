import type { Client } from '@temporalio/client';
import type { Device } from '../../core/inventory';
import type { DeviceSnapshot, DeviceTarget } from '../../core/rollout-state';
import type { TwinReader } from '../twin/board';
import type { ApplyHolder, ApplyResult, RevisionSteps } from '../steps';

/**
 * The one way activities, the fleet board and the health gates reach a device (docs/architecture.md,
 * "The device channel"). Each device has exactly one channel, chosen once from its inventory
 * `transport` (./index.ts `channelFor`): `ssh` dials the device and runs commands in a session
 * (./ssh.ts), `agent` never dials it and reads or writes its twin `device:<id>`, whose agent does the
 * work and reports (./agent.ts). Callers ask the question; what "reaching the device" means is the
 * channel's business, so no caller branches on the transport.
 *
 * Failing to talk to the device at all is a thrown error (TransportError from SSH, a twin the client
 * cannot read); a device that was reached but gave no usable answer is a `Reading` that is not ok.
 */
export interface DeviceChannel {
  /** The inventory's name for it (`transport: ssh`). */
  readonly name: string;
  /**
   * Whether its devices have a twin `device:<id>` its answers come from (read with a Temporal client, and with a
   * presence mark saying when the device was last seen): the CLI opens a client only when some device has one.
   */
  readonly hasTwin: boolean;

  /** What the workflow keeps of an inventory device (its DeviceTarget): only a dialled device keeps its ssh settings. */
  target(device: Device): DeviceTarget;

  /** Bring the device to `steps` (apply or rollback: the same operation, to another revision). */
  apply(target: DeviceTarget, steps: RevisionSteps, ctx: ApplyContext): Promise<ApplyResult>;

  /**
   * The device's revision marker and reachability (the canary's probe). Never throws for the device: an
   * unreachable one is `reachable: false` with the error, a refusal named.
   */
  probe(device: DeviceSnapshot, profile: string, opts: ProbeOptions): Promise<DeviceSnapshot>;

  /** devices-online: null when online, else what it answered instead. */
  online(target: DeviceTarget, q: HealthQuestion): Promise<Reading<string | null>>;
  /** The signed checks (runtimes or named checks) by name: the ones that failed (empty: healthy). */
  runChecks(
    target: DeviceTarget,
    checks: readonly SignedCommand[],
    about: About,
    q: HealthQuestion,
  ): Promise<Reading<string[]>>;
  /** The signed `health.errorRate.command`'s value on the device. */
  errorRate(target: DeviceTarget, command: string, about: About, q: HealthQuestion): Promise<Reading<number>>;

  /** The board's read: does the device verify `revision` now (applied, claimed or pending, and why); a device that cannot be read is pending, saying why. */
  boardRead(target: DeviceTarget, q: BoardQuestion): Promise<BoardAnswer>;
  /** Drift: does the revision the device's marker names still verify; a device that cannot be read is unreachable, saying why. */
  drift(target: DeviceTarget, q: DriftQuestion): Promise<DriftAnswer>;
  /** The device's revision marker now (the fleet's revision). Throws when it cannot be read. */
  readMarker(target: DeviceTarget, profile: string, opts: ReadOptions): Promise<number | null>;

  /**
   * `fleet status --reverify`, first half: make the device verify again now. `live`: nothing to ask (its
   * board read verifies now anyway); `asked`; `offline`: it cannot be asked (not syncing, no twin).
   */
  askReverify(target: DeviceTarget, q: ReverifyQuestion): Promise<'live' | 'asked' | 'offline'>;
  /** Second half: whether an asked device has answered. */
  reverified(target: DeviceTarget, q: ReverifyQuestion): Promise<boolean>;

  /**
   * The device's login keys (a rotation on a schedule, core/rotation.ts): only a channel that logs in to the
   * device has them (ssh); absent, the device has no login key to rotate.
   */
  readonly loginKeys?: LoginKeys;
}

/** A login key as the worker holds it: the private key file's path, and its public half. */
export interface LoginKey {
  path: string;
  /** `ssh-ed25519`, ... */
  type: string;
  /** Base64 of the public key blob, as in an authorized_keys line. */
  blob: string;
  /** `SHA256:...`, as `ssh-keygen -lf` prints it. */
  fingerprint: string;
}

/** One rotation's change on a device: which key goes, which comes, in which authorized keys file. */
export interface LoginKeyChange {
  rotation: string;
  old: LoginKey;
  new: LoginKey;
  /** The login's authorized keys file on the device (relative: under its $HOME). */
  file: string;
}

export interface LoginKeyOptions {
  connectTimeoutMs: number;
  commandTimeoutMs: number;
}

/**
 * A device's login keys (./ssh-login-key.ts). Each step is its own connection: `add` logs in with the old key,
 * `prove` and `remove` with the new one, so each is itself a proof of which key logs in.
 */
export interface LoginKeys {
  /** Put the new key beside the old one (idempotent): `present` when it was there already. */
  add(target: DeviceTarget, change: LoginKeyChange, opts: LoginKeyOptions): Promise<'added' | 'present'>;
  /** A fresh login with `key` and a command run over it; throws when the login or the command fails. */
  prove(target: DeviceTarget, key: LoginKey, opts: LoginKeyOptions): Promise<void>;
  /** Remove the old key's lines, only while the new key's is there: `absent` when it was gone already. */
  remove(target: DeviceTarget, change: LoginKeyChange, opts: LoginKeyOptions): Promise<'removed' | 'absent'>;
  /** Whether the device refuses a login with `key` (true), lets it in (false); throws when it cannot be asked. */
  refuses(target: DeviceTarget, key: LoginKey, opts: LoginKeyOptions): Promise<boolean>;
}

/** What a channel needs from the worker or the CLI that built it; every field is optional for the channels that do not use it. */
export interface ChannelDeps {
  /**
   * The Temporal client twins are read and written with, asked for when needed (inside an activity,
   * the worker's own). Absent or undefined: an agent device's twin cannot be reached, and its answers say so.
   */
  client?: () => Client | undefined;
  /** Read twins with this instead (the CLI's fleet reads, tests): defaults to one over `client`. */
  twins?: TwinReader;
  /** The worker's profiles root: its pins and payload files (SSH applies verify the envelope there). */
  profilesRoot?: string;
  /** Run steps without an envelope for profiles the worker has no pins for (SSH applies). */
  allowUnsigned?: boolean;
  /** Epoch milliseconds now (freshness of agents' reports). */
  now?: () => number;
}

export interface ApplyContext {
  /** The apply unit: this activity of this run; its retries reattach to it. */
  holder: ApplyHolder;
  /** The rollout that asks (an agent's desired entry names it). */
  rollout: string | null;
  /** The rollout's task queue (a twin this starts runs there). */
  taskQueue: string;
  commandTimeoutMs: number;
  /** The rollout's phase index the request is for (its receipt names it); absent: none (a compensation, a convergence). */
  phase?: number;
  /** ApplyInput.reportOffline: answer `offline` when the device cannot be reached at first contact. */
  reportOffline?: boolean;
  /** ApplyInput.aheadAbove: answer `ahead` for a device whose marker is above this. */
  aheadAbove?: number;
  heartbeat(detail: string): void;
  signal?: AbortSignal;
  /** Whether the workflow run holding a device's apply lock is closed (a proof its apply is gone). */
  holderClosed(holder: ApplyHolder): Promise<boolean>;
}

export interface ProbeOptions {
  /** Limit for reaching the device (default: the transport's own). */
  connectTimeoutMs?: number;
  /** A marker read that fails or outlasts this after a good connect leaves the device reachable, its marker unknown. */
  readTimeoutMs: number;
}

/** The per-device part of a health check: the check's fan-out (deadline, concurrency, evidence) stays in activities/health.ts. */
export interface HealthQuestion {
  /** Milliseconds left until the check's deadline. */
  remainingMs(): number;
  /** Aborted at the deadline or on cancellation: whatever is in flight stops. */
  signal: AbortSignal;
  /** Upper bound of connecting to the device (never beyond the deadline). */
  connectTimeoutMs: number;
}

/** Which revision a health answer must be about. */
export interface About {
  profile?: string;
  revision?: number;
}

export interface SignedCommand {
  name: string;
  command: string;
}

/**
 * A device's answer to a health question, or why it gave none that counts: `no-report` (an agent whose
 * report is missing or older than its freshness bound: the bound is the real wait, not the check's
 * timeout), `unanswered` (reached, but what it said is not an answer: an exit code, garbage, a report
 * about another revision).
 */
export type Reading<T> = { ok: true; value: T } | { ok: false; kind: 'no-report' | 'unanswered'; reason: string };

export interface ReadOptions {
  connectTimeoutMs?: number;
  commandTimeoutMs?: number;
}

export interface BoardQuestion extends ReadOptions {
  profile: string;
  revision: number;
  verify: string;
  provable: boolean;
}

export interface BoardAnswer {
  state: 'applied' | 'claimed' | 'pending';
  reason?: string;
  marker?: number | null;
  evidence?: string;
  /** `proven`: the device's own receipt of this revision verifies under its enrolled key; else (absent) the read is the control plane's word. */
  proof?: 'proven';
}

export interface DriftQuestion extends ReadOptions {
  profile: string;
  /** The verify command of a revision, or undefined when that revision is unknown here. */
  verifyOf: (revision: number) => string | undefined;
}

export interface DriftAnswer {
  marker: number | null;
  /** `refused`: the device answered but not as pinned (host key, login, config): exit 1 in `drift`, unlike `unreachable`. */
  status: 'ok' | 'drifted' | 'no-marker' | 'unreachable' | 'refused' | 'unknown-revision';
  detail?: string;
}

export interface ReverifyQuestion {
  now?: () => number;
}
