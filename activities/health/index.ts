import { Context } from '@temporalio/activity';
import { setMaxListeners } from 'node:events';
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { statSync } from 'node:fs';
import { readText } from '../../intake/files';
import { resolveSecretFile } from '../../intake/secret-policy';
import {
  METRICS_TOKENS,
  metricsPolicyFromEnv,
  secretEnvAllowed,
  urlRefusal,
  type SecretPolicy,
} from '../../core/secret-policy';
import { checkedLookup, systemResolve, type ResolveHost } from '../../intake/checked-lookup';
import {
  formatHealthCheck,
  inlineCredential,
  meetsThreshold,
  parseHealthCheck,
  readMetricValue,
  readPrometheusValue,
  redactUrl,
  runsOnDevices,
  scrubCredentials,
  type CheckResult,
  type GateOutcome,
  type HealthCheck,
  type ThresholdOp,
} from '../../core/health';
import { namedHealthChecks, type Profile, type RevisionHealth } from '../../core/revision';
import type { DeviceTarget } from '../../core/rollout-state';
import { verifySignatureMemoized } from '../../device/signature-memo';
import { verifyEnvelope, type Envelope } from '../../core/signing';
import { CHECKOUT_PROFILES_ROOT, EnvelopeRejected, loadWorkerTrust } from '../../device/steps';
import { TransportError } from '../../device/transport';
import { mapLimit } from '../../core/map-limit';
import {
  channelFor,
  type ChannelDeps,
  type DeviceChannel,
  type HealthQuestion,
  type Reading,
  type TwinReader,
} from '../../device/channel';

/**
 * Health probes (step 5 of a rollout, docs/architecture.md): run one health-gate check and say `pass`, `fail` or
 * `inconclusive` with short evidence. A check never throws for what it finds: a device that said no
 * is `fail`, a fact we could not read (timeout, unreachable metrics source, garbage output) is
 * `inconclusive`, and the workflow never advances on either.
 *
 * Per-device checks (`devices-online`, `all-runtimes-healthy`, `check: <name>`, and `error-rate` from a
 * signed command) ask each device given (the changed devices) through its channel (./channel: a session
 * over SSH, its agent's latest report for an agent device), `concurrency` at a time. Evidence of a fail wins over unread devices: one device that
 * answered "unhealthy" fails the check even if others could not be reached.
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

type Verdict = Omit<CheckResult, 'check' | 'durationMs'>;

/**
 * What one device told us, or why it could not: not reached before the deadline, unreachable or timed
 * out within it, or (Reading) reached with no answer that counts: `no-report` is an agent whose report
 * is older than its freshness bound, whatever the check's timeout.
 */
type DeviceAnswer<T> =
  | { device: string; ok: true; value: T }
  | {
      device: string;
      ok: false;
      reason: string;
      kind: 'unreachable' | 'timeout' | 'not-reached' | 'no-report' | 'unanswered';
    };
type Unread = Extract<DeviceAnswer<unknown>, { ok: false }>;

interface Probe {
  deadline: number;
  signal: AbortSignal;
  progress(done: number, total: number): void;
}

const EVIDENCE_LIMIT = 600;
/** A bearer token file larger than this is not a token. */
const TOKEN_FILE_LIMIT = 16 * 1024;
/** The most of a metrics answer read when a token was sent (a number or a Prometheus vector is far less). */
const TOKEN_ANSWER_LIMIT = 1024 * 1024;

type TokenRef = { tokenEnv?: string; tokenFile?: string };

/** The target revision's health section as the worker's own verification opened it. */
interface SignedHealth {
  revision: number;
  health?: RevisionHealth;
}

/** A raw device command an input from an old client carries (`runtimes[].health`, `metrics.errorRate.command`), or undefined. */
function rawDeviceCommand(input: HealthCheckInput): string | undefined {
  const runtimes = input.runtimes;
  if (Array.isArray(runtimes) ? runtimes.length > 0 : runtimes !== undefined && runtimes !== null)
    return 'runtimes[].health';
  const source = input.metrics?.errorRate as Record<string, unknown> | undefined;
  if (source && typeof source === 'object' && 'command' in source) return 'metrics.errorRate.command';
  return undefined;
}
const NO_ANSWER = `no answer within the check's timeout`;
const ACCEPT = 'application/json, text/plain;q=0.9, */*;q=0.1';

