import { spawn, type ChildProcess } from 'node:child_process';
import { accessSync, constants, createWriteStream, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import { freePort } from '../../sim/ports';

/**
 * A real Prometheus server on 127.0.0.1 for tests, with a throwaway config and TSDB under `dir`.
 *
 * The binary comes from `PROMETHEUS_PATH` or `PATH` (Debian/Ubuntu: `apt-get install -y
 * --no-install-recommends prometheus`). A missing binary is an error naming that command, never a
 * skip: a health gate against Prometheus is a feature, and its test must run where CI claims it does.
 */
export const PROMETHEUS_INSTALL_HINT = 'apt-get install -y --no-install-recommends prometheus (or set PROMETHEUS_PATH)';

export function findPrometheus(): string {
  const fromEnv = process.env.PROMETHEUS_PATH;
  const candidates = fromEnv
    ? [fromEnv]
    : (process.env.PATH ?? '')
        .split(delimiter)
        .filter(Boolean)
        .map((dir) => join(dir, 'prometheus'));
  for (const file of candidates) {
    try {
      accessSync(file, constants.X_OK);
      return file;
    } catch {
      /* next */
    }
  }
  throw new Error(
    fromEnv
      ? `PROMETHEUS_PATH=${fromEnv} is not an executable file; install Prometheus with: ${PROMETHEUS_INSTALL_HINT}`
      : `no "prometheus" binary on PATH; the Prometheus health-gate tests need a real one: ${PROMETHEUS_INSTALL_HINT}`,
  );
}

export interface Prometheus {
  /** `http://127.0.0.1:<port>`: the base url a profile's `metrics.errorRate.prometheus.url` takes. */
  url: string;
  /** Poll an instant query until it returns at least one series (the first scrape landed). */
  waitForSeries(query: string, timeoutMs?: number): Promise<void>;
  /** SIGTERM, then SIGKILL after 5 s; idempotent. */
  stop(): Promise<void>;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Start Prometheus scraping `targets` (`host:port`, path `/metrics`) every `scrapeIntervalMs`
 * (default 1 s). Resolves once `/-/ready` answers 200.
 */
export async function startPrometheus(opts: {
  dir: string;
  targets: string[];
  metricsPath?: string;
  scrapeIntervalMs?: number;
  readyTimeoutMs?: number;
}): Promise<Prometheus> {
  const binary = findPrometheus();
  mkdirSync(join(opts.dir, 'data'), { recursive: true });
  const interval = `${Math.max(1, Math.round((opts.scrapeIntervalMs ?? 1_000) / 1_000))}s`;
  const configFile = join(opts.dir, 'prometheus.yml');
  writeFileSync(
    configFile,
    [
      'global:',
      `  scrape_interval: ${interval}`,
      `  evaluation_interval: ${interval}`,
      'scrape_configs:',
      '  - job_name: wavegate-test',
      `    metrics_path: ${opts.metricsPath ?? '/metrics'}`,
      '    static_configs:',
      `      - targets: [${opts.targets.map((t) => JSON.stringify(t)).join(', ')}]`,
      '',
    ].join('\n'),
  );
  const logFile = join(opts.dir, 'prometheus.log');
  const readyTimeoutMs = opts.readyTimeoutMs ?? 30_000;

  // The free port may be taken between our probe and Prometheus binding it: try a few times.
  for (let attempt = 1; ; attempt++) {
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    const log = createWriteStream(logFile, { flags: 'a' });
    const child: ChildProcess = spawn(
      binary,
      [
        `--config.file=${configFile}`,
        `--storage.tsdb.path=${join(opts.dir, 'data')}`,
        `--web.listen-address=127.0.0.1:${port}`,
        '--storage.tsdb.retention.time=1h',
        '--log.level=warn',
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    child.stdout!.pipe(log);
    child.stderr!.pipe(log);
    let exited: number | string | null | undefined;
    const exit = new Promise<void>((resolve) =>
      child.once('exit', (code, signal) => {
        exited = code ?? signal;
        resolve();
      }),
    );
    child.once('error', (err) => {
      exited = err.message;
      log.write(`spawn error: ${err.message}\n`);
    });

    const stop = async () => {
      if (exited !== undefined) return void log.end();
      child.kill('SIGTERM');
      const killer = setTimeout(() => child.kill('SIGKILL'), 5_000);
      await exit;
      clearTimeout(killer);
      log.end();
    };

    const deadline = Date.now() + readyTimeoutMs;
    let ready = false;
    while (Date.now() < deadline && exited === undefined) {
      try {
        const res = await fetch(`${url}/-/ready`, { signal: AbortSignal.timeout(1_000) });
        if (res.status === 200) {
          ready = true;
          break;
        }
        await res.body?.cancel();
      } catch {
        /* not listening yet */
      }
      await sleep(100);
    }
    if (!ready) {
      await stop();
      const tail = readFileSync(logFile, 'utf8').split('\n').slice(-15).join('\n');
      if (attempt < 3 && /address already in use/.test(tail)) continue;
      throw new Error(
        `prometheus (${binary}) did not become ready on ${url} within ${readyTimeoutMs} ms${exited !== undefined ? ` (exited: ${exited})` : ''}; log ${logFile}:\n${tail}`,
      );
    }

    return {
      url,
      stop,
      async waitForSeries(query, timeoutMs = 20_000) {
        const until = Date.now() + timeoutMs;
        let last = '';
        while (Date.now() < until) {
          try {
            const res = await fetch(`${url}/api/v1/query?query=${encodeURIComponent(query)}`, {
              signal: AbortSignal.timeout(2_000),
            });
            const json = (await res.json()) as { status: string; data?: { result?: unknown[] } };
            last = JSON.stringify(json).slice(0, 200);
            if (json.status === 'success' && (json.data?.result?.length ?? 0) > 0) return;
          } catch (err) {
            last = (err as Error).message;
          }
          await sleep(200);
        }
        throw new Error(
          `prometheus at ${url}: query ${query} returned no series within ${timeoutMs} ms (last answer: ${last})`,
        );
      },
    };
  }
}
