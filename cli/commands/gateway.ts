import { resolve } from 'node:path';
import { getHeapStatistics } from 'node:v8';
import { readFlagFile } from '../../intake/files';
import type { Command } from 'commander';
import { WavegateError } from '../../core/errors';
import { describeConnection, resolveConnectionSettings, type TemporalFlags } from '../../workers/connection';
import { checkProfilesRoot, describeProfilesRoot, resolveProfilesRoot } from '../../intake/profiles-root';
import { enrolmentHook } from '../../gateway/enrolled';
import { inventoryPins, type AgentPins } from '../../gateway/pins';
import { IdentityRotations, rotatingPins } from '../../gateway/identity-rotation';
import { verifiedSchedule } from '../../intake/rotation-schedule';
import { DEFAULT_LIMITS, type GatewayLimits } from '../../gateway/limits';
import { startGateway } from '../../gateway/server';
import { parseListen } from '../../http/listen';
import { connectClient, withTemporalOptions } from '../client';
import { action } from '../run';
import { formatDurationMs, parseDurationMs } from '../../core/duration';
import type { KeyPair } from '../../core/signing';
import { DEFAULT_TIMESTAMP_EXPIRY_MS, MAX_TIMESTAMP_EXPIRY_MS } from '../../core/timestamp';
import { readSigningKeyFile } from '../../intake/checkpoint-keys';

const log = (line: string) => process.stdout.write(`${line}\n`);

const LOOPBACK = new Set(['127.0.0.1', '::1', 'localhost']);

function readPem(flag: string, path: string): Buffer {
  // A regular file of bounded size only: a FIFO or /dev/zero named here would hang or grow the gateway.
  return readFlagFile(flag, path);
}

function positive(flag: string, value: string | undefined, fallback: number, max: number): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!/^\d+$/.test(value) || n < 1 || n > max)
    throw new WavegateError(
      'INVALID_INPUT',
      `${flag}: must be a whole number 1-${max} (got ${JSON.stringify(value)})`,
      { field: flag, value },
    );
  return n;
}

interface GatewayFlags extends TemporalFlags {
  listen: string;
  inventory: string;
  profiles?: string;
  profilesRoot?: string;
  httpsCert?: string;
  httpsKey?: string;
  insecureHttp?: boolean;
  maxLongPolls?: string;
  maxLongPollsPerDevice?: string;
  maxConnections?: string;
  maxConnectionsPerSource?: string;
  maxRequests?: string;
  maxRequestsPerSource?: string;
  noncesPerDevice?: string;
  refusalLogPerSecond?: string;
  acceptAgentsWithoutDigest?: boolean;
  timestampKey?: string[];
  timestampExpiry?: string;
  rotation?: string[];
  rotationState?: string;
}

/**
 * `--timestamp-key` (repeatable: the keys of the profiles' trust-root `timestamp` role this gateway signs agents'
 * timestamps with; each a `wavegate keygen` key file, the owner's alone, never logged) and `--timestamp-expiry`
 * (how long each is valid: 1 s to 7 d, default 24 h). Exit 2 naming the flag otherwise.
 */
export function timestampSettings(flags: Pick<GatewayFlags, 'timestampKey' | 'timestampExpiry'>): {
  timestampKeys?: KeyPair[];
  timestampExpiryMs?: number;
} {
  const files = flags.timestampKey ?? [];
  if (flags.timestampExpiry !== undefined && files.length === 0)
    throw new WavegateError(
      'INVALID_INPUT',
      '--timestamp-expiry: only with --timestamp-key (it signs the timestamps)',
      {
        field: '--timestamp-expiry',
        value: flags.timestampExpiry,
      },
    );
  if (files.length === 0) return {};
  const keys = files.map((file) => readSigningKeyFile('--timestamp-key', file));
  const kids = new Set(keys.map((k) => k.kid));
  if (kids.size !== keys.length)
    throw new WavegateError('INVALID_INPUT', '--timestamp-key: the same key given twice', { field: '--timestamp-key' });
  if (flags.timestampExpiry === undefined) return { timestampKeys: keys };
  const ms = parseDurationMs(flags.timestampExpiry);
  if (ms === undefined || ms < 1_000 || ms > MAX_TIMESTAMP_EXPIRY_MS)
    throw new WavegateError(
      'INVALID_INPUT',
      `--timestamp-expiry: must be a duration from 1s to 7d, e.g. 24h (got ${JSON.stringify(flags.timestampExpiry)})`,
      { field: '--timestamp-expiry', value: flags.timestampExpiry },
    );
  return { timestampKeys: keys, timestampExpiryMs: ms };
}

