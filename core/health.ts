/**
 * Health gates (step 5 of a rollout, docs/architecture.md): the checks a phase's `healthGate` lists, parsed from their text,
 * and how their results combine into one verdict. Pure and deterministic (no Node APIs): the
 * workflow imports this module, the activity runs the checks.
 *
 * A spec only SELECTS what runs on a device: every device-side command is in the target revision's
 * signed `health` section (core/revision.ts), which the worker reads from the envelope it verified
 * against its own pins. Checks that run on the worker (http, prometheus) may be written here, but
 * carry no credentials: the spec is kept in the workflow history.
 *
 * Accepted forms (surrounding whitespace ignored, keywords lowercase):
 *
 *   devices-online                      every changed device answers over its transport
 *   all-runtimes-healthy                every signed `health.runtimes` command exits 0 on every changed device
 *   check: <name>                       the signed check `<name>` (of `health.runtimes` or `health.checks`)
 *                                       exits 0 on every changed device
 *   error-rate < 0.01 | error-rate <= 0.01
 *                                       the signed `health.errorRate.command` (the max over the changed
 *                                       devices), else the profile's `metrics.errorRate` (http or
 *                                       prometheus, read by the worker), reads below the threshold
 *   http: <http(s) url>                 GET from the worker; any 2xx = pass
 *   prometheus: <PromQL> < 0.5          instant query against the profile's Prometheus
 *                                       (`metrics.errorRate.prometheus.url`, with the profile's token)
 *   prometheus(<http(s) url>): <PromQL> <= 0.5
 *                                       the same against an explicit Prometheus base url (never sent a token)
 *   verify                              the re-verify: the target revision's signed `verify` command exits 0
 *                                       on every changed device (the device still holds what it confirmed);
 *                                       a device that fails it is flipped to `failed` in the rollout's records
 *
 * `command: <shell>` (an unsigned command on every device) is refused.
 *
 * The threshold of `prometheus` is the LAST `<`/`<=` followed by a number at the end of the text, so a
 * query may itself contain comparisons (`rate(x[5m]) > 0 < 3` compares `rate(x[5m]) > 0` with 3).
 */

import { inlineCredential, scrubFound } from './credentials';

export type ThresholdOp = '<' | '<=';

export type HealthCheck =
  | { kind: 'devices-online' }
  | { kind: 'all-runtimes-healthy' }
  /** One named, signed device-side check of the target revision. */
  | { kind: 'named'; name: string }
  | { kind: 'error-rate'; op: ThresholdOp; threshold: number }
  | { kind: 'http'; url: string }
  /** `url` absent: the profile's `metrics.errorRate.prometheus.url`. */
  | { kind: 'prometheus'; query: string; op: ThresholdOp; threshold: number; url?: string }
  /** The re-verify: the target revision's signed `verify` on every changed device. */
  | { kind: 'verify' };

/** The checks that run commands on devices: their commands come only from a verified envelope. */
export function runsOnDevices(check: HealthCheck): boolean {
  return check.kind === 'all-runtimes-healthy' || check.kind === 'named' || check.kind === 'verify';
}

export type ParsedHealthCheck = { ok: true; check: HealthCheck } | { ok: false; message: string };

export const HEALTH_CHECK_FORMS = [
  'devices-online',
  'all-runtimes-healthy',
  'check: <signed check name>',
  'error-rate < <number>',
  'error-rate <= <number>',
  'http: <http(s) url>',
  'prometheus: <query> < <number>',
  'prometheus(<http(s) url>): <query> < <number>',
  'verify',
] as const;

/** A signed health check's name: what a spec selects with `check: <name>` and evidence shows. */
export const HEALTH_CHECK_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;
export const HEALTH_CHECK_NAME_RULE = 'must be 1-64 letters, digits, ".", "_" or "-", starting with a letter or digit';

