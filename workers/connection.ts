import { readFlagFile } from '../intake/files';
import { loadClientConfigProfile, toClientOptions, type ClientConfigProfile } from '@temporalio/envconfig';
import { WavegateError } from '../core/errors';
import { registeredDevUi } from './dev-ui-registry';

/**
 * How a wavegate process reaches Temporal, the CLI and the worker alike: flags first, then the standard
 * environment (`TEMPORAL_ADDRESS`, `TEMPORAL_NAMESPACE`, `TEMPORAL_API_KEY`, `TEMPORAL_TLS*`), then a
 * client config profile (TOML, `--profile-name` / `TEMPORAL_PROFILE`, file `--config-file` /
 * `TEMPORAL_CONFIG_FILE` or `~/.config/temporalio/temporal.toml`), then the local dev server.
 *
 * The API key is only ever taken by reference (a file, an environment variable, the config profile),
 * never as a command-line value that would show in `ps` and shell history, and it is held as a
 * function so that printing or serialising the settings cannot show it.
 */
import { DEFAULT_ADDRESS, DEFAULT_TASK_QUEUE } from './connection-defaults';

export { DEFAULT_ADDRESS, DEFAULT_TASK_QUEUE };

export interface TemporalFlags {
  address?: string;
  namespace?: string;
  taskQueue?: string;
  profileName?: string;
  configFile?: string;
  /** A file holding the API key (trailing whitespace ignored). */
  apiKeyFile?: string;
  /** The name of an environment variable holding the API key. */
  apiKeyEnv?: string;
  tls?: boolean;
  tlsCaCert?: string;
  tlsCert?: string;
  tlsKey?: string;
  tlsServerName?: string;
  uiUrl?: string;
}

type ResolvedOptions = ReturnType<typeof toClientOptions>['connectionOptions'];

export interface ConnectionSettings {
  address: string;
  namespace: string;
  taskQueue: string;
  /** The API key, read when the connection is made (a function: never printed with the settings). */
  apiKey?: () => string;
  tls?: NonNullable<ResolvedOptions['tls']>;
  metadata?: NonNullable<ResolvedOptions['metadata']>;
  /** The Web UI base URL, for links printed to people. */
  uiUrl: string;
}

/** The Web UI that belongs to a frontend address: Temporal Cloud, or the dev server's convention (port + 1000). */
export function defaultUiUrl(address: string): string {
  if (/\.tmprl\.cloud(:\d+)?$/.test(address)) return 'https://cloud.temporal.io';
  const match = /^(.*):(\d+)$/.exec(address);
  if (!match) return `http://${address}:8233`;
  return `http://${match[1]}:${Number(match[2]) + 1000}`;
}

/** The API key by reference: `--api-key-file`, `--api-key-env`, else what the environment or config profile holds. */
function apiKeyOf(
  flags: TemporalFlags,
  env: NodeJS.ProcessEnv,
  fromProfile: ResolvedOptions['apiKey'],
): (() => string) | undefined {
  if (flags.apiKeyFile) {
    const key = readFlagFile('--api-key-file', flags.apiKeyFile).toString('utf8').trim();
    if (!key)
      throw new WavegateError('INVALID_INPUT', `--api-key-file ${flags.apiKeyFile}: the file is empty`, {
        field: '--api-key-file',
        value: flags.apiKeyFile,
      });
    return () => key;
  }
  if (flags.apiKeyEnv) {
    const key = env[flags.apiKeyEnv]?.trim();
    if (!key)
      throw new WavegateError(
        'INVALID_INPUT',
        `--api-key-env ${flags.apiKeyEnv}: the environment variable is unset or empty`,
        { field: '--api-key-env', value: flags.apiKeyEnv },
      );
    return () => key;
  }
  if (typeof fromProfile === 'string' && fromProfile) return () => fromProfile;
  return typeof fromProfile === 'function' ? fromProfile : undefined;
}

