/**
 * Health gates (step 5 of a rollout, docs/architecture.md): the checks a phase's `healthGate` lists, parsed from their text,
 * and how their results combine into one verdict. Pure and deterministic (no Node APIs): the
 * workflow imports this module, the activity runs the checks.
 *
 * Accepted forms (surrounding whitespace ignored, keywords lowercase):
 *
 *   devices-online                      every changed device answers over its transport
 *   all-runtimes-healthy                every runtime's health command exits 0 on every changed device
 *   error-rate < 0.01 | error-rate <= 0.01
 *                                       the profile's metrics source (`metrics.errorRate`) reads below
 *                                       the threshold
 *   command: <shell command>            runs on every changed device; exit 0 = healthy
 *   http: <http(s) url>                 GET from the worker; any 2xx = pass
 *   prometheus: <PromQL> < 0.5          instant query against the profile's Prometheus
 *                                       (`metrics.errorRate.prometheus.url`)
 *   prometheus(<http(s) url>): <PromQL> <= 0.5
 *                                       the same against an explicit Prometheus base url, for profiles
 *                                       whose error rate comes from elsewhere
 *
 * The threshold of `prometheus` is the LAST `<`/`<=` followed by a number at the end of the text, so a
 * query may itself contain comparisons (`rate(x[5m]) > 0 < 3` compares `rate(x[5m]) > 0` with 3).
 */

export type ThresholdOp = '<' | '<=';

export type HealthCheck =
  | { kind: 'devices-online' }
  | { kind: 'all-runtimes-healthy' }
  | { kind: 'error-rate'; op: ThresholdOp; threshold: number }
  | { kind: 'command'; command: string }
  | { kind: 'http'; url: string }
  /** `url` absent: the profile's `metrics.errorRate.prometheus.url`. */
  | { kind: 'prometheus'; query: string; op: ThresholdOp; threshold: number; url?: string };


export type ParsedHealthCheck = { ok: true; check: HealthCheck } | { ok: false; message: string };

export const HEALTH_CHECK_FORMS = [
  'devices-online',
  'all-runtimes-healthy',
  'error-rate < <number>',
  'error-rate <= <number>',
  'command: <shell command>',
  'http: <http(s) url>',
  'prometheus: <query> < <number>',
  'prometheus(<http(s) url>): <query> < <number>',
] as const;

const NUMBER = String.raw`[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?`;
const THRESHOLD_AT_END = new RegExp(String.raw`^([\s\S]*\S)\s*(<=|<)\s*(${NUMBER})\s*$`);
const ERROR_RATE = new RegExp(String.raw`^error-rate\s*(<=|<)\s*(${NUMBER})$`);
const HTTP_URL = /^https?:\/\/[^\s/?#]+[^\s]*$/i;

const CREDENTIALS = /^[a-z][a-z0-9+.-]*:\/\/[^/@\s]*@/i;
// The spec is workflow input: a password in it would live in the history forever.
const CREDENTIALS_REFUSAL = 'has credentials in its url (user:password@); secrets must not enter the rollout spec, which is kept in the workflow history';

function allowed(): string {
  return `allowed: ${HEALTH_CHECK_FORMS.join(', ')}`;
}

function show(raw: string): string {
  const text = scrubCredentials(raw);
  return JSON.stringify(text.length > 120 ? `${text.slice(0, 117)}...` : text);
}

function lastThreshold(text: string): { body: string; op: ThresholdOp; threshold: number } | undefined {
  // The greedy head makes this the LAST comparator: the query itself may contain `<`.
  const m = THRESHOLD_AT_END.exec(text);
  if (!m) return undefined;
  const threshold = Number(m[3]);
  return Number.isFinite(threshold) ? { body: m[1]!, op: m[2] as ThresholdOp, threshold } : undefined;
}

/** Parse one health-gate entry. Never throws; a refusal names the text and the allowed forms. */
export function parseHealthCheck(text: string): ParsedHealthCheck {
  if (typeof text !== 'string') return { ok: false, message: `health check ${JSON.stringify(text)} must be text; ${allowed()}` };
  const t = text.trim();
  const refuse = (why: string): ParsedHealthCheck => ({ ok: false, message: `health check ${show(t)} ${why}; ${allowed()}` });
  if (t === '') return refuse('is empty');
  if (t === 'devices-online') return { ok: true, check: { kind: 'devices-online' } };
  if (t === 'all-runtimes-healthy') return { ok: true, check: { kind: 'all-runtimes-healthy' } };

  if (t.startsWith('error-rate')) {
    const m = ERROR_RATE.exec(t);
    if (!m) return refuse('needs a comparison with a number, like "error-rate < 0.01"');
    const threshold = Number(m[2]);
    if (!Number.isFinite(threshold) || threshold < 0) return refuse(`has threshold ${m[2]}, which must be a number >= 0`);
    return { ok: true, check: { kind: 'error-rate', op: m[1] as ThresholdOp, threshold } };
  }

  const prefixed = /^(command|http|prometheus)(?:\(([^)]*)\))?\s*:\s*([\s\S]*)$/.exec(t);
  if (prefixed) {
    const [, kind, arg, rest] = prefixed as unknown as [string, 'command' | 'http' | 'prometheus', string | undefined, string];
    if (arg !== undefined && kind !== 'prometheus') return refuse(`gives "(${arg})" after ${kind}, which takes no argument`);
    if (kind === 'command') {
      if (!rest) return refuse('names no command after "command:"');
      return { ok: true, check: { kind: 'command', command: rest } };
    }
    if (kind === 'http') {
      if (!HTTP_URL.test(rest)) return refuse(`has url ${show(rest)}, which must be an http:// or https:// url without spaces`);
      if (CREDENTIALS.test(rest)) return refuse(CREDENTIALS_REFUSAL);
      return { ok: true, check: { kind: 'http', url: rest } };
    }
    const url = arg?.trim();
    if (url !== undefined && !HTTP_URL.test(url)) return refuse(`has Prometheus url ${show(url)}, which must be an http:// or https:// url`);
    if (url !== undefined && CREDENTIALS.test(url)) return refuse(CREDENTIALS_REFUSAL);
    const cmp = lastThreshold(rest);
    if (!cmp) return refuse('needs a query and a threshold, like "prometheus: max(wavegate_error_ratio) < 0.01"');
    return { ok: true, check: { kind: 'prometheus', query: cmp.body, op: cmp.op, threshold: cmp.threshold, ...(url ? { url } : {}) } };
  }
  return refuse('is not a known check');
}