/** The gateway's caps (gateway/limits.ts): flag, limit field, upper bound, what it counts. */
const LIMIT_FLAGS: { flag: string; key: keyof GatewayLimits & keyof GatewayFlags; max: number; what: string }[] = [
  {
    flag: '--max-connections',
    key: 'maxConnections',
    max: 1_000_000,
    what: 'open connections in all; one more is closed at once',
  },
  {
    flag: '--max-connections-per-source',
    key: 'maxConnectionsPerSource',
    max: 1_000_000,
    what: 'open connections from one source address (raise it for many devices behind one NAT)',
  },
  {
    flag: '--max-requests',
    key: 'maxRequests',
    max: 1_000_000,
    what: 'requests handled at once in all, long-polls included; more are answered 503 BUSY',
  },
  {
    flag: '--max-requests-per-source',
    key: 'maxRequestsPerSource',
    max: 1_000_000,
    what: 'requests handled at once from one source address; more are answered 503 BUSY',
  },
  {
    flag: '--max-long-polls',
    key: 'maxLongPolls',
    max: 100_000,
    what: 'long-polls held at once; more are answered 503 BUSY',
  },
  {
    flag: '--max-long-polls-per-device',
    key: 'maxLongPollsPerDevice',
    max: 100,
    what: 'long-polls one device may hold; more are answered 429 DEVICE_LIMIT',
  },
  {
    flag: '--nonces-per-device',
    key: 'noncesPerDevice',
    max: 100_000,
    what: "one device's share of the replay cache (requests within the 60 s window); more are answered 429 DEVICE_LIMIT",
  },
  {
    flag: '--refusal-log-per-second',
    key: 'refusalLogPerSecond',
    max: 100_000,
    what: 'refusal lines logged per second; the rest are counted in one "suppressed" line',
  },
];

/** Every cap from its flag (a whole number within bounds, else exit 2 naming the flag and value) or its default. */
export function limitsFromFlags(flags: Partial<Record<keyof GatewayFlags, unknown>>): GatewayLimits {
  const limits = { ...DEFAULT_LIMITS };
  for (const { flag, key, max } of LIMIT_FLAGS)
    limits[key] = positive(flag, flags[key] as string | undefined, DEFAULT_LIMITS[key], max);
  if (limits.maxConnectionsPerSource > limits.maxConnections) {
    throw new WavegateError(
      'INVALID_INPUT',
      `--max-connections-per-source: ${limits.maxConnectionsPerSource} is above --max-connections ${limits.maxConnections}`,
      { field: '--max-connections-per-source', value: String(limits.maxConnectionsPerSource) },
    );
  }
  if (limits.maxRequestsPerSource > limits.maxRequests) {
    throw new WavegateError(
      'INVALID_INPUT',
      `--max-requests-per-source: ${limits.maxRequestsPerSource} is above --max-requests ${limits.maxRequests}`,
      { field: '--max-requests-per-source', value: String(limits.maxRequestsPerSource) },
    );
  }
  return limits;
}

/**
 * `--rotation` (repeatable): each agent-identity schedule verified as `wavegate rotation` verifies it (against its
 * authority's trust under the profiles root); a schedule of another kind, or one that does not verify, is refused.
 */