export function createHealthActivities(deps: HealthActivityDeps = {}) {
  const doFetch = deps.fetch ?? fetch;
  const concurrency = Math.max(1, deps.concurrency ?? 16);
  const connectCap = deps.connectTimeoutMs ?? 10_000;
  const profilesRoot = deps.profilesRoot ?? CHECKOUT_PROFILES_ROOT;
  const now = deps.now ?? Date.now;
  const metricsPolicy = deps.metricsPolicy ?? metricsPolicyFromEnv(process.env);
  const resolveHost = deps.resolveHost ?? systemResolve;

  // Agent devices' twins: the reader given, else the activity's own client (none outside an activity: unread, saying so).
  const channels: ChannelDeps = {
    ...(deps.twins ? { twins: deps.twins } : {}),
    client: () => activityContext()?.client,
    now,
  };

  /** Ask each device its question through its channel, bounded by the check's deadline. */
  async function onEachDevice<T>(
    devices: DeviceTarget[],
    probe: Probe,
    ask: (channel: DeviceChannel, device: DeviceTarget, q: HealthQuestion) => Promise<Reading<T>>,
  ): Promise<DeviceAnswer<T>[]> {
    let done = 0;
    return mapLimit(devices, concurrency, async (device): Promise<DeviceAnswer<T>> => {
      const remainingMs = () => probe.deadline - Date.now();
      try {
        if (remainingMs() <= 0 || probe.signal.aborted)
          return {
            device: device.id,
            ok: false,
            kind: 'not-reached',
            reason: 'not reached before the check timed out',
          };
        const read = await ask(channelFor(device, channels), device, {
          remainingMs,
          signal: probe.signal,
          connectTimeoutMs: connectCap,
        });
        return read.ok
          ? { device: device.id, ok: true, value: read.value }
          : { device: device.id, ok: false, kind: read.kind, reason: read.reason };
      } catch (err) {
        const reason = withoutDevicePrefix(device.id, (err as Error).message);
        if (probe.signal.aborted || (err instanceof TransportError && err.kind === 'timeout'))
          return { device: device.id, ok: false, kind: 'timeout', reason };
        return { device: device.id, ok: false, kind: 'unreachable', reason };
      } finally {
        probe.progress(++done, devices.length);
      }
    });
  }

  async function devicesOnline(input: HealthCheckInput, probe: Probe): Promise<Verdict> {
    if (input.devices.length === 0) return { outcome: 'pass', evidence: 'no changed devices to check' };
    const answers = await onEachDevice(input.devices, probe, (channel, device, q) => channel.online(device, q));
    // A device that did not answer within the check's time is not online: only devices we never got
    // to (the deadline passed while they queued) are unknown, and agents whose last report is too old to say.
    const offline = answers.filter((a) => (a.ok ? a.value !== null : a.kind === 'unreachable' || a.kind === 'timeout'));
    if (offline.length) {
      const why = offline.map((a) => `${a.device} (${a.ok ? a.value : a.reason})`);
      return {
        outcome: 'fail',
        evidence: `${offline.length} of ${answers.length} devices not online: ${list(why)}`,
        failedDevices: offline.map((a) => a.device),
      };
    }
    const unread = answers.filter((a): a is Unread => !a.ok);
    if (unread.length) {
      const notReached = unread.filter((a) => a.kind === 'not-reached');
      const parts = [
        ...(notReached.length
          ? [
              `${notReached.length} of ${answers.length} devices not reached within ${input.timeoutMs} ms: ${list(notReached.map((a) => a.device))}`,
            ]
          : []),
        ...unreadBeyondTimeout(unread, answers.length),
      ];
      return { outcome: 'inconclusive', evidence: parts.join('; '), failedDevices: unread.map((a) => a.device) };
    }
    return { outcome: 'pass', evidence: `${answers.length}/${answers.length} devices online` };
  }

  /** Run the signed commands on each device (or read its agent's report of them); exit 0 = healthy. Names are what the evidence calls each command. */
  async function commandsOnDevices(
    devices: DeviceTarget[],
    commands: { name: string; command: string }[],
    probe: Probe,
    timeoutMs: number,
    about: { profile?: string; revision?: number } = {},
  ): Promise<Verdict> {
    if (devices.length === 0) return { outcome: 'pass', evidence: 'no changed devices to check' };
    const answers = await onEachDevice(devices, probe, (channel, device, q) =>
      channel.runChecks(device, commands, about, q),
    );
    const unhealthy = answers.filter((a): a is Extract<typeof a, { ok: true }> => a.ok && a.value.length > 0);
    const unread = answers.filter((a): a is Unread => !a.ok);
    if (unhealthy.length) {
      const what = unhealthy.flatMap((a) => a.value.map((v) => `${a.device}/${v}`));
      const also = unread.length ? `; ${unread.length} more could not be read` : '';
      return {
        outcome: 'fail',
        evidence: `unhealthy: ${list(what)}${also}`,
        failedDevices: unhealthy.map((a) => a.device),
      };
    }
    if (unread.length) {
      const timed = unread.filter((a) => !beyondTimeout(a));
      const parts = [
        ...(timed.length
          ? [
              `could not read ${timed.length} of ${answers.length} devices within ${timeoutMs} ms: ${list(timed.map((a) => `${a.device} (${a.reason})`))}`,
            ]
          : []),
        ...unreadBeyondTimeout(unread, answers.length),
      ];
      return { outcome: 'inconclusive', evidence: parts.join('; '), failedDevices: unread.map((a) => a.device) };
    }
    const n = commands.length * answers.length;
    return {
      outcome: 'pass',
      evidence: `${n} check${n === 1 ? '' : 's'} on ${answers.length} device${answers.length === 1 ? '' : 's'} exited 0`,
    };
  }

  /** GET a url within the check's deadline; the body is read under the same signal. */
  async function get(
    url: string,
    probe: Probe,
    token?: string,
  ): Promise<{ status: number; body: string } | { error: string }> {
    const secret = inlineCredential(url);
    // The spec and the profile refuse inline credentials; an input that has one anyway is not sent.
    if (secret)
      return {
        error: `refused: the url has ${secret}; give the token by reference (metrics.errorRate.tokenEnv or tokenFile in the profile)`,
      };
    if (token !== undefined) return getWithToken(url, probe, token);
    try {
      const res = await doFetch(url, {
        method: 'GET',
        signal: probe.signal,
        headers: { accept: ACCEPT },
      });
      const body = await res.text();
      return { status: res.status, body };
    } catch (err) {
      if (probe.signal.aborted) return { error: NO_ANSWER };
      const cause = (err as { cause?: { code?: string; message?: string } }).cause;
      const text = cause?.code ?? cause?.message ?? (err as Error).message;
      return { error: scrubCredentials(text.split(url).join(redactUrl(url))).slice(0, 200) };
    }
  }

  /**
   * GET with the worker's metrics token, within the worker's metrics policy (core/secret-policy.ts): an
   * address written in the url judged first, a host name resolved here with every address judged and
   * the connection made to those (no rebinding between check and connect), one connection of its own,
   * no redirect followed (the token goes to the source's own url only), the answer read up to a bound.
   */
  async function getWithToken(
    url: string,
    probe: Probe,
    token: string,
  ): Promise<{ status: number; body: string } | { error: string }> {
    const literal = urlRefusal(url, metricsPolicy);
    if (literal) return { error: `refused, the token not sent: ${literal}` };
    const refusals: string[] = [];
    const target = new URL(url);
    try {
      return await new Promise((resolve, reject) => {
        const req = (target.protocol === 'https:' ? httpsRequest : httpRequest)(
          target,
          {
            method: 'GET',
            headers: { accept: ACCEPT, authorization: `Bearer ${token}`, 'user-agent': 'wavegate-health' },
            agent: false,
            lookup: checkedLookup(resolveHost, metricsPolicy, refusals),
            signal: probe.signal,
          },
          (res) => {
            const chunks: Buffer[] = [];
            let size = 0;
            res.on('data', (chunk: Buffer) => {
              size += chunk.length;
              if (size > TOKEN_ANSWER_LIMIT) {
                res.destroy();
                reject(Object.assign(new Error(`answer larger than ${TOKEN_ANSWER_LIMIT} bytes`), { code: 'ETOOBIG' }));
              } else chunks.push(chunk);
            });
            res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }));
            res.on('error', reject);
            // Cut off (the check's deadline, the source closing): settled, never left pending.
            res.on('close', () => {
              if (!res.complete) reject(Object.assign(new Error('answer cut off'), { code: 'ECONNRESET' }));
            });
          },
        );
        req.on('error', reject);
        req.end();
      });
    } catch (err) {
      if (refusals.length) {
        // The addresses go to the worker's log; the evidence (history, audit) says only that the policy refused.
        activityContext()?.log.warn(`metrics source ${redactUrl(url)} refused: ${refusals.join('; ')}`);
        return {
          error: `refused, the token not sent: ${target.hostname} resolved to an address this worker's metrics token policy does not allow (${METRICS_TOKENS.allowPrivateEnv}, ${METRICS_TOKENS.allowHostsEnv}; the worker's log names it)`,
        };
      }
      if (probe.signal.aborted) return { error: NO_ANSWER };
      const e = err as NodeJS.ErrnoException;
      return { error: scrubCredentials(e.code ?? e.message ?? String(err)).slice(0, 200) };
    }
  }

  /**
   * The source's bearer token, read on this worker from the variable or file the profile names, within
   * the worker's metrics policy: checked here at every query, whatever `plan` said (a profile may have
   * reached the worker from an older CLI, or a hand-written workflow input). The token never reaches
   * the evidence; a refused file's content is never read.
   */
  function tokenOf(source: TokenRef): { ok: true; token?: string } | { ok: false; evidence: string } {
    if (source.tokenEnv !== undefined) {
      if (!secretEnvAllowed(METRICS_TOKENS, source.tokenEnv))
        return {
          ok: false,
          evidence: `refused: the metrics token variable ${source.tokenEnv} is not one this worker sends (only ${METRICS_TOKENS.envPrefix}<NAME>)`,
        };
      const token = process.env[source.tokenEnv]?.trim();
      if (!token)
        return { ok: false, evidence: `the metrics token variable ${source.tokenEnv} is not set on this worker` };
      return { ok: true, token };
    }
    if (source.tokenFile !== undefined) {
      const path = source.tokenFile;
      const where = resolveSecretFile(path, metricsPolicy, true);
      if ('refused' in where)
        return {
          ok: false,
          evidence:
            where.refused === 'outside'
              ? `refused: the metrics token file ${JSON.stringify(path)} is outside this worker's metrics tokens directory (${METRICS_TOKENS.dirEnv}; links and ".." resolved)`
              : `the metrics token file ${path} cannot be read on this worker (missing, or a link that does not resolve)`,
        };
      try {
        const stat = statSync(where.realPath);
        if (!stat.isFile()) return { ok: false, evidence: `the metrics token file ${path} is not a regular file` };
        if (stat.size > TOKEN_FILE_LIMIT)
          return { ok: false, evidence: `the metrics token file ${path} is larger than ${TOKEN_FILE_LIMIT} bytes` };
        // Read through an fstat of the opened file: a FIFO swapped in after the stat above is refused, not waited on.
        const token = readText(where.realPath).trim();
        if (!token || /[\r\n]/.test(token))
          return { ok: false, evidence: `the metrics token file ${path} does not hold one token line` };
        return { ok: true, token };
      } catch (err) {
        return {
          ok: false,
          evidence: `the metrics token file ${path} cannot be read on this worker (${(err as NodeJS.ErrnoException).code ?? 'error'})`,
        };
      }
    }
    return { ok: true };
  }

  async function httpCheck(url: string, probe: Probe, timeoutMs: number): Promise<Verdict> {
    const shown = redactUrl(url);
    const res = await get(url, probe);
    if ('error' in res)
      return {
        outcome: 'inconclusive',
        evidence: `GET ${shown}: ${res.error === NO_ANSWER ? `no answer within ${timeoutMs} ms` : res.error}`,
      };
    const ok = res.status >= 200 && res.status < 300;
    return { outcome: ok ? 'pass' : 'fail', evidence: `GET ${shown} answered ${res.status}` };
  }

  async function prometheusValue(
    base: string,
    query: string,
    probe: Probe,
    timeoutMs: number,
    auth: TokenRef = {},
  ): Promise<{ ok: true; value: number; detail: string } | { ok: false; evidence: string }> {
    const url = `${base.replace(/\/+$/, '')}/api/v1/query?query=${encodeURIComponent(query)}`;
    const shown = redactUrl(base);
    const token = tokenOf(auth);
    if (!token.ok) return { ok: false, evidence: `Prometheus ${shown}: ${token.evidence}` };
    if (inlineCredential(base))
      return {
        ok: false,
        evidence: `Prometheus ${shown}: refused: the url has ${inlineCredential(base)}; give the token by reference (metrics.errorRate.tokenEnv or tokenFile in the profile)`,
      };
    const res = await get(url, probe, token.token);
    if ('error' in res)
      return {
        ok: false,
        evidence: `Prometheus ${shown}: ${res.error === NO_ANSWER ? `no answer within ${timeoutMs} ms` : res.error}`,
      };
    let json: unknown;
    try {
      json = JSON.parse(res.body);
    } catch {
      return { ok: false, evidence: `Prometheus ${shown} answered ${res.status} with a body that is not JSON` };
    }
    const read = readPrometheusValue(json);
    if (!read.ok) return { ok: false, evidence: `Prometheus ${shown}: ${read.reason}` };
    const where = read.label && read.label !== '{}' ? ` at ${read.label}` : '';
    return {
      ok: true,
      value: read.value,
      detail: `${read.series > 1 ? `max of ${read.series} series ` : ''}${read.value}${where}`,
    };
  }

  async function prometheusCheck(
    check: Extract<HealthCheck, { kind: 'prometheus' }>,
    input: HealthCheckInput,
    probe: Probe,
  ): Promise<Verdict> {
    const source = input.metrics?.errorRate;
    const profileSource = source && 'prometheus' in source ? source : undefined;
    // The profile's token goes to the profile's Prometheus only: a url written in the spec gets none.
    const base = check.url ?? profileSource?.prometheus.url;
    if (!base) {
      return {
        outcome: 'inconclusive',
        evidence:
          'no Prometheus url: write "prometheus(<url>): <query> < <number>" or set metrics.errorRate.prometheus.url in the profile',
      };
    }
    const read = await prometheusValue(
      base,
      check.query,
      probe,
      input.timeoutMs,
      check.url === undefined ? profileSource : {},
    );
    if (!read.ok) return { outcome: 'inconclusive', evidence: read.evidence };
    return judged(read.value, check.op, check.threshold, read.detail);
  }

  async function errorRate(
    check: Extract<HealthCheck, { kind: 'error-rate' }>,
    input: HealthCheckInput,
    probe: Probe,
    signed: SignedHealth | undefined,
  ): Promise<Verdict> {
    // The revision's signed command wins: it is what the revision's author said measures it.
    const command = signed?.health?.errorRate?.command;
    if (command !== undefined) return errorRateOnDevices(check, input, probe, command);
    const source = input.metrics?.errorRate;
    if (!source) {
      return {
        outcome: 'inconclusive',
        evidence: `neither the target revision's signed health.errorRate.command nor the profile's metrics.errorRate (http or prometheus) is given, so the error rate cannot be read`,
      };
    }
    if ('prometheus' in source) {
      const read = await prometheusValue(
        source.prometheus.url,
        source.prometheus.query,
        probe,
        input.timeoutMs,
        source,
      );
      if (!read.ok) return { outcome: 'inconclusive', evidence: read.evidence };
      return judged(read.value, check.op, check.threshold, read.detail);
    }
    const shown = redactUrl(source.http);
    const token = tokenOf(source);
    if (!token.ok) return { outcome: 'inconclusive', evidence: `GET ${shown}: ${token.evidence}` };
    const res = await get(source.http, probe, token.token);
    if ('error' in res)
      return {
        outcome: 'inconclusive',
        evidence: `GET ${shown}: ${res.error === NO_ANSWER ? `no answer within ${input.timeoutMs} ms` : res.error}`,
      };
    if (res.status < 200 || res.status >= 300)
      return { outcome: 'inconclusive', evidence: `GET ${shown} answered ${res.status}; no error rate read` };
    const value = readMetricValue(res.body);
    if (!value.ok) return { outcome: 'inconclusive', evidence: `GET ${shown}: ${value.reason}` };
    return judged(value.value, check.op, check.threshold, `${value.value} from ${shown}`);
  }

  /** The signed error-rate command on each changed device; the gate judges the MAX, so one bad device cannot hide behind a healthy average. */
  async function errorRateOnDevices(
    check: Extract<HealthCheck, { kind: 'error-rate' }>,
    input: HealthCheckInput,
    probe: Probe,
    command: string,
  ): Promise<Verdict> {
    if (input.devices.length === 0) return { outcome: 'pass', evidence: 'no changed devices to check' };
    const answers = await onEachDevice(input.devices, probe, (channel, device, q) =>
      channel.errorRate(device, command, { profile: input.profile, revision: input.revision }, q),
    );
    const values: { device: string; value: number }[] = [];
    const unread: string[] = [];
    for (const a of answers) {
      if (!a.ok) unread.push(`${a.device} (${a.reason})`);
      else values.push({ device: a.device, value: a.value });
    }
    const over = values.filter((v) => !meetsThreshold(v.value, check.op, check.threshold));
    if (over.length) {
      over.sort((a, b) => b.value - a.value);
      const also = unread.length ? `; ${unread.length} more could not be read` : '';
      return {
        outcome: 'fail',
        evidence: `error rate not ${check.op} ${check.threshold} on ${list(over.map((v) => `${v.device} (${v.value})`))}${also}`,
        failedDevices: over.map((v) => v.device),
      };
    }
    if (unread.length) {
      return {
        outcome: 'inconclusive',
        evidence: `could not read the error rate of ${unread.length} of ${answers.length} devices: ${list(unread)}`,
        failedDevices: answers.filter((a) => !a.ok).map((a) => a.device),
      };
    }
    const max = values.reduce((m, v) => (v.value > m.value ? v : m));
    return {
      outcome: 'pass',
      evidence: `max error rate ${max.value} (${max.device}) over ${values.length} device${values.length === 1 ? '' : 's'} is ${check.op} ${check.threshold}`,
    };
  }

  /**
   * The revision's signed health section, from the envelope verified against this worker's own pins
   * (`loadWorkerTrust` + `verifyEnvelope`, as an apply verifies its steps). Never the input's word for it.
   */
  function openSignedHealth(
    input: HealthCheckInput,
  ): { ok: true; signed: SignedHealth } | { ok: false; evidence: string } {
    const what = `${input.profile ?? '(no profile)'} r${input.revision ?? '?'}`;
    if (!input.envelope) {
      return {
        ok: false,
        evidence: `refused: this check runs commands on devices, and those are read only from the target revision's signed envelope, which the input does not carry (an unsigned profile, or a client from before signed health checks); nothing was run`,
      };
    }
    try {
      if (typeof input.profile !== 'string')
        throw new EnvelopeRejected('MALFORMED', 'the input names no profile to load pins for');
      const trust = loadWorkerTrust(profilesRoot, input.profile);
      if (!trust)
        throw new EnvelopeRejected(
          'NO_TRUST',
          `this worker has no pins for profile "${input.profile}" (no trust.yaml) to verify the envelope against`,
        );
      const verdict = verifyEnvelope(input.envelope, trust, { now: now(), verifySignature: verifySignatureMemoized });
      if (!verdict.ok) throw new EnvelopeRejected(verdict.reason, verdict.message);
      if (verdict.revision.profile !== input.profile)
        throw new EnvelopeRejected(
          'WRONG_PROFILE',
          `the envelope is a revision of "${verdict.revision.profile}", not of "${input.profile}"`,
        );
      if (input.revision !== undefined && verdict.revision.revision !== input.revision)
        throw new EnvelopeRejected(
          'WRONG_REVISION',
          `the envelope holds r${verdict.revision.revision}, the input says r${input.revision}`,
        );
      return {
        ok: true,
        signed: {
          revision: verdict.revision.revision,
          ...(verdict.revision.health ? { health: verdict.revision.health } : {}),
        },
      };
    } catch (err) {
      const reason =
        err instanceof EnvelopeRejected
          ? `${err.reason}: ${err.message.replace(/^EnvelopeRejected \([^)]*\): /, '')}`
          : (err as Error).message;
      return {
        ok: false,
        evidence: `refused: the envelope of ${what} does not verify against this worker's pins (${reason}); nothing was run`,
      };
    }
  }

  function run(
    check: HealthCheck,
    input: HealthCheckInput,
    probe: Probe,
    signed: SignedHealth | undefined,
  ): Promise<Verdict> {
    const health = signed?.health;
    switch (check.kind) {
      case 'devices-online':
        return devicesOnline(input, probe);
      case 'all-runtimes-healthy': {
        const runtimes = health?.runtimes ?? [];
        if (runtimes.length === 0)
          return Promise.resolve({
            outcome: 'inconclusive',
            evidence: `r${signed?.revision}'s signed health section declares no runtimes, so none can be checked`,
          });
        return commandsOnDevices(input.devices, runtimes, probe, input.timeoutMs, input);
      }
      case 'named': {
        const named = namedHealthChecks(health).find((c) => c.name === check.name);
        if (!named) {
          const known = namedHealthChecks(health).map((c) => c.name);
          return Promise.resolve({
            outcome: 'inconclusive',
            evidence: `r${signed?.revision}'s signed health section has no check "${check.name}" (it has: ${known.join(', ') || 'none'}); nothing was run`,
          });
        }
        return commandsOnDevices(input.devices, [named], probe, input.timeoutMs, input);
      }
      case 'http':
        return httpCheck(check.url, probe, input.timeoutMs);
      case 'prometheus':
        return prometheusCheck(check, input, probe);
      case 'error-rate':
        return errorRate(check, input, probe, signed);
    }
  }

  return {
    /**
     * Run one health-gate check. Usable inside an activity (heartbeats progress, stops on
     * cancellation) and outside one (unit tests call it directly).
     */
    async runHealthCheck(input: HealthCheckInput): Promise<CheckResult> {
      const started = Date.now();
      const parsed = parseHealthCheck(input.check);
      if (!parsed.ok) {
        // The spec validator should have refused it; if one slips through, hold the gate, say why.
        return {
          check: scrubCredentials(String(input.check).trim()),
          outcome: 'inconclusive',
          evidence: clip(parsed.message),
          durationMs: 0,
        };
      }
      const name = formatHealthCheck(parsed.check);
      const refused = (evidence: string): CheckResult => ({
        check: name,
        outcome: 'inconclusive',
        evidence: clip(evidence),
        durationMs: Date.now() - started,
      });
      const raw = rawDeviceCommand(input);
      if (raw) {
        return refused(
          `refused: the input carries an unsigned device command (${raw}), from a client older than signed health checks; device-side commands are read only from the target revision's signed envelope, so nothing was run`,
        );
      }
      // Device-side commands come from the verified envelope only. error-rate opens it when given (its
      // signed command wins); without one it reads the profile's worker-side source.
      let signed: SignedHealth | undefined;
      if (runsOnDevices(parsed.check) || (parsed.check.kind === 'error-rate' && input.envelope)) {
        const opened = openSignedHealth(input);
        if (!opened.ok) return refused(opened.evidence);
        signed = opened.signed;
      }
      const ctx = activityContext();
      const timeoutMs = Math.max(1, input.timeoutMs);
      // One controller held by its own timer, not AbortSignal.any([AbortSignal.timeout(), ...]): a
      // composite signal is weakly held and, collected under GC pressure, never aborts, so a metrics
      // source that accepts and never answers would hang the check for good (nodejs/node#55428).
      const controller = new AbortController();
      // Each device being asked listens on it (its session closes at the deadline): up to `concurrency` at once.
      setMaxListeners(concurrency + 8, controller.signal);
      const timer = setTimeout(
        () => controller.abort(new DOMException(`timed out after ${timeoutMs} ms`, 'TimeoutError')),
        timeoutMs,
      );
      const onCancel = () => controller.abort(ctx?.cancellationSignal.reason);
      ctx?.cancellationSignal.addEventListener('abort', onCancel, { once: true });
      let progress: { done: number; total: number } = { done: 0, total: input.devices.length };
      const heartbeat = () => ctx?.heartbeat({ check: name, ...progress });
      heartbeat();
      // Heartbeat on a clock too: an HTTP query or a single slow device gives no progress events.
      const ticker = ctx ? setInterval(heartbeat, 1_000) : undefined;
      const probe: Probe = {
        deadline: started + timeoutMs,
        signal: controller.signal,
        progress: (done, total) => {
          progress = { done, total };
          heartbeat();
        },
      };
      try {
        const verdict = await run(parsed.check, { ...input, timeoutMs }, probe, signed);
        // A cancelled activity must end as cancelled, not with a verdict made of aborted probes.
        if (ctx?.cancellationSignal.aborted) throw ctx.cancellationSignal.reason;
        return { check: name, ...verdict, evidence: clip(verdict.evidence), durationMs: Date.now() - started };
      } finally {
        if (ticker) clearInterval(ticker);
        clearTimeout(timer);
        ctx?.cancellationSignal.removeEventListener('abort', onCancel);
      }
    },
  };
}