const NUMBER = String.raw`[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?`;
const THRESHOLD_AT_END = new RegExp(String.raw`^([\s\S]*\S)\s*(<=|<)\s*(${NUMBER})\s*$`);
const ERROR_RATE = new RegExp(String.raw`^error-rate\s*(<=|<)\s*(${NUMBER})$`);
const HTTP_URL = /^https?:\/\/[^\s/?#]+[^\s]*$/i;

const UNSIGNED_COMMAND_REFUSAL =
  'runs an unsigned shell command on every device, which a rollout spec may not do; add it to the target revision\'s signed health.checks as { name, command }, sign the revision again, and select it here with "check: <name>"';

function allowed(): string {
  return `allowed: ${HEALTH_CHECK_FORMS.join(', ')}`;
}

/** Longer health-check texts are refused before any pattern looks at them (bounded work per entry). */
export const MAX_HEALTH_TEXT = 4096;

function show(raw: string): string {
  // Scrub a bounded prefix, then shorten: a cut never leaves half a password unscrubbed.
  const text = scrubCredentials(raw.slice(0, MAX_HEALTH_TEXT));
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
  if (typeof text !== 'string')
    return { ok: false, message: `health check ${JSON.stringify(text)} must be text; ${allowed()}` };
  const t = text.trim();
  const refuse = (why: string): ParsedHealthCheck => ({
    ok: false,
    message: `health check ${show(t)} ${why}; ${allowed()}`,
  });
  if (t === '') return refuse('is empty');
  if (t.length > MAX_HEALTH_TEXT)
    return refuse(`is ${t.length} characters long, above the limit of ${MAX_HEALTH_TEXT}`);
  if (t === 'devices-online') return { ok: true, check: { kind: 'devices-online' } };
  if (t === 'all-runtimes-healthy') return { ok: true, check: { kind: 'all-runtimes-healthy' } };
  if (t === 'verify') return { ok: true, check: { kind: 'verify' } };

  if (t.startsWith('error-rate')) {
    const m = ERROR_RATE.exec(t);
    if (!m) return refuse('needs a comparison with a number, like "error-rate < 0.01"');
    const threshold = Number(m[2]);
    if (!Number.isFinite(threshold) || threshold < 0)
      return refuse(`has threshold ${m[2]}, which must be a number >= 0`);
    return { ok: true, check: { kind: 'error-rate', op: m[1] as ThresholdOp, threshold } };
  }

  const prefixed = /^(command|check|http|prometheus)(?:\(([^)]*)\))?\s*:\s*([\s\S]*)$/.exec(t);
  if (prefixed) {
    const [, kind, arg, rest] = prefixed as unknown as [
      string,
      'command' | 'check' | 'http' | 'prometheus',
      string | undefined,
      string,
    ];
    if (kind === 'command') return refuse(UNSIGNED_COMMAND_REFUSAL);
    if (arg !== undefined && kind !== 'prometheus')
      return refuse(`gives "(${arg})" after ${kind}, which takes no argument`);
    if (kind === 'check') {
      if (!HEALTH_CHECK_NAME.test(rest))
        return refuse(
          `names ${show(rest)}, which is not a check name (${HEALTH_CHECK_NAME_RULE}); the name selects a signed check of the target revision's health section`,
        );
      return { ok: true, check: { kind: 'named', name: rest } };
    }
    if (kind === 'http') {
      if (!HTTP_URL.test(rest))
        return refuse(`has url ${show(rest)}, which must be an http:// or https:// url without spaces`);
      const secret = inlineCredential(rest);
      if (secret) return refuse(credentialsRefusal(secret));
      return { ok: true, check: { kind: 'http', url: rest } };
    }
    const url = arg?.trim();
    if (url !== undefined && !HTTP_URL.test(url))
      return refuse(`has Prometheus url ${show(url)}, which must be an http:// or https:// url`);
    const secret = url !== undefined ? inlineCredential(url) : undefined;
    if (secret) return refuse(credentialsRefusal(secret));
    const cmp = lastThreshold(rest);
    if (!cmp) return refuse('needs a query and a threshold, like "prometheus: max(wavegate_error_ratio) < 0.01"');
    return {
      ok: true,
      check: { kind: 'prometheus', query: cmp.body, op: cmp.op, threshold: cmp.threshold, ...(url ? { url } : {}) },
    };
  }
  return refuse('is not a known check');
}

/** Parse every entry of a `healthGate` list; all refusals at once, each naming its index. */
export function parseHealthGate(
  texts: readonly string[],
): { ok: true; checks: HealthCheck[] } | { ok: false; messages: string[] } {
  const checks: HealthCheck[] = [];
  const messages: string[] = [];
  texts.forEach((text, i) => {
    const parsed = parseHealthCheck(text);
    if (parsed.ok) checks.push(parsed.check);
    else messages.push(`healthGate[${i}]: ${parsed.message}`);
  });
  return messages.length ? { ok: false, messages } : { ok: true, checks };
}

// --- credentials: refused where they are written, redacted wherever text is recorded -------------

