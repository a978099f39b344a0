import { WavegateError } from '../core/errors';
import { DEFAULT_AUDIT_DIR } from './file';
import { parseAuditStore, readStorePassword } from './config';
import { createFileAuditStore } from './file';
import { createPostgresAuditStore, type PostgresAuditStore } from './postgres';
import type { AuditSegment } from '../core/audit';
import type { AuditStore } from './types';
import type { Checkpointer } from './checkpointer';

export type { AuditStore } from './types';
export type { PostgresAuditStore } from './postgres';
export { parseAuditStore, readStorePassword, redactStoreUrl } from './config';
export { createFileAuditStore } from './file';
export { createPostgresAuditStore } from './postgres';
export { createCheckpointer, type CheckpointConfig } from './checkpointer';
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
  if (config.kind === 'file')
    return createFileAuditStore({ auditDir: opts.auditDir ?? DEFAULT_AUDIT_DIR, macKey: opts.macKey, log: opts.log });
  const password = readStorePassword(opts.env);
  return createPostgresAuditStore({
    url: config.url,
    location: config.location,
    macKey: opts.macKey,
    log: opts.log,
    ...(password !== undefined ? { password } : {}),
  });
}

export function isPostgresStore(store: AuditStore): store is PostgresAuditStore {
  return typeof (store as PostgresAuditStore).migrate === 'function';
}

/**
 * The workflow's two audit activities over a store: the same names and failures whichever store it is. With a
 * checkpointer (`wavegate worker --checkpoint-key`, checkpointer.ts), a phase-transition record's append also
 * keeps a checkpoint of the trail beside it, in the same activity: no Temporal action of its own.
 */
export function auditActivitiesOf(store: AuditStore, checkpointer?: Checkpointer) {
  return {
    appendAudit: async (event: Parameters<AuditStore['append']>[0]) => {
      const head = await store.append(event);
      await checkpointer?.afterAppend(event, head);
      return head;
    },
    auditHealth: (input: Parameters<AuditStore['health']>[0]) => store.health(input),
  };
}

/**
 * A trail as stored, for `wavegate audit`: its segments and the earlier runs kept apart, from the file
 * store (`auditDir`) or the database the CLI names (`--audit-store` / `$WAVEGATE_AUDIT_STORE`). Reads only:
 * the CLI never migrates. A database it cannot reach is UNAVAILABLE, a trail it has not, NOT_FOUND.
 */
export async function readAuditTrail(opts: {
  store?: string;
  auditDir?: string;
  rolloutId: string;
  runId?: string;
  env?: NodeJS.ProcessEnv;
}) {
  const env = opts.env ?? process.env;
  const value = opts.store ?? (env.WAVEGATE_AUDIT_STORE || undefined);
  const config = parseAuditStore(value, opts.store !== undefined ? '--audit-store' : '$WAVEGATE_AUDIT_STORE');
  const store = openAuditStore({ store: value, auditDir: opts.auditDir, env });
  try {
    const segments = await store.segments(opts.rolloutId, opts.runId);
    const earlierRuns = opts.runId ? [] : await store.earlierRuns(opts.rolloutId);
    const checkpoints = opts.runId ? { notes: [] } : await keptCheckpoints(store, opts.rolloutId);
    return { location: store.location, kind: config.kind, segments, earlierRuns, checkpoints };
  } catch (err) {
    if (err instanceof WavegateError) throw err;
    throw new WavegateError('UNAVAILABLE', (err as Error).message);
  } finally {
    await store.close();
  }
}

/**
 * The checkpoints kept beside the current chain (checkpointer.ts), or why they cannot be read: a damaged
 * checkpoints file is a finding of `--verify`, not a reason to stop reading the trail.
 */
async function keptCheckpoints(
  store: AuditStore,
  rolloutId: string,
): Promise<{ notes: string[] } | { unreadable: string }> {
  try {
    return { notes: await store.checkpoints(rolloutId) };
  } catch (err) {
    if (err instanceof WavegateError && err.code === 'INVALID_STATE') return { unreadable: err.message };
    throw err;
  }
}

/** What a reader of several trails holds open: one store, its trails by id (errors as readAuditTrail's). */
export interface AuditTrailReader {
  /** Where it is, fit to print. */
  readonly location: string;
  /** Every segment of a trail's current chain (or run `runId`'s); NOT_FOUND when it has none. */
  segments(rolloutId: string, runId?: string): Promise<AuditSegment[]>;
}

/**
 * One store opened for reading, for as long as `fn` runs: `wavegate audit --verify` reads a rollout's
 * linked slice trails through it (one pool, not one per trail). A database it cannot reach is
 * UNAVAILABLE, a trail it has not, NOT_FOUND. Reads only: the CLI never migrates.
 */
export async function withAuditReader<T>(
  opts: { store?: string; auditDir?: string; env?: NodeJS.ProcessEnv },
  fn: (reader: AuditTrailReader) => Promise<T>,
): Promise<T> {
  const env = opts.env ?? process.env;
  const value = opts.store ?? (env.WAVEGATE_AUDIT_STORE || undefined);
  parseAuditStore(value, opts.store !== undefined ? '--audit-store' : '$WAVEGATE_AUDIT_STORE');
  const store = openAuditStore({ store: value, auditDir: opts.auditDir, env });
  const reader: AuditTrailReader = {
    location: store.location,
    segments: async (rolloutId, runId) => {
      try {
        return await store.segments(rolloutId, runId);
      } catch (err) {
        if (err instanceof WavegateError) throw err;
        throw new WavegateError('UNAVAILABLE', (err as Error).message);
      }
    },
  };
  try {
    return await fn(reader);
  } finally {
    await store.close();
  }
}
