import { inlineCredential, readPrometheusValue, redactUrl } from '../../core/health';
import { getError, judged } from './evidence';
import type { CheckOf, CheckProvider, CheckRun, Probe, ProviderTools, TokenRef, Verdict } from './types';

type PrometheusCheck = CheckOf<'prometheus'>;

/**
 * `prometheus: <query> < n` against the profile's Prometheus (with the profile's token), or
 * `prometheus(<url>): <query> < n` against the url written (never sent a token).
 */
export const prometheusCheck: CheckProvider<PrometheusCheck> = {
  signedHealth: 'never',
  run: prometheusVerdict,
};

async function prometheusVerdict({ check, input, probe, tools }: CheckRun<PrometheusCheck>): Promise<Verdict> {
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
  const auth = check.url === undefined ? profileSource : {};
  const read = await prometheusValue(tools, { base, query: check.query, auth }, probe, input.timeoutMs);
  if (!read.ok) return { outcome: 'inconclusive', evidence: read.evidence };
  return judged(read.value, check.op, check.threshold, read.detail);
}

/** An instant query: the Prometheus base url, the PromQL, the token by reference (none: `{}`). */
export interface PrometheusQuery {
  base: string;
  query: string;
  auth?: TokenRef;
}

export type PrometheusRead = { ok: true; value: number; detail: string } | { ok: false; evidence: string };

/** The value of an instant query (the MAX over a vector's series: core/health.ts `readPrometheusValue`), and where it came from. */
export async function prometheusValue(
  tools: Pick<ProviderTools, 'get' | 'tokenOf'>,
  { base, query, auth = {} }: PrometheusQuery,
  probe: Probe,
  timeoutMs: number,
): Promise<PrometheusRead> {
  const url = `${base.replace(/\/+$/, '')}/api/v1/query?query=${encodeURIComponent(query)}`;
  const shown = redactUrl(base);
  const token = tools.tokenOf(auth);
  if (!token.ok) return { ok: false, evidence: `Prometheus ${shown}: ${token.evidence}` };
  if (inlineCredential(base))
    return {
      ok: false,
      evidence: `Prometheus ${shown}: refused: the url has ${inlineCredential(base)}; give the token by reference (metrics.errorRate.tokenEnv or tokenFile in the profile)`,
    };
  const res = await tools.get(url, probe, token.token);
  if ('error' in res) return { ok: false, evidence: `Prometheus ${shown}: ${getError(res.error, timeoutMs)}` };
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
