import type { Command } from 'commander';
import { DEFAULT_ADDRESS, DEFAULT_TASK_QUEUE } from '../workers/connection-defaults';

// Apart from cli/client.ts (which loads the Temporal client): `plan` takes these options and loads the client only when it asks a worker.
/** Add the connection options every Temporal-facing command takes (resolved by workers/connection.ts). */
export function withTemporalOptions(cmd: Command): Command {
  return cmd
    .option(
      '--address <host:port>',
      `Temporal frontend address (default $TEMPORAL_ADDRESS, the config profile, or ${DEFAULT_ADDRESS})`,
    )
    .option('--namespace <ns>', 'Temporal namespace (default $TEMPORAL_NAMESPACE, the config profile, or "default")')
    .option('--task-queue <queue>', `worker task queue (default $WAVEGATE_TASK_QUEUE or "${DEFAULT_TASK_QUEUE}")`)
    .option('--profile-name <name>', 'Temporal client config profile (default $TEMPORAL_PROFILE or "default")')
    .option(
      '--config-file <file.toml>',
      'Temporal client config file (default $TEMPORAL_CONFIG_FILE or ~/.config/temporalio/temporal.toml)',
    )
    .option(
      '--api-key-file <file>',
      'file holding the API key for a hosted Temporal (default $TEMPORAL_API_KEY or the config profile); implies TLS',
    )
    .option('--api-key-env <VAR>', 'environment variable holding the API key; implies TLS')
    .option('--tls', 'connect with TLS (implied by an API key or any --tls-* option)')
    .option('--tls-ca-cert <file>', 'server CA certificate (PEM)')
    .option('--tls-cert <file>', 'client certificate for mTLS (PEM)')
    .option('--tls-key <file>', 'client private key for mTLS (PEM)')
    .option('--tls-server-name <name>', 'server name to verify instead of the address host')
    .option(
      '--ui-url <url>',
      'Temporal Web UI base URL for printed links (default $WAVEGATE_UI_URL or derived from the address)',
    );
}
