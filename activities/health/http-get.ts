import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { inlineCredential, redactUrl, scrubCredentials } from '../../core/health';
import { METRICS_TOKENS, urlRefusal, type SecretPolicy } from '../../core/secret-policy';
import { checkedLookup, type ResolveHost } from '../../intake/checked-lookup';
import { NO_ANSWER } from './evidence';
import { activityContext } from './probe';
import type { Got, HttpGet, Probe } from './types';

const ACCEPT = 'application/json, text/plain;q=0.9, */*;q=0.1';
/** The most of a metrics answer read when a token was sent (a number or a Prometheus vector is far less). */
const TOKEN_ANSWER_LIMIT = 1024 * 1024;

export interface HttpGetDeps {
  fetch: typeof fetch;
  metricsPolicy: SecretPolicy;
  resolveHost: ResolveHost;
}

/** The worker-side checks' GET (`http:`, `prometheus:`, error-rate's http and Prometheus sources). */
export function httpGetter(deps: HttpGetDeps): HttpGet {
  /** GET a url within the check's deadline; the body is read under the same signal. */
  return async function get(url: string, probe: Probe, token?: string): Promise<Got> {
    const secret = inlineCredential(url);
    // The spec and the profile refuse inline credentials; an input that has one anyway is not sent.
    if (secret)
      return {
        error: `refused: the url has ${secret}; give the token by reference (metrics.errorRate.tokenEnv or tokenFile in the profile)`,
      };
    if (token !== undefined) return getWithToken(deps, url, probe, token);
    try {
      const res = await deps.fetch(url, {
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
  };
}

/**
 * GET with the worker's metrics token, within the worker's metrics policy (core/secret-policy.ts): an
 * address written in the url judged first, a host name resolved here with every address judged and
 * the connection made to those (no rebinding between check and connect), one connection of its own,
 * no redirect followed (the token goes to the source's own url only), the answer read up to a bound.
 */
async function getWithToken(deps: HttpGetDeps, url: string, probe: Probe, token: string): Promise<Got> {
  const literal = urlRefusal(url, deps.metricsPolicy);
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
          lookup: checkedLookup(deps.resolveHost, deps.metricsPolicy, refusals),
          signal: probe.signal,
        },
        (res) => readBounded(res, resolve, reject),
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

/** An answer read up to TOKEN_ANSWER_LIMIT bytes; one cut off (the check's deadline, the source closing) is settled, never left pending. */
function readBounded(
  res: IncomingMessage,
  resolve: (got: { status: number; body: string }) => void,
  reject: (err: Error) => void,
): void {
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
  res.on('close', () => {
    if (!res.complete) reject(Object.assign(new Error('answer cut off'), { code: 'ECONNRESET' }));
  });
}
