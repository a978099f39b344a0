/**
 * Where a client connects when nothing says otherwise, apart from workers/connection.ts so that the
 * commands' option help (cli/temporal-options.ts) can name them without loading the Temporal SDK.
 */
export const DEFAULT_TASK_QUEUE = 'wavegate';
export const DEFAULT_ADDRESS = '127.0.0.1:7233';
