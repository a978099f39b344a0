import { isIP } from 'node:net';
import { APPLY_DURATION_BUCKETS, METRIC } from '../core/metrics';
import { WavegateError } from '../core/errors';

/**
 * The worker's Prometheus endpoint (`--metrics-bind` / `$WAVEGATE_METRICS_BIND`): the SDK's Runtime
 * serves its own metrics and wavegate's (core/metrics.ts, recorded on the SDK's meter) at
 * `http://<bind>/metrics`. The Runtime is process-wide and made with the first connection, so this runs
 * before any connection: afterwards it could not take effect.
 */
const MAX_BIND_LENGTH = 255;

/** `host:port` (IPv4, `[IPv6]` or a name) with a port 1–65535, or a clear INVALID_INPUT naming the field and value. */
export function parseMetricsBind(value: string, field = '--metrics-bind'): string {
  const bad = (why: string) =>
    new WavegateError('INVALID_INPUT', `${field} ${JSON.stringify(value.slice(0, 80))}: ${why}`, { field, value });
  if (value.length > MAX_BIND_LENGTH) throw bad(`longer than ${MAX_BIND_LENGTH} characters`);
  const m = /^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+):(\d{1,5})$/.exec(value);
  if (!m) throw bad('expected host:port, e.g. 127.0.0.1:9464 or 0.0.0.0:9464');
  const host = m[1]!.replace(/^\[|\]$/g, '');
  if (m[1]!.startsWith('[') && isIP(host) !== 6) throw bad(`"${host}" is not an IPv6 address`);
  const port = Number(m[2]);
  if (port < 1 || port > 65535) throw bad(`port ${port} is outside 1-65535`);
  return value;
}

/** The bind address from the flag, else the environment (an empty variable is unset), else none. */
export function metricsBindOf(flag: string | undefined, env: NodeJS.ProcessEnv = process.env): string | undefined {
  if (flag !== undefined) return parseMetricsBind(flag, '--metrics-bind');
  const fromEnv = env.WAVEGATE_METRICS_BIND;
  return fromEnv ? parseMetricsBind(fromEnv, 'WAVEGATE_METRICS_BIND') : undefined;
}

/**
 * Install the SDK Runtime with warnings-only logging and, given a bind address, the Prometheus exporter.
 * Fails INVALID_INPUT naming the address when it cannot listen there (in use, not a local address).
 */
export function installWorkerRuntime(opts: { metricsBind?: string }): void {
  const { Runtime, DefaultLogger } = require('@temporalio/worker') as typeof import('@temporalio/worker');
  if (!opts.metricsBind) return;
  try {
    Runtime.install({
      logger: new DefaultLogger('WARN'),
      telemetryOptions: {
        metrics: {
          prometheus: {
            bindAddress: opts.metricsBind,
            histogramBucketOverrides: { [METRIC.applyDuration]: APPLY_DURATION_BUCKETS },
          },
        },
      },
    });
  } catch (err) {
    throw new WavegateError(
      'INVALID_INPUT',
      `--metrics-bind ${opts.metricsBind}: cannot serve metrics there (${(err as Error).message})`,
      { field: '--metrics-bind', value: opts.metricsBind },
    );
  }
}