/** Parse every entry of a `healthGate` list; all refusals at once, each naming its index. */
export function parseHealthGate(texts: readonly string[]): { ok: true; checks: HealthCheck[] } | { ok: false; messages: string[] } {
  const checks: HealthCheck[] = [];
  const messages: string[] = [];
  texts.forEach((text, i) => {
    const parsed = parseHealthCheck(text);
    if (parsed.ok) checks.push(parsed.check);
    else messages.push(`healthGate[${i}]: ${parsed.message}`);
  });
  return messages.length ? { ok: false, messages } : { ok: true, checks };
}

/**
 * Hide credentials in a url before it becomes evidence: userinfo, and the values of query parameters
 * whose names suggest a secret. String work only (no URL class) so the workflow may use it too.
 */
export function redactUrl(url: string): string {
  return scrubCredentials(url)
    .replace(/([?&][^=&#]*(?:token|key|secret|pass|password|auth|sig|signature|credential)[^=&#]*=)[^&#]*/gi, '$1***');
}

/** Replace the userinfo of every url in a text (`http://user:pass@host` → `http://***@host`). */
export function scrubCredentials(text: string): string {
  return text.replace(/([a-z][a-z0-9+.-]*:\/\/)[^/@\s]*@/gi, '$1***@');
}

/** The canonical text of a check (urls redacted): what results and audit records name. */
export function formatHealthCheck(check: HealthCheck): string {
  switch (check.kind) {
    case 'devices-online':
    case 'all-runtimes-healthy':
      return check.kind;
    case 'error-rate':
      return `error-rate ${check.op} ${check.threshold}`;
    case 'command':
      return `command: ${check.command}`;
    case 'http':
      return `http: ${redactUrl(check.url)}`;
    case 'prometheus':
      return `prometheus${check.url ? `(${redactUrl(check.url)})` : ''}: ${check.query} ${check.op} ${check.threshold}`;
  }
}

export function meetsThreshold(value: number, op: ThresholdOp, threshold: number): boolean {
  return op === '<' ? value < threshold : value <= threshold;
}

export type GateOutcome = 'pass' | 'fail' | 'inconclusive';

export interface CheckResult {
  /** The check as written (canonical form, urls redacted). */
  check: string;
  outcome: GateOutcome;
  /** Short and human; never secrets. */
  evidence: string;
  /** Devices that made the check fail (or, for an inconclusive check, that could not be read). */
  failedDevices?: string[];
  durationMs: number;
}

export interface GateResult {
  outcome: GateOutcome;
  results: CheckResult[];
}

/** Any fail → fail; else any inconclusive → inconclusive; else pass. No checks → pass (nothing to hold). */
export function evaluateHealthGate(results: CheckResult[]): GateResult {
  const outcome: GateOutcome = results.some((r) => r.outcome === 'fail')
    ? 'fail'
    : results.some((r) => r.outcome === 'inconclusive')
      ? 'inconclusive'
      : 'pass';
  return { outcome, results };
}

/** One line for an audit record or the Web UI, e.g. `fail: error-rate < 0.01 (max 0.2 on edge-01)`. */
export function summarizeGate(gate: GateResult): string {
  if (gate.results.length === 0) return 'pass: no health checks';
  const decisive = gate.results.filter((r) => r.outcome === gate.outcome);
  return `${gate.outcome}: ${decisive.map((r) => `${r.check} (${r.evidence})`).join('; ')}`;
}

// --- reading metric values (shared by the activity and its tests) ----------------------------------

export type MetricRead = { ok: true; value: number } | { ok: false; reason: string };

/** A number as plain text (`0.02`, `NaN` refused) or JSON (`0.02`, `{"value": 0.02}`, `{"value": "0.02"}`). */
export function readMetricValue(body: string): MetricRead {
  const text = body.trim();
  if (text === '') return { ok: false, reason: 'empty output' };
  const plain = numberFrom(text);
  if (plain !== undefined) return { ok: true, value: plain };
  if (text.startsWith('{')) {
    try {
      const parsed = JSON.parse(text) as unknown;
      if (parsed && typeof parsed === 'object' && 'value' in parsed) {
        const v = (parsed as { value: unknown }).value;
        const n = typeof v === 'number' ? (Number.isFinite(v) ? v : undefined) : typeof v === 'string' ? numberFrom(v.trim()) : undefined;
        if (n !== undefined) return { ok: true, value: n };
        return { ok: false, reason: `"value" is ${JSON.stringify(v)}, not a number` };
      }
      return { ok: false, reason: 'JSON without a "value" field' };
    } catch {
      /* fall through */
    }
  }
  return { ok: false, reason: `not a number: ${JSON.stringify(text.slice(0, 60))}` };
}

function numberFrom(text: string): number | undefined {
  if (!new RegExp(`^${NUMBER}$`).test(text)) return undefined;
  const n = Number(text);
  return Number.isFinite(n) ? n : undefined;
}

/**
 * The value of a Prometheus instant-query response (`/api/v1/query`): a scalar, or the MAX over the
 * series of a vector (a gate must not let one bad series hide behind good ones). No series, NaN,
 * an error status or another result type cannot be judged.
 */
export function readPrometheusValue(json: unknown): ({ ok: true; value: number; series: number; label?: string }) | { ok: false; reason: string } {
  if (!json || typeof json !== 'object') return { ok: false, reason: 'response is not a JSON object' };
  const r = json as { status?: unknown; error?: unknown; errorType?: unknown; data?: { resultType?: unknown; result?: unknown } };
  if (r.status !== 'success') return { ok: false, reason: `Prometheus says ${String(r.errorType ?? r.status)}: ${String(r.error ?? 'no error text').slice(0, 160)}` };
  const sample = (v: unknown): number | undefined => {
    if (!Array.isArray(v) || v.length !== 2 || typeof v[1] !== 'string') return undefined;
    const s = v[1];
    if (s === '+Inf') return Infinity;
    if (s === '-Inf') return -Infinity;
    return numberFrom(s);
  };
  const type = r.data?.resultType;
  const result = r.data?.result;
  if (type === 'scalar') {
    const v = sample(result);
    return v === undefined ? { ok: false, reason: `scalar value ${JSON.stringify(result)} is not a number` } : { ok: true, value: v, series: 1 };
  }
  if (type === 'vector' && Array.isArray(result)) {
    if (result.length === 0) return { ok: false, reason: 'the query returned no series' };
    let best: { value: number; label?: string } | undefined;
    for (const s of result as Array<{ metric?: Record<string, string>; value?: unknown }>) {
      const v = sample(s.value);
      if (v === undefined) return { ok: false, reason: `series ${labelOf(s.metric)} has value ${JSON.stringify(s.value)}, not a number` };
      if (!best || v > best.value) best = { value: v, label: labelOf(s.metric) };
    }
    return { ok: true, value: best!.value, series: result.length, label: best!.label };
  }
  return { ok: false, reason: `result type ${JSON.stringify(type)} is not a scalar or an instant vector` };
}

function labelOf(metric: Record<string, string> | undefined): string {
  if (!metric) return '{}';
  const { __name__: name, ...labels } = metric;
  const inner = Object.entries(labels)
    .map(([k, v]) => `${k}="${v}"`)
    .join(',');
  return `${name ?? ''}{${inner}}`;
}
