import { Context } from '@temporalio/activity';
import {
  formatHealthCheck,
  meetsThreshold,
  parseHealthCheck,
  readMetricValue,
  readPrometheusValue,
  redactUrl,
  scrubCredentials,
  type CheckResult,
  type GateOutcome,
  type HealthCheck,
  type ThresholdOp,
} from '../core/health';
import type { Profile } from '../core/revision';
import type { DeviceTarget } from '../core/rollout-state';
import { connectDevice, TransportError, type DeviceSession } from './transport';
import { mapLimit } from './map-limit';

/**
 * Health probes (step 5 of a rollout, docs/architecture.md): run one health-gate check and say `pass`, `fail` or
 * `inconclusive` with short evidence. A check never throws for what it finds: a device that said no
 * is `fail`, a fact we could not read (timeout, unreachable metrics source, garbage output) is
 * `inconclusive`, and the workflow never advances on either.
 *
 * Per-device checks (`devices-online`, `all-runtimes-healthy`, `command:`, and `error-rate` from a
 * `command` source) run on the devices given (the changed devices) over their transport, one session per
 * device, `concurrency` at a time. Evidence of a fail wins over unread devices: one device that
 * answered "unhealthy" fails the check even if others could not be reached.
 *
 * `timeoutMs` bounds the whole check: every connection and command gets the time left until the
 * check's deadline, and devices not reached by then count as unread.
 */
export interface HealthCheckInput {
  /** One `healthGate` entry, as written in the rollout spec (see core/health.ts for the forms). */
  check: string;
  /** The devices the check is about: the ones this rollout changed in the phase. */
  devices: DeviceTarget[];
  /** The profile's runtimes with their health commands. */
  runtimes: { name: string; health: string }[];
  /** The profile's metrics sources (`errorRate`). */
  metrics?: Profile['metrics'];
  timeoutMs: number;
}

export interface HealthActivityDeps {
  fetch?: typeof fetch;
  /** Devices probed at once (default 16). */
  concurrency?: number;
  /** Upper bound of connecting to one device (default 10 s; never beyond the check's deadline). */
  connectTimeoutMs?: number;
}

type Verdict = Omit<CheckResult, 'check' | 'durationMs'>;

/** What one device told us, or why it could not. */
type DeviceAnswer<T> = { device: string; ok: true; value: T } | { device: string; ok: false; reason: string; kind: 'unreachable' | 'timeout' | 'not-reached' };

interface Probe {
  deadline: number;
  signal: AbortSignal;
  progress(done: number, total: number): void;
}

const EVIDENCE_LIMIT = 600;
const NO_ANSWER = `no answer within the check's timeout`;