export function resolveConnectionSettings(
  flags: TemporalFlags = {},
  env: NodeJS.ProcessEnv = process.env,
): ConnectionSettings {
  let profile: ClientConfigProfile;
  try {
    profile = loadClientConfigProfile({
      ...(flags.profileName ? { profile: flags.profileName } : {}),
      ...(flags.configFile ? { configSource: { path: flags.configFile } } : {}),
      // An empty variable is an unset one (how shells and CI templates "remove" a setting).
      overrideEnvVars: Object.fromEntries(
        Object.entries(env).filter((e): e is [string, string] => e[1] !== undefined && e[1] !== ''),
      ),
    });
  } catch (err) {
    const which = flags.profileName ?? (env.TEMPORAL_PROFILE || undefined);
    throw new WavegateError(
      'INVALID_INPUT',
      `Temporal client config${which ? ` profile "${which}"` : ''}: ${(err as Error).message}`,
    );
  }
  const { connectionOptions, namespace } = toClientOptions(profile);
  const address = flags.address ?? connectionOptions.address ?? DEFAULT_ADDRESS;
  const apiKey = apiKeyOf(flags, env, connectionOptions.apiKey);
  let tls = connectionOptions.tls ?? undefined;
  if (flags.tlsCaCert || flags.tlsCert || flags.tlsKey || flags.tlsServerName) {
    if (!!flags.tlsCert !== !!flags.tlsKey)
      throw new WavegateError('INVALID_INPUT', '--tls-cert and --tls-key: give both for mTLS, or neither');
    tls = {
      ...(flags.tlsServerName ? { serverNameOverride: flags.tlsServerName } : {}),
      ...(flags.tlsCaCert ? { serverRootCACertificate: readFlagFile('--tls-ca-cert', flags.tlsCaCert) } : {}),
      ...(flags.tlsCert && flags.tlsKey
        ? {
            clientCertPair: {
              crt: readFlagFile('--tls-cert', flags.tlsCert),
              key: readFlagFile('--tls-key', flags.tlsKey),
            },
          }
        : {}),
    };
  } else if (flags.tls || (apiKey && tls === undefined)) {
    // An API key implies TLS: a hosted Temporal needs only an address, a namespace and a key.
    tls = true;
  }
  return {
    address,
    namespace: flags.namespace ?? namespace ?? 'default',
    taskQueue: flags.taskQueue ?? (env.WAVEGATE_TASK_QUEUE || DEFAULT_TASK_QUEUE),
    ...(apiKey ? { apiKey } : {}),
    ...(tls !== undefined ? { tls } : {}),
    ...(connectionOptions.metadata ? { metadata: connectionOptions.metadata } : {}),
    uiUrl: (flags.uiUrl ?? (env.WAVEGATE_UI_URL || registeredDevUi(address, env) || defaultUiUrl(address))).replace(
      /\/+$/,
      '',
    ),
  };
}

/** Settings for a server this process started itself (the dev stack): plain local address, no TLS. */
export function localConnectionSettings(
  server: { address: string; namespace: string; uiUrl?: string },
  taskQueue = DEFAULT_TASK_QUEUE,
): ConnectionSettings {
  return {
    address: server.address,
    namespace: server.namespace,
    taskQueue,
    uiUrl: server.uiUrl ?? defaultUiUrl(server.address),
  };
}

/** The options both the client's Connection and the worker's NativeConnection take. */
export function connectionOptions(settings: ConnectionSettings) {
  return {
    address: settings.address,
    ...(settings.tls !== undefined ? { tls: settings.tls } : {}),
    ...(settings.apiKey ? { apiKey: settings.apiKey() } : {}),
    ...(settings.metadata ? { metadata: settings.metadata } : {}),
  };
}

/** What a person reads about where a process connects: never the key, only whether one is used. */
export function describeConnection(settings: ConnectionSettings): string {
  return `${settings.address} namespace ${settings.namespace}${settings.tls ? ` (TLS${settings.apiKey ? ', API key)' : ')'}` : ''}`;
}
