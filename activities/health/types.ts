import type { SecretPolicy } from '../../core/secret-policy';
import type { ResolveHost } from '../../intake/checked-lookup';
import type { CheckResult, HealthCheck } from '../../core/health';
import type { Profile, RevisionHealth } from '../../core/revision';
import type { DeviceTarget } from '../../core/rollout-state';
import type { Envelope } from '../../core/signing';
import type { DeviceChannel, HealthQuestion, Reading, TwinReader } from '../../device/channel';

/**
 * Health probes (step 5 of a rollout, docs/architecture.md): run one health-gate check and say `pass`, `fail` or
 * `inconclusive` with short evidence. A check never throws for what it finds: a device that said no
 * is `fail`, a fact we could not read (timeout, unreachable metrics source, garbage output) is
 * `inconclusive`, and the workflow never advances on either.
 *
 * Per-device checks (`devices-online`, `all-runtimes-healthy`, `check: <name>`, and `error-rate` from a
 * signed command) ask each device given (the changed devices) through its channel (device/channel: a session
 * over SSH, its agent's latest report for an agent device), `concurrency` at a time. Evidence of a fail wins over
 * unread devices: one device that answered "unhealthy" fails the check even if others could not be reached.
 *
 * Every command a check runs on a device, except the worker's own `echo online`, is read from inside
 * the target revision's envelope after the worker verified it against ITS OWN pins (as an apply does,
 * device/steps.ts). An input carrying a raw device command (a client from before signed
 * health checks) or an envelope that does not verify runs nothing: the check is inconclusive, saying why.
 *
 * `timeoutMs` bounds the whole check: every connection and command gets the time left until the
 * check's deadline, and devices not reached by then count as unread. An agent device answers from its
 * latest report at once: one older than the report's freshness bound is unread, and the evidence names
 * that bound, not the check's timeout.
 */
export interface HealthCheckInput {
  /** One `healthGate` entry, as written in the rollout spec (see core/health.ts for the forms). */
  check: string;
  /** The devices the check is about: the ones this rollout changed in the phase. */
  devices: DeviceTarget[];
  /** The profile and revision the devices were brought to: the envelope must hold exactly this. */
  profile?: string;
  revision?: number;
  /** That revision's signed envelope (public content): device-side commands are read from inside it. */
  envelope?: Envelope;
  /** The profile's worker-side metrics source (`errorRate`: http or prometheus, token by reference). */
  metrics?: Profile['metrics'];
  timeoutMs: number;
  /**
   * Clients from before signed health checks sent the profile's raw health commands here. Never run:
   * an input that carries one is refused.
   */
  runtimes?: unknown;
}

export interface HealthActivityDeps {
  /** Where the worker's pins live: `<profilesRoot>/<profile>/trust.yaml` (default this checkout's profiles/). */
  profilesRoot?: string;
  /** Epoch milliseconds for the envelope's expiry check (default now). */
  now?: () => number;
  fetch?: typeof fetch;
  /** Devices probed at once (default 16). */
  concurrency?: number;
  /** Upper bound of connecting to one device (default 10 s; never beyond the check's deadline). */
  connectTimeoutMs?: number;
  /** How agent devices' twins are read (tools, tests); default: with the activity's Temporal client. */
  twins?: TwinReader;
  /**
   * Which metrics tokens this worker reads and where it sends them (core/secret-policy.ts); default: from
   * its environment when the activities are made (a value it cannot read stops the worker).
   */
  metricsPolicy?: SecretPolicy;
  /** How a metrics source's host name is resolved when a token goes to it (default the system resolver). */
  resolveHost?: ResolveHost;
}

/** What a provider finds: the result without the check's name and duration, which the factory adds. */
export type Verdict = Omit<CheckResult, 'check' | 'durationMs'>;

/**
 * What one device told us, or why it could not: not reached before the deadline, unreachable or timed
 * out within it, or (Reading) reached with no answer that counts: `no-report` is an agent whose report
 * is older than its freshness bound, whatever the check's timeout.
 */
export type DeviceAnswer<T> =
  | { device: string; ok: true; value: T }
  | {
      device: string;
      ok: false;
      reason: string;
      kind: 'unreachable' | 'timeout' | 'not-reached' | 'no-report' | 'unanswered';
    };
export type Unread = Extract<DeviceAnswer<unknown>, { ok: false }>;

/** One check's run: its deadline, the signal that stops everything in flight, and its progress (heartbeats). */
export interface Probe {
  deadline: number;
  signal: AbortSignal;
  progress(done: number, total: number): void;
}

/** A metrics source's bearer token by reference (the profile's `metrics.errorRate`). */
export type TokenRef = { tokenEnv?: string; tokenFile?: string };

/** The target revision's health section as the worker's own verification opened it. */
export interface SignedHealth {
  revision: number;
  health?: RevisionHealth;
  /** The revision's signed `verify` command: what the re-verify (`verify`) runs again. */
  verify?: string;
}

/** Ask each device its question through its channel, bounded by the check's deadline (./devices.ts). */
export type AskEachDevice = <T>(
  devices: DeviceTarget[],
  probe: Probe,
  ask: (channel: DeviceChannel, device: DeviceTarget, q: HealthQuestion) => Promise<Reading<T>>,
) => Promise<DeviceAnswer<T>[]>;

/** A GET's answer, or why there is none (`NO_ANSWER` when the check's deadline cut it off). */
export type Got = { status: number; body: string } | { error: string };

/** GET a url within the check's deadline, with the worker's metrics token when one is given (./http-get.ts). */
export type HttpGet = (url: string, probe: Probe, token?: string) => Promise<Got>;

/** A metrics source's token, read on this worker within its metrics policy (./metrics-token.ts). */
export type ReadToken = (source: TokenRef) => { ok: true; token?: string } | { ok: false; evidence: string };

/** The worker's means a provider does its I/O with: made once per `createHealthActivities`. */
export interface ProviderTools {
  askEachDevice: AskEachDevice;
  get: HttpGet;
  tokenOf: ReadToken;
}

/** One check's run as a provider sees it. */
export interface CheckRun<C extends HealthCheck = HealthCheck> {
  check: C;
  /** The input, its `timeoutMs` at least 1. */
  input: HealthCheckInput;
  probe: Probe;
  /** The target revision's verified health section, when the provider opened the envelope (`signedHealth`). */
  signed?: SignedHealth;
  tools: ProviderTools;
}

/**
 * One kind of health check (core/health.ts `HealthCheck['kind']`): how it is run. Each kind has exactly
 * one provider, chosen once per check from its kind (./index.ts `PROVIDERS`); the check's deadline,
 * heartbeats, cancellation and the evidence's bound and scrubbing are the factory's, not the provider's.
 */
export interface CheckProvider<C extends HealthCheck = HealthCheck> {
  /**
   * Whether the target revision's envelope is verified and its health section opened before the check
   * runs: `always` for the checks that run signed commands on devices (core/health.ts `runsOnDevices`; no
   * envelope, or one that does not verify, refuses the check), `when-given` for a check that prefers a
   * signed command but has a worker-side source too, `never` for a check that reads nothing signed.
   */
  readonly signedHealth: 'always' | 'when-given' | 'never';
  run(run: CheckRun<C>): Promise<Verdict>;
}

/** The check of one kind, as core/health.ts parses it. */
export type CheckOf<K extends HealthCheck['kind']> = Extract<HealthCheck, { kind: K }>;

/** The provider table's shape: one provider per kind, so a kind without one does not type-check. */
export type ProviderTable = { readonly [K in HealthCheck['kind']]: CheckProvider<CheckOf<K>> };