export type HealthActivities = ReturnType<typeof createHealthActivities>;

/** The activity context, or undefined when called directly (tests, tools). */
function activityContext(): Context | undefined {
  try {
    return Context.current();
  } catch {
    return undefined;
  }
}

function judged(value: number, op: ThresholdOp, threshold: number, detail: string): Verdict {
  const outcome: GateOutcome = meetsThreshold(value, op, threshold) ? 'pass' : 'fail';
  return { outcome, evidence: `${detail} is ${outcome === 'pass' ? '' : 'not '}${op} ${threshold}` };
}

function withoutDevicePrefix(device: string, message: string): string {
  return message.startsWith(`${device}: `) ? message.slice(device.length + 2) : message;
}

/** Unread for a reason the check's timeout did not set (an agent's stale report, an answer that is none): its evidence names its own bound. */
function beyondTimeout(a: Unread): boolean {
  return a.kind === 'no-report' || a.kind === 'unanswered';
}

function unreadBeyondTimeout(unread: readonly Unread[], total: number): string[] {
  const beyond = unread.filter(beyondTimeout);
  return beyond.length
    ? [`could not read ${beyond.length} of ${total} devices: ${list(beyond.map((a) => `${a.device} (${a.reason})`))}`]
    : [];
}

function list(items: readonly string[]): string {
  return items.length > 5 ? `${items.slice(0, 5).join(', ')} and ${items.length - 5} more` : items.join(', ');
}

/** Evidence as recorded: bounded, then scrubbed of credentials (urls' userinfo and query values, secret-named values). */
function clip(text: string): string {
  const bounded = text.length > EVIDENCE_LIMIT ? `${text.slice(0, EVIDENCE_LIMIT - 3)}...` : text;
  return scrubCredentials(bounded);
}
