import { meetsThreshold, readMetricValue, redactUrl } from '../../core/health';
import type { Profile } from '../../core/revision';
import { getError, judged, list, NO_CHANGED_DEVICES } from './evidence';
import { prometheusValue } from './prometheus';
import type { CheckOf, CheckProvider, CheckRun, Verdict } from './types';

type ErrorRateCheck = CheckOf<'error-rate'>;
type ErrorRateRun = CheckRun<ErrorRateCheck>;
/** The profile's worker-side source: `{ http }` or `{ prometheus: { url, query } }`, each with its token by reference. */
type MetricsSource = NonNullable<NonNullable<Profile['metrics']>['errorRate']>;

/**
 * `error-rate < n`: read from one source, chosen once per check. The target revision's signed
 * `health.errorRate.command` wins (it is what the revision's author said measures it), run on every
 * changed device; without one, the profile's worker-side `metrics.errorRate` (Prometheus or http).
 */
export const errorRate: CheckProvider<ErrorRateCheck> = {
  // The envelope is opened when given (its signed command wins); without one the profile's source is read.
  signedHealth: 'when-given',
  run: (run) => sourceOf(run)(run),
};

type ErrorRateSource = (run: ErrorRateRun) => Promise<Verdict>;

function sourceOf(run: ErrorRateRun): ErrorRateSource {
  const command = run.signed?.health?.errorRate?.command;
  if (command !== undefined) return (r) => onDevices(r, command);
  const source = run.input.metrics?.errorRate;
  if (!source) return noSource;
  return 'prometheus' in source ? (r) => fromPrometheus(r, source) : (r) => fromHttp(r, source);
}

async function noSource(): Promise<Verdict> {
  return {
    outcome: 'inconclusive',
    evidence: `neither the target revision's signed health.errorRate.command nor the profile's metrics.errorRate (http or prometheus) is given, so the error rate cannot be read`,
  };
}

async function fromPrometheus(
  { check, input, probe, tools }: ErrorRateRun,
  source: Extract<MetricsSource, { prometheus: unknown }>,
): Promise<Verdict> {
  const { url: base, query } = source.prometheus;
  const read = await prometheusValue(tools, { base, query, auth: source }, probe, input.timeoutMs);
  if (!read.ok) return { outcome: 'inconclusive', evidence: read.evidence };
  return judged(read.value, check.op, check.threshold, read.detail);
}

async function fromHttp(
  { check, input, probe, tools }: ErrorRateRun,
  source: Extract<MetricsSource, { http: string }>,
): Promise<Verdict> {
  const shown = redactUrl(source.http);
  const token = tools.tokenOf(source);
  if (!token.ok) return { outcome: 'inconclusive', evidence: `GET ${shown}: ${token.evidence}` };
  const res = await tools.get(source.http, probe, token.token);
  if ('error' in res)
    return { outcome: 'inconclusive', evidence: `GET ${shown}: ${getError(res.error, input.timeoutMs)}` };
  if (res.status < 200 || res.status >= 300)
    return { outcome: 'inconclusive', evidence: `GET ${shown} answered ${res.status}; no error rate read` };
  const value = readMetricValue(res.body);
  if (!value.ok) return { outcome: 'inconclusive', evidence: `GET ${shown}: ${value.reason}` };
  return judged(value.value, check.op, check.threshold, `${value.value} from ${shown}`);
}

/** The signed error-rate command on each changed device; the gate judges the MAX, so one bad device cannot hide behind a healthy average. */
async function onDevices({ check, input, probe, tools }: ErrorRateRun, command: string): Promise<Verdict> {
  if (input.devices.length === 0) return NO_CHANGED_DEVICES;
  const about = { profile: input.profile, revision: input.revision };
  const answers = await tools.askEachDevice(input.devices, probe, (channel, device, q) =>
    channel.errorRate(device, command, about, q),
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
