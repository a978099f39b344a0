import { WavegateError } from '../core/errors';
import { readAuditKey } from './file';
import { parseAuditStore, readStorePassword } from './config';
import { createPostgresAuditStore, type PostgresAuditStore } from './postgres';

/**
 * What `wavegate worker` does with `--audit-store` / `$WAVEGATE_AUDIT_STORE` before it connects to
 * Temporal: refuse bad configuration (exit 2, the password never printed), open the PostgreSQL store
 * and run its migration, and say where the audit goes with any secret redacted. Undefined: the file
 * store, as before (the worker's activities build it from --audit-dir).
 */
export async function workerAuditStore(opts: {
  flag?: string;
  env?: NodeJS.ProcessEnv;
  auditKeyFile?: string;
  log: (line: string) => void;
}): Promise<PostgresAuditStore | undefined> {
  const env = opts.env ?? process.env;
  const fromFlag = opts.flag !== undefined;
  const config = parseAuditStore(
    opts.flag ?? (env.WAVEGATE_AUDIT_STORE || undefined),
    fromFlag ? '--audit-store' : '$WAVEGATE_AUDIT_STORE',
  );
  if (config.kind === 'file') return undefined;
  const password = readStorePassword(env);
  const macKey = opts.auditKeyFile ? readAuditKey(opts.auditKeyFile) : undefined;
  const store = createPostgresAuditStore({
    url: config.url,
    location: config.location,
    log: opts.log,
    ...(password !== undefined ? { password } : {}),
    ...(macKey ? { macKey } : {}),
  });
  try {
    const { from, to } = await store.migrate();
    opts.log(`audit store: ${config.location} (schema version ${to}${from === to ? '' : `, migrated from ${from}`})`);
  } catch (err) {
    await store.close().catch(() => {});
    if (err instanceof WavegateError) throw err;
    throw new WavegateError('UNAVAILABLE', `audit store ${config.location}: ${(err as Error).message}`);
  }
  return store;
}