function identityRotationsOf(
  flags: GatewayFlags,
  pins: AgentPins,
  profilesDir: string,
  log: (line: string) => void,
): IdentityRotations | undefined {
  const paths = flags.rotation ?? [];
  if (paths.length === 0) return undefined;
  const schedules = paths.map((path) => {
    const schedule = verifiedSchedule(path, profilesDir, Date.now());
    if (schedule.rotation.kind !== 'agent-identity')
      throw new WavegateError(
        'INVALID_INPUT',
        `--rotation ${path}: kind ${schedule.rotation.kind}; the gateway takes part in agent-identity rotations only (an SSH login key rotates with wavegate rotation activate)`,
        { field: '--rotation', value: path },
      );
    log(
      `rotation ${schedule.rotation.id} (agent-identity): activate ${schedule.rotation.activate}, retire ${schedule.rotation.retire}`,
    );
    return schedule;
  });
  return new IdentityRotations({
    schedules,
    pins,
    inventoryPath: resolve(flags.inventory),
    ...(flags.rotationState !== undefined ? { stateDir: flags.rotationState } : {}),
    log,
  });
}

export function register(program: Command): void {
  const command = withTemporalOptions(
    program
      .command('gateway')
      .description(
        "Run the device gateway: agents (`wavegate agent`) sync with their own twin through it, authenticated by their identity key; the only Temporal client on the device side. (--tls-* are the Temporal connection's, as for the worker; the gateway's own certificate is --https-cert/--https-key.)",
      )
      .requiredOption('--listen <host:port>', 'address to serve on, e.g. 0.0.0.0:8443 (port 0: any free port, printed)')
      .requiredOption(
        '--inventory <file>',
        'the inventory whose agentKey pins authenticate devices; reloaded on SIGHUP and when the file changes',
      )
      .option(
        '--profiles <dir>',
        'the profiles root whose <profile>/payload/ files are served to agents, by the signed entries of their desired envelopes (default $WAVEGATE_PROFILES or ./profiles)',
      )
      .option('--profiles-root <dir>', 'the same as --profiles')
      .option('--https-cert <file>', 'TLS certificate (PEM) the gateway serves HTTPS with')
      .option('--https-key <file>', 'its private key (PEM)')
      .option('--insecure-http', 'allow plain HTTP on a non-loopback address (behind a TLS-terminating proxy only)')
      .option(
        '--accept-agents-without-digest',
        'during an upgrade only: accept requests of agents older than this gateway (no body digest in their header) for pinned devices; their bodies are read before the signature is checked',
      )
      .option(
        '--timestamp-key <file>',
        "a key of the profiles' trust-root timestamp role (wavegate keygen, 0600): each sync answer carries the device's timestamp per profile, signed with it; repeatable",
        (v: string, all: string[] = []) => [...all, v],
      )
      .option(
        '--timestamp-expiry <duration>',
        'how long a timestamp is valid: an agent whose newest has expired reports stale and applies nothing new (1s-7d, default 24h)',
      )
      .option(
        '--rotation <schedule-envelope>',
        "a signed agent-identity rotation schedule (wavegate rotation sign): its devices' agents are told, prove their new keys to this gateway (recorded in <id>.proofs.json beside its state file), either key is accepted until the retire; repeatable",
        (v: string, all: string[] = []) => [...all, v],
      )
      .option(
        '--rotation-state <dir>',
        'directory of the rotations state files (as wavegate rotation --state; default .wavegate-rotations/ beside the inventory)',
      )
      .option(
        '--max-long-polls <n>',
        `long-polls held at once; more are answered 503 BUSY (default ${DEFAULT_LIMITS.maxLongPolls})`,
      ),
  );
  for (const { flag, key, what } of LIMIT_FLAGS)
    if (flag !== '--max-long-polls') command.option(`${flag} <n>`, `${what} (default ${DEFAULT_LIMITS[key]})`);
  command.action(
    action(async (flags: GatewayFlags) => {
      // Every refusal comes before anything listens or connects: exit 2.
      const listen = parseListen(flags.listen);
      if (!!flags.httpsCert !== !!flags.httpsKey)
        throw new WavegateError(
          'INVALID_INPUT',
          '--https-cert and --https-key: give both (HTTPS) or neither (HTTP on loopback)',
          { field: flags.httpsCert ? '--https-key' : '--https-cert' },
        );
      const tls =
        flags.httpsCert && flags.httpsKey
          ? { cert: readPem('--https-cert', flags.httpsCert), key: readPem('--https-key', flags.httpsKey) }
          : undefined;
      if (!tls && !LOOPBACK.has(listen.host) && !flags.insecureHttp) {
        throw new WavegateError(
          'INVALID_INPUT',
          `--listen ${flags.listen}: plain HTTP only on 127.0.0.1, ::1 or localhost; give --https-cert and --https-key, or --insecure-http behind a TLS-terminating proxy`,
          { field: '--listen', value: flags.listen },
        );
      }
      const limits = limitsFromFlags(flags);
      if (flags.profiles !== undefined && flags.profilesRoot !== undefined)
        throw new WavegateError(
          'INVALID_INPUT',
          '--profiles and --profiles-root: give one (they are the same option)',
          { field: '--profiles-root' },
        );
      const root = flags.profiles ?? flags.profilesRoot;
      const profiles = resolveProfilesRoot({ ...(root !== undefined ? { flag: root } : {}) });
      checkProfilesRoot(profiles);
      const timestamps = timestampSettings(flags);
      const inventoryPinsRead = inventoryPins(flags.inventory, log);
      const identityRotations = identityRotationsOf(flags, inventoryPinsRead, profiles.dir, log);
      const pins = identityRotations ? rotatingPins(identityRotations) : inventoryPinsRead;
      const settings = resolveConnectionSettings(flags);
      const client = await connectClient(settings);
      const onFirstSync = enrolmentHook({
        client,
        taskQueue: settings.taskQueue,
        pins,
        profilesRoot: profiles.dir,
        log,
      });
      const gateway = await startGateway({
        client,
        taskQueue: settings.taskQueue,
        pins,
        profilesRoot: profiles.dir,
        limits,
        acceptAgentsWithoutDigest: flags.acceptAgentsWithoutDigest === true,
        log,
        onFirstSync,
        ...timestamps,
        ...(identityRotations ? { identityRotations } : {}),
        listen: { ...listen, ...(tls ? { tls } : {}) },
      });
      log(`profiles root: ${describeProfilesRoot(profiles)}`);
      if (timestamps.timestampKeys)
        log(
          `timestamps: signed with ${timestamps.timestampKeys.map((k) => k.kid).join(', ')}, valid ${formatDurationMs(timestamps.timestampExpiryMs ?? DEFAULT_TIMESTAMP_EXPIRY_MS)}`,
        );
      log(heapLine(pins.devices));
      log(
        `gateway listening on ${gateway.url} (Temporal ${describeConnection(settings)}, task queue ${settings.taskQueue}); SIGHUP reloads the inventory`,
      );
      const onHup = () => pins.reload('SIGHUP');
      process.on('SIGHUP', onHup);
      await new Promise<void>((resolve) => {
        const stop = (signal: string) => {
          log(`${signal}: stopping the gateway`);
          resolve();
        };
        process.once('SIGTERM', () => stop('SIGTERM'));
        process.once('SIGINT', () => stop('SIGINT'));
      });
      process.off('SIGHUP', onHup);
      await gateway.close();
      await client.connection.close().catch(() => {});
    }),
  );
}

/**
 * The heap the gateway may grow to, said at start. V8 lets a heap grow up to 4x what is live before collecting when its
 * limit is 2 GiB or more (Node's default here), so a gateway of 10,000 agents with ~200 MiB live peaked at ~900 MiB RSS;
 * `node --max-old-space-size=1024` (the shipped systemd unit) holds it under 512 MiB (docs/operations.md, "Gateway memory").
 */
export function heapLine(devices: number, limitBytes = getHeapStatistics().heap_size_limit): string {
  const mib = Math.round(limitBytes / 1048576);
  const advice =
    mib >= 2048
      ? '; Node\'s default: the heap grows up to 4x what is live before it is collected, set node --max-old-space-size (docs/operations.md, "Gateway memory")'
      : '';
  return `heap limit ${mib} MiB for ${devices} pinned devices${advice}`;
}
