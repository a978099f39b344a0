import { auditContentOfEvent } from '../core/audit';
import { WavegateError } from '../core/errors';
import { auditInvalid } from './failures';
import { appendLocked } from './postgres-append';
import { connectAuditStore } from './postgres-connection';
import { appendCheckpointRow, checkpointRows } from './postgres-checkpoints';
import { chainSegments, earlierChainRuns } from './postgres-reads';
import { currentChain, inspectRows, rowPlace, type PostgresStoreContext, type RowsProof } from './postgres-segment';
import { migrateAuditSchema } from './schema';
import { createSegmentChecker, segmentHealth } from './segment-check';
import type { AuditHealth, AuditHealthInput, AuditStore } from './types';

/**
 * The audit store in PostgreSQL (docs/architecture.md, "Audit"): the file store's records and rules
 * (audit/file.ts), in one table every worker writes and any operator's `wavegate audit --verify`
 * reads. An append is one transaction that first locks the rollout's row in `wavegate_audit_chains`
 * (SELECT … FOR UPDATE), so two workers appending to one rollout take turns: the second sees the
 * first's record, and either finds its own append already there (the same content: a no-op), other
 * content at its seq (`AuditConflict`, never an overwrite), or chains onto it. The primary key
 * (rollout, chain run, segment, seq) refuses a second row at one place even if the lock were skipped.
 * Each append re-checks the current segment's chain and MACs, as the file store does, so a row edited
 * in the database stops the chain (`AuditCorrupt`) until an operator's override.
 */
export interface PostgresAuditStoreOptions {
  /** postgres://user@host:port/db, with no password (parseAuditStore refused one). */
  url: string;
  /** Printed in place of the URL. */
  location: string;
  /** From $WAVEGATE_AUDIT_STORE_PASSWORD_FILE; absent: $PGPASSWORD, then ~/.pgpass, asked when the server wants one. */
  password?: string;
  macKey?: Uint8Array;
  log?: (line: string) => void;
  /** Connections kept open (default 10). */
  maxConnections?: number;
}

export interface PostgresAuditStore extends AuditStore {
  /** The worker runs this at start (idempotent, versioned, one worker at a time). */
  migrate(): Promise<{ from: number; to: number }>;
}

/**
 * The store over its parts: the connection (postgres-connection.ts), the append (postgres-append.ts), a
 * segment's rows checked (postgres-segment.ts, segment-check.ts), the CLI's reads (postgres-reads.ts) and
 * the schema (schema.ts).
 */
export function createPostgresAuditStore(opts: PostgresAuditStoreOptions): PostgresAuditStore {
  const log = opts.log ?? (() => {});
  const { pool, withClient } = connectAuditStore({ ...opts, log });
  const ctx: PostgresStoreContext = {
    location: opts.location,
    macKey: opts.macKey,
    log,
    checker: createSegmentChecker<RowsProof>(opts.macKey),
  };

  return {
    location: opts.location,

    migrate: async () => {
      try {
        return await migrateAuditSchema(pool);
      } catch (err) {
        if (err instanceof WavegateError) throw err;
        throw new WavegateError(
          'UNAVAILABLE',
          `audit store ${opts.location}: cannot migrate the schema (${(err as Error).message})`,
        );
      }
    },

    async append(event) {
      let content: string;
      try {
        content = auditContentOfEvent(event);
      } catch (err) {
        auditInvalid(err);
      }
      return withClient((client) => appendLocked(ctx, client, event, content), 'write');
    },

    async health(input: AuditHealthInput): Promise<AuditHealth> {
      if (typeof input?.rolloutId !== 'string' || input.rolloutId.length === 0)
        auditInvalid(
          new WavegateError(
            'INVALID_INPUT',
            `rollout id ${JSON.stringify(input?.rolloutId)}: expected a non-empty string`,
          ),
        );
      return withClient(async (client): Promise<AuditHealth> => {
        const chain = await currentChain(client, input.rolloutId);
        const state = await inspectRows(ctx, client, input.rolloutId, chain?.chain_run ?? null, chain?.segment ?? 1);
        return segmentHealth(state, rowPlace(opts.location, input.rolloutId, state.segment), input.head);
      }, 'read');
    },

    segments: (rolloutId, runId) =>
      withClient((client) => chainSegments(client, opts.location, rolloutId, runId), 'read', 'cli'),

    earlierRuns: (rolloutId) => withClient((client) => earlierChainRuns(client, rolloutId), 'read', 'cli'),

    async appendCheckpoint(rolloutId, note) {
      await withClient((client) => appendCheckpointRow(client, opts.location, rolloutId, note), 'write');
    },

    checkpoints: (rolloutId) => withClient((client) => checkpointRows(client, rolloutId), 'read', 'cli'),

    close: () => pool.end(),
  };
}