/** Query parameter, argument and assignment names that carry a secret (`access_token`, `apiKey`, `X-Amz-Signature`, `password`). */
const SECRET_WORD = `[A-Za-z0-9_.-]*(?:token|secret|password|passwd|apikey|api[_-]key|credential)[A-Za-z0-9_.-]*|(?:[A-Za-z0-9_.-]*[_.-])?(?:key|pass|auth|sig|signature|session)`;
const URL_IN_TEXT = /([a-z][a-z0-9+.-]*:\/\/)([^\s"'<>`]*)/gi;
const AUTH_VALUE = /(authorization\s*[:=]\s*)(?:(?:bearer|basic|token)\s+)?[^\s"']+/gi;
const SECRET_ASSIGNMENT = new RegExp(String.raw`(\b(?:${SECRET_WORD})\s*[=:]\s*)("[^"]*"|'[^']*'|[^\s&"']+)`, 'gi');
const SECRET_FLAG_VALUE = new RegExp(String.raw`((?:^|\s)--?(?:${SECRET_WORD})\s+)([^\s-]\S*)`, 'gi');

/**
 * What makes a url or command carry an inline credential (a password in the url, a secret-named query
 * parameter or argument, an Authorization header or bearer token, a user:password or password argument
 * of curl, mysql, sshpass...: core/credentials.ts), or undefined when it carries none. Where such text is
 * written it would be kept in the workflow history and the audit forever. Linear in the text.
 */
export { inlineCredential };

/** The refusal for an inline credential: where secrets go instead. */
export function credentialsRefusal(what: string): string {
  return `has ${what}; secrets must not be written where they are kept in the workflow history and the audit: pass a token by reference in the profile's metrics.errorRate (tokenEnv: <VAR> or tokenFile: /path), which the worker reads`;
}

/** The refusal for an inline credential in a signed device command: the secret stays on the device. */
export function signedCommandCredentialRefusal(what: string): string {
  return `has ${what}; a signed command is sent to every device and kept in the envelope, the workflow history and the audit, so it must carry no secret: read it on the device instead (a file such as --password-file /etc/app/password or "$(cat /etc/app/token)", or a variable such as "$TOKEN")`;
}

/**
 * Hide credentials in a url before it becomes evidence: userinfo, and the value of every query
 * parameter. String work only (no URL class) so the workflow may use it too.
 */
export function redactUrl(url: string): string {
  return scrubCredentials(url);
}

/**
 * Scrub every url in a text (userinfo → `***@`, each query value → `***`), every secret-named
 * assignment or argument (`token=...`, `password: ...`, `--token x`) and Authorization values: what
 * any evidence or audit text goes through.
 */
export function scrubCredentials(text: string): string {
  // What the detector finds first (a curl -u password, mysql -pX, Bearer x...), then the forms below.
  return scrubFound(text)
    .replace(URL_IN_TEXT, (_all, scheme: string, rest: string) => scheme + scrubUrlRest(rest))
    .replace(AUTH_VALUE, '$1***')
    .replace(SECRET_ASSIGNMENT, (all, head: string, value: string) => (value.startsWith('***') ? all : `${head}***`))
    .replace(SECRET_FLAG_VALUE, '$1***');
}

function scrubUrlRest(rest: string): string {
  const end = rest.search(/[/?#]/);
  const authority = end < 0 ? rest : rest.slice(0, end);
  const at = authority.lastIndexOf('@');
  let out = at >= 0 ? `***${rest.slice(at)}` : rest;
  const q = out.indexOf('?');
  if (q < 0) return out;
  const hash = out.indexOf('#', q);
  const query = out.slice(q + 1, hash < 0 ? undefined : hash);
  const redacted = query
    .split('&')
    .map((pair) => {
      const eq = pair.indexOf('=');
      return eq < 0 ? (pair ? '***' : pair) : `${pair.slice(0, eq)}=***`;
    })
    .join('&');
  out = `${out.slice(0, q + 1)}${redacted}${hash < 0 ? '' : out.slice(hash)}`;
  return out;
}

/** The canonical text of a check (urls redacted): what results and audit records name. */
export function formatHealthCheck(check: HealthCheck): string {
  switch (check.kind) {
    case 'devices-online':
    case 'all-runtimes-healthy':
    case 'verify':
      return check.kind;
    case 'error-rate':
      return `error-rate ${check.op} ${check.threshold}`;
    case 'named':
      return `check: ${check.name}`;
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
        const n =
          typeof v === 'number'
            ? Number.isFinite(v)
              ? v
              : undefined
            : typeof v === 'string'
              ? numberFrom(v.trim())
              : undefined;
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
export function readPrometheusValue(
  json: unknown,
): { ok: true; value: number; series: number; label?: string } | { ok: false; reason: string } {
  if (!json || typeof json !== 'object') return { ok: false, reason: 'response is not a JSON object' };
  const r = json as {
    status?: unknown;
    error?: unknown;
    errorType?: unknown;
    data?: { resultType?: unknown; result?: unknown };
  };
  if (r.status !== 'success')
    return {
      ok: false,
      reason: `Prometheus says ${String(r.errorType ?? r.status)}: ${String(r.error ?? 'no error text').slice(0, 160)}`,
    };
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
    return v === undefined
      ? { ok: false, reason: `scalar value ${JSON.stringify(result)} is not a number` }
      : { ok: true, value: v, series: 1 };
  }
  if (type === 'vector' && Array.isArray(result)) {
    if (result.length === 0) return { ok: false, reason: 'the query returned no series' };
    let best: { value: number; label?: string } | undefined;
    for (const s of result as Array<{ metric?: Record<string, string>; value?: unknown }>) {
      const v = sample(s.value);
      if (v === undefined)
        return { ok: false, reason: `series ${labelOf(s.metric)} has value ${JSON.stringify(s.value)}, not a number` };
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
