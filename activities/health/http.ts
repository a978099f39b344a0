import { redactUrl } from '../../core/health';
import { getError } from './evidence';
import type { CheckOf, CheckProvider, CheckRun, Verdict } from './types';

/** `http: <url>`: a GET from the worker, never with a token; any 2xx passes. */
export const httpCheck: CheckProvider<CheckOf<'http'>> = {
  signedHealth: 'never',
  run: httpVerdict,
};

async function httpVerdict({ check, input, probe, tools }: CheckRun<CheckOf<'http'>>): Promise<Verdict> {
  const shown = redactUrl(check.url);
  const res = await tools.get(check.url, probe);
  if ('error' in res)
    return { outcome: 'inconclusive', evidence: `GET ${shown}: ${getError(res.error, input.timeoutMs)}` };
  const ok = res.status >= 200 && res.status < 300;
  return { outcome: ok ? 'pass' : 'fail', evidence: `GET ${shown} answered ${res.status}` };
}
