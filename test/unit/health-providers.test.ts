import { describe, expect, it } from 'vitest';
import { HEALTH_CHECK_FORMS, parseHealthCheck, runsOnDevices, type HealthCheck } from '../../core/health';
import { PROVIDERS, providerFor } from '../../activities/health';

/**
 * Each kind of health check core/health.ts parses has its provider in activities/health/ (the table in
 * its index.ts), chosen once per check from the kind. A form added to core/health.ts without an example
 * here, or a kind without a provider, fails here.
 */
const EXAMPLES: Record<(typeof HEALTH_CHECK_FORMS)[number], string> = {
  'devices-online': 'devices-online',
  'all-runtimes-healthy': 'all-runtimes-healthy',
  'check: <signed check name>': 'check: motd-present',
  'error-rate < <number>': 'error-rate < 0.01',
  'error-rate <= <number>': 'error-rate <= 0.01',
  'http: <http(s) url>': 'http: http://127.0.0.1:8080/healthz',
  'prometheus: <query> < <number>': 'prometheus: max(wavegate_error_ratio) < 0.01',
  'prometheus(<http(s) url>): <query> < <number>': 'prometheus(http://127.0.0.1:9090): up < 1',
  verify: 'verify',
};

/** The check each accepted form parses to. */
function parsedForms(): { form: string; check: HealthCheck }[] {
  return HEALTH_CHECK_FORMS.map((form) => {
    const text = (EXAMPLES as Record<string, string | undefined>)[form];
    if (text === undefined) throw new Error(`no example of the form "${form}": add one to EXAMPLES`);
    const parsed = parseHealthCheck(text);
    if (!parsed.ok) throw new Error(`the example of "${form}" does not parse: ${parsed.message}`);
    return { form, check: parsed.check };
  });
}

describe('health check providers (activities/health/)', () => {
  it('every form core/health.ts accepts has a provider for its kind, and the table has no provider of a kind it does not parse', () => {
    const kinds = new Set(parsedForms().map((p) => p.check.kind));
    const missing = [...kinds].filter((k) => typeof PROVIDERS[k]?.run !== 'function');
    expect(missing).toEqual([]);
    expect(Object.keys(PROVIDERS).sort()).toEqual([...kinds].sort());
  });

  it('a check is run by the provider of its kind', () => {
    for (const { check } of parsedForms()) expect(providerFor(check)).toBe(PROVIDERS[check.kind]);
  });

  it("a provider opens the signed envelope always exactly for the checks core/health.ts says run on devices (plan's rule)", () => {
    const disagree = parsedForms()
      .filter(({ check }) => (providerFor(check).signedHealth === 'always') !== runsOnDevices(check))
      .map(({ form }) => form);
    expect(disagree).toEqual([]);
    // error-rate prefers the revision's signed command but has the profile's worker-side source too.
    expect(PROVIDERS['error-rate'].signedHealth).toBe('when-given');
  });
});
