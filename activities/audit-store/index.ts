import { DEFAULT_AUDIT_DIR } from '../audit';
import { parseAuditStore, readStorePassword } from './config';
import { createFileAuditStore } from './file';
import { createPostgresAuditStore, type PostgresAuditStore } from './postgres';
import type { AuditStore } from './types';

export type { AuditStore } from './types';
export type { PostgresAuditStore } from './postgres';
export { parseAuditStore, readStorePassword, redactStoreUrl } from './config';
export { createFileAuditStore } from './file';
export { createPostgresAuditStore } from './postgres';
export { migrateAuditSchema, SCHEMA_VERSION } from './schema';

export interface OpenAuditStoreOptions {
  /** `--audit-store` / `$WAVEGATE_AUDIT_STORE`: absent or `file`, or postgres://user@host:port/db. */
  store?: string;
  /** The file store's directory (default `.wavegate/audit`). */
  auditDir?: string;
  macKey?: Uint8Array;
  log?: (line: string) => void;
  env?: NodeJS.ProcessEnv;
}

/**
 * The store a worker or the CLI was configured with. Bad configuration (a password in the URL, an
 * unreadable password file) is INVALID_INPUT naming the field, before anything connects.
 */
export function openAuditStore(opts: OpenAuditStoreOptions): AuditStore | PostgresAuditStore {
  const config = parseAuditStore(opts.store);
  if (config.kind === 'file') return createFileAuditStore({ auditDir: opts.auditDir ?? DEFAULT_AUDIT_DIR, macKey: opts.macKey, log: opts.log });
  const password = readStorePassword(opts.env);
  return createPostgresAuditStore({ url: config.url, location: config.location, macKey: opts.macKey, log: opts.log, ...(password !== undefined ? { password } : {}) });
}

export function isPostgresStore(store: AuditStore): store is PostgresAuditStore {
  return typeof (store as PostgresAuditStore).migrate === 'function';
}

/** The workflow's two audit activities over a store: the same names and failures whichever store it is. */
export function auditActivitiesOf(store: AuditStore) {
  return {
    appendAudit: (event: Parameters<AuditStore['append']>[0]) => store.append(event),
    auditHealth: (input: Parameters<AuditStore['health']>[0]) => store.health(input),
  };
}
