import {
  formatHealthCheck,
  parseHealthCheck,
  scrubCredentials,
  type CheckResult,
  type HealthCheck,
} from '../../core/health';
import { metricsPolicyFromEnv } from '../../core/secret-policy';
import { systemResolve } from '../../intake/checked-lookup';
import { CHECKOUT_PROFILES_ROOT } from '../../device/steps';
import type { ChannelDeps } from '../../device/channel';
import { allRuntimesHealthy } from './all-runtimes-healthy';
import { deviceAsker } from './devices';
import { devicesOnline } from './devices-online';
import { errorRate } from './error-rate';
import { clip } from './evidence';
import { httpCheck } from './http';
import { httpGetter } from './http-get';
import { tokenReader } from './metrics-token';
import { namedCheck } from './named-check';
import { activityContext, startProbe } from './probe';
import { prometheusCheck } from './prometheus';
import { verifyCheck } from './verify';
import { openSignedHealth, rawDeviceCommand, type OpenedHealth } from './signed-health';
import type {
  CheckProvider,
  HealthActivityDeps,
  HealthCheckInput,
  ProviderTable,
  ProviderTools,
  SignedHealth,
} from './types';

export type { HealthActivityDeps, HealthCheckInput } from './types';

/**
 * The provider of each kind of check core/health.ts parses (./types.ts `CheckProvider`), one file each.
 * A new kind is one more entry here (the table's type refuses a kind without one, and
 * test/unit/health-providers.test.ts every form core/health.ts accepts).
 */
export const PROVIDERS: ProviderTable = {
  'devices-online': devicesOnline,
  'all-runtimes-healthy': allRuntimesHealthy,
  named: namedCheck,
  'error-rate': errorRate,
  http: httpCheck,
  prometheus: prometheusCheck,
  verify: verifyCheck,
};

/** The provider of a check, chosen once from its kind. */
export function providerFor<C extends HealthCheck>(check: C): CheckProvider<C> {
  // The table pairs each kind with the provider of that kind's check; TypeScript cannot follow the pair through an index.
  return PROVIDERS[check.kind] as unknown as CheckProvider<C>;
}

/**
 * The health activities the worker registers: `runHealthCheck` runs one health-gate check (./types.ts
 * `HealthCheckInput` says what a check is and what it never does) with the provider of its kind.
 */
export function createHealthActivities(deps: HealthActivityDeps = {}) {
  const concurrency = Math.max(1, deps.concurrency ?? 16);
  const profilesRoot = deps.profilesRoot ?? CHECKOUT_PROFILES_ROOT;
  const now = deps.now ?? Date.now;
  const metricsPolicy = deps.metricsPolicy ?? metricsPolicyFromEnv(process.env);
  // Agent devices' twins: the reader given, else the activity's own client (none outside an activity: unread, saying so).
  const channels: ChannelDeps = {
    ...(deps.twins ? { twins: deps.twins } : {}),
    client: () => activityContext()?.client,
    now,
  };
  const tools: ProviderTools = {
    askEachDevice: deviceAsker(channels, concurrency, deps.connectTimeoutMs ?? 10_000),
    get: httpGetter({ fetch: deps.fetch ?? fetch, metricsPolicy, resolveHost: deps.resolveHost ?? systemResolve }),
    tokenOf: tokenReader(metricsPolicy),
  };

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
      const provider = providerFor(parsed.check);
      const opened = openFor(provider, input, () => openSignedHealth(input, profilesRoot, now));
      if (!opened.ok)
        return {
          check: name,
          outcome: 'inconclusive',
          evidence: clip(opened.evidence),
          durationMs: Date.now() - started,
        };
      const timeoutMs = Math.max(1, input.timeoutMs);
      const running = startProbe({
        check: name,
        started,
        timeoutMs,
        devices: input.devices.length,
        listeners: concurrency + 8,
      });
      try {
        const verdict = await provider.run({
          check: parsed.check,
          input: { ...input, timeoutMs },
          probe: running.probe,
          ...(opened.signed ? { signed: opened.signed } : {}),
          tools,
        });
        running.throwIfCancelled();
        return { check: name, ...verdict, evidence: clip(verdict.evidence), durationMs: Date.now() - started };
      } finally {
        running.stop();
      }
    },
  };
}

export type HealthActivities = ReturnType<typeof createHealthActivities>;

/**
 * What a check may run with before anything is contacted: refused when the input carries an unsigned device
 * command; the target revision's verified health section when the provider reads it (device-side commands
 * come from the verified envelope only), refused when that envelope is missing or does not verify.
 */
function openFor(
  provider: CheckProvider,
  input: HealthCheckInput,
  open: () => OpenedHealth,
): { ok: true; signed?: SignedHealth } | { ok: false; evidence: string } {
  const raw = rawDeviceCommand(input);
  if (raw)
    return {
      ok: false,
      evidence: `refused: the input carries an unsigned device command (${raw}), from a client older than signed health checks; device-side commands are read only from the target revision's signed envelope, so nothing was run`,
    };
  const opens = provider.signedHealth === 'always' || (provider.signedHealth === 'when-given' && !!input.envelope);
  return opens ? open() : { ok: true };
}