export function createHealthActivities(deps: HealthActivityDeps = {}) {
  const doFetch = deps.fetch ?? fetch;
  const concurrency = Math.max(1, deps.concurrency ?? 16);
  const connectCap = deps.connectTimeoutMs ?? 10_000;

  /** Open a session on each device and run `fn` in it, bounded by the check's deadline. */
  async function onEachDevice<T>(devices: DeviceTarget[], probe: Probe, fn: (session: DeviceSession, remainingMs: () => number) => Promise<T>): Promise<DeviceAnswer<T>[]> {
    const open = new Set<DeviceSession>();
    const closeAll = () => open.forEach((s) => s.close());
    probe.signal.addEventListener('abort', closeAll, { once: true });
    let done = 0;
    try {
      return await mapLimit(devices, concurrency, async (device): Promise<DeviceAnswer<T>> => {
        const remainingMs = () => probe.deadline - Date.now();
        try {
          if (remainingMs() <= 0 || probe.signal.aborted) return { device: device.id, ok: false, kind: 'not-reached', reason: 'not reached before the check timed out' };
          const session = await connectDevice(device, { connectTimeoutMs: Math.max(1, Math.min(connectCap, remainingMs())) });
          open.add(session);
          if (probe.signal.aborted) session.close();
          try {
            return { device: device.id, ok: true, value: await fn(session, remainingMs) };
          } finally {
            open.delete(session);
            session.close();
          }
        } catch (err) {
          const reason = withoutDevicePrefix(device.id, (err as Error).message);
          if (probe.signal.aborted || (err instanceof TransportError && err.kind === 'timeout')) return { device: device.id, ok: false, kind: 'timeout', reason };
          return { device: device.id, ok: false, kind: 'unreachable', reason };
        } finally {
          probe.progress(++done, devices.length);
        }
      });
    } finally {
      probe.signal.removeEventListener('abort', closeAll);
    }
  }

  async function devicesOnline(input: HealthCheckInput, probe: Probe): Promise<Verdict> {
    if (input.devices.length === 0) return { outcome: 'pass', evidence: 'no changed devices to check' };
    const answers = await onEachDevice(input.devices, probe, async (session, remaining) => {
      const res = await session.exec('echo online', { timeoutMs: Math.max(1, remaining()) });
      return res.code === 0 && res.stdout.includes('online') ? null : `answered exit ${res.code}`;
    });
    // A device that did not answer within the check's time is not online: only devices we never got
    // to (the deadline passed while they queued) are unknown.
    const offline = answers.filter((a) => (a.ok ? a.value !== null : a.kind !== 'not-reached'));
    const notReached = answers.filter((a) => !a.ok && a.kind === 'not-reached');
    if (offline.length) {
      const why = offline.map((a) => `${a.device} (${a.ok ? a.value : a.reason})`);
      return { outcome: 'fail', evidence: `${offline.length} of ${answers.length} devices not online: ${list(why)}`, failedDevices: offline.map((a) => a.device) };
    }
    if (notReached.length) {
      return { outcome: 'inconclusive', evidence: `${notReached.length} of ${answers.length} devices not reached within ${input.timeoutMs} ms: ${list(notReached.map((a) => a.device))}`, failedDevices: notReached.map((a) => a.device) };
    }
    return { outcome: 'pass', evidence: `${answers.length}/${answers.length} devices online` };
  }

  /** Run commands on each device; exit 0 = healthy. Names are what the evidence calls each command. */
  async function commandsOnDevices(devices: DeviceTarget[], commands: { name: string; command: string }[], probe: Probe, timeoutMs: number): Promise<Verdict> {
    if (devices.length === 0) return { outcome: 'pass', evidence: 'no changed devices to check' };
    const answers = await onEachDevice(devices, probe, async (session, remaining) => {
      const failed: string[] = [];
      for (const c of commands) {
        try {
          const res = await session.exec(c.command, { timeoutMs: Math.max(1, remaining()) });
          if (res.code !== 0) failed.push(`${c.name} exit ${res.code}${tail(res.stdout, res.stderr)}`);
        } catch (err) {
          // Keep what this device already said no to; only a device with no answer at all is unread.
          if (failed.length === 0) throw err;
          break;
        }
      }
      return failed;
    });
    const unhealthy = answers.filter((a): a is Extract<typeof a, { ok: true }> => a.ok && a.value.length > 0);
    const unread = answers.filter((a): a is Extract<typeof a, { ok: false }> => !a.ok);
    if (unhealthy.length) {
      const what = unhealthy.flatMap((a) => a.value.map((v) => `${a.device}/${v}`));
      const also = unread.length ? `; ${unread.length} more could not be read` : '';
      return { outcome: 'fail', evidence: `unhealthy: ${list(what)}${also}`, failedDevices: unhealthy.map((a) => a.device) };
    }
    if (unread.length) {
      return { outcome: 'inconclusive', evidence: `could not read ${unread.length} of ${answers.length} devices within ${timeoutMs} ms: ${list(unread.map((a) => `${a.device} (${a.reason})`))}`, failedDevices: unread.map((a) => a.device) };
    }
    const n = commands.length * answers.length;
    return { outcome: 'pass', evidence: `${n} check${n === 1 ? '' : 's'} on ${answers.length} device${answers.length === 1 ? '' : 's'} exited 0` };
  }

  /** GET a url within the check's deadline; the body is read under the same signal. */
  async function get(url: string, probe: Probe): Promise<{ status: number; body: string } | { error: string }> {
    const headers: Record<string, string> = { accept: 'application/json, text/plain;q=0.9, */*;q=0.1' };
    let target = url;
    try {
      // fetch refuses urls with user:password@ (and its message would repeat them): send them as
      // Basic auth instead. They come from the profile (the spec refuses them) and never reach evidence.
      const parsed = new URL(url);
      if (parsed.username || parsed.password) {
        headers.authorization = `Basic ${Buffer.from(`${decodeURIComponent(parsed.username)}:${decodeURIComponent(parsed.password)}`).toString('base64')}`;
        parsed.username = '';
        parsed.password = '';
        target = parsed.toString();
      }
      const res = await doFetch(target, { method: 'GET', signal: probe.signal, redirect: 'follow', headers });
      const body = await res.text();
      return { status: res.status, body };
    } catch (err) {
      if (probe.signal.aborted) return { error: NO_ANSWER };
      const cause = (err as { cause?: { code?: string; message?: string } }).cause;
      const text = cause?.code ?? cause?.message ?? (err as Error).message;
      return { error: text.split(url).join(redactUrl(url)).split(target).join(redactUrl(target)).slice(0, 200) };
    }
  }

  async function httpCheck(url: string, probe: Probe, timeoutMs: number): Promise<Verdict> {
    const shown = redactUrl(url);
    const res = await get(url, probe);
    if ('error' in res) return { outcome: 'inconclusive', evidence: `GET ${shown}: ${res.error === NO_ANSWER ? `no answer within ${timeoutMs} ms` : res.error}` };
    const ok = res.status >= 200 && res.status < 300;
    return { outcome: ok ? 'pass' : 'fail', evidence: `GET ${shown} answered ${res.status}` };
  }

  async function prometheusValue(base: string, query: string, probe: Probe, timeoutMs: number): Promise<{ ok: true; value: number; detail: string } | { ok: false; evidence: string }> {
    const url = `${base.replace(/\/+$/, '')}/api/v1/query?query=${encodeURIComponent(query)}`;
    const shown = redactUrl(base);
    const res = await get(url, probe);
    if ('error' in res) return { ok: false, evidence: `Prometheus ${shown}: ${res.error === NO_ANSWER ? `no answer within ${timeoutMs} ms` : res.error}` };
    let json: unknown;
    try {
      json = JSON.parse(res.body);
    } catch {
      return { ok: false, evidence: `Prometheus ${shown} answered ${res.status} with a body that is not JSON` };
    }
    const read = readPrometheusValue(json);
    if (!read.ok) return { ok: false, evidence: `Prometheus ${shown}: ${read.reason}` };
    const where = read.label && read.label !== '{}' ? ` at ${read.label}` : '';
    return { ok: true, value: read.value, detail: `${read.series > 1 ? `max of ${read.series} series ` : ''}${read.value}${where}` };
  }

  async function prometheusCheck(check: Extract<HealthCheck, { kind: 'prometheus' }>, input: HealthCheckInput, probe: Probe): Promise<Verdict> {
    const base = check.url ?? (input.metrics?.errorRate && 'prometheus' in input.metrics.errorRate ? input.metrics.errorRate.prometheus.url : undefined);
    if (!base) {
      return { outcome: 'inconclusive', evidence: 'no Prometheus url: write "prometheus(<url>): <query> < <number>" or set metrics.errorRate.prometheus.url in the profile' };
    }
    const read = await prometheusValue(base, check.query, probe, input.timeoutMs);
    if (!read.ok) return { outcome: 'inconclusive', evidence: read.evidence };
    return judged(read.value, check.op, check.threshold, read.detail);
  }

  async function errorRate(check: Extract<HealthCheck, { kind: 'error-rate' }>, input: HealthCheckInput, probe: Probe): Promise<Verdict> {
    const source = input.metrics?.errorRate;
    if (!source) return { outcome: 'inconclusive', evidence: 'the profile has no metrics.errorRate source (command, http or prometheus), so the error rate cannot be read' };
    if ('prometheus' in source) {
      const read = await prometheusValue(source.prometheus.url, source.prometheus.query, probe, input.timeoutMs);
      if (!read.ok) return { outcome: 'inconclusive', evidence: read.evidence };
      return judged(read.value, check.op, check.threshold, read.detail);
    }
    if ('http' in source) {
      const shown = redactUrl(source.http);
      const res = await get(source.http, probe);
      if ('error' in res) return { outcome: 'inconclusive', evidence: `GET ${shown}: ${res.error === NO_ANSWER ? `no answer within ${input.timeoutMs} ms` : res.error}` };
      if (res.status < 200 || res.status >= 300) return { outcome: 'inconclusive', evidence: `GET ${shown} answered ${res.status}; no error rate read` };
      const value = readMetricValue(res.body);
      if (!value.ok) return { outcome: 'inconclusive', evidence: `GET ${shown}: ${value.reason}` };
      return judged(value.value, check.op, check.threshold, `${value.value} from ${shown}`);
    }
    // A command on each changed device; the gate judges the MAX, so one bad device cannot hide
    // behind a healthy average.
    if (input.devices.length === 0) return { outcome: 'pass', evidence: 'no changed devices to check' };
    const answers = await onEachDevice(input.devices, probe, async (session, remaining) => {
      const res = await session.exec(source.command, { timeoutMs: Math.max(1, remaining()) });
      if (res.code !== 0) return { ok: false as const, reason: `exit ${res.code}${tail(res.stdout, res.stderr)}` };
      return readMetricValue(res.stdout);
    });
    const values: { device: string; value: number }[] = [];
    const unread: string[] = [];
    for (const a of answers) {
      if (!a.ok) unread.push(`${a.device} (${a.reason})`);
      else if (!a.value.ok) unread.push(`${a.device} (${a.value.reason})`);
      else values.push({ device: a.device, value: a.value.value });
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
        failedDevices: answers.filter((a) => !a.ok || !a.value.ok).map((a) => a.device),
      };
    }
    const max = values.reduce((m, v) => (v.value > m.value ? v : m));
    return { outcome: 'pass', evidence: `max error rate ${max.value} (${max.device}) over ${values.length} device${values.length === 1 ? '' : 's'} is ${check.op} ${check.threshold}` };
  }

  function run(check: HealthCheck, input: HealthCheckInput, probe: Probe): Promise<Verdict> {
    switch (check.kind) {
      case 'devices-online':
        return devicesOnline(input, probe);
      case 'all-runtimes-healthy':
        if (input.runtimes.length === 0) return Promise.resolve({ outcome: 'inconclusive', evidence: 'the profile declares no runtimes, so none can be checked' });
        return commandsOnDevices(input.devices, input.runtimes.map((r) => ({ name: r.name, command: r.health })), probe, input.timeoutMs);
      case 'command':
        return commandsOnDevices(input.devices, [{ name: 'command', command: check.command }], probe, input.timeoutMs);
      case 'http':
        return httpCheck(check.url, probe, input.timeoutMs);
      case 'prometheus':
        return prometheusCheck(check, input, probe);
      case 'error-rate':
        return errorRate(check, input, probe);
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
        return { check: scrubCredentials(String(input.check).trim()), outcome: 'inconclusive', evidence: clip(parsed.message), durationMs: 0 };
      }
      const name = formatHealthCheck(parsed.check);
      const ctx = activityContext();
      const timeoutMs = Math.max(1, input.timeoutMs);
      const signals = [AbortSignal.timeout(timeoutMs), ...(ctx ? [ctx.cancellationSignal] : [])];
      let progress: { done: number; total: number } = { done: 0, total: input.devices.length };
      const heartbeat = () => ctx?.heartbeat({ check: name, ...progress });
      heartbeat();
      // Heartbeat on a clock too: an HTTP query or a single slow device gives no progress events.
      const ticker = ctx ? setInterval(heartbeat, 1_000) : undefined;
      const probe: Probe = {
        deadline: started + timeoutMs,
        signal: AbortSignal.any(signals),
        progress: (done, total) => {
          progress = { done, total };
          heartbeat();
        },
      };
      try {
        const verdict = await run(parsed.check, { ...input, timeoutMs }, probe);
        // A cancelled activity must end as cancelled, not with a verdict made of aborted probes.
        if (ctx?.cancellationSignal.aborted) throw ctx.cancellationSignal.reason;
        return { check: name, ...verdict, evidence: clip(verdict.evidence), durationMs: Date.now() - started };
      } finally {
        if (ticker) clearInterval(ticker);
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

/** The last words a failing command printed, for the evidence (short; commands may be chatty). */
function tail(stdout: string, stderr: string): string {
  const text = (stderr.trim() || stdout.trim()).split('\n').pop()?.trim() ?? '';
  return text ? `: ${JSON.stringify(text.slice(-80))}` : '';
}

function list(items: readonly string[]): string {
  return items.length > 5 ? `${items.slice(0, 5).join(', ')} and ${items.length - 5} more` : items.join(', ');
}

function clip(text: string): string {
  return text.length > EVIDENCE_LIMIT ? `${text.slice(0, EVIDENCE_LIMIT - 3)}...` : text;
}

