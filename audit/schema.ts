import type { Pool } from 'pg';
import { WavegateError } from '../core/errors';

/**
 * The PostgreSQL audit schema (docs/formats.md, "Audit store in PostgreSQL"), versioned in
 * `wavegate_schema`. Migrations only ever add; each runs once, in its own transaction, under a
 * session advisory lock so that workers starting at the same moment take turns instead of racing
 * on `CREATE TABLE`.
 */
export const MIGRATIONS: ReadonlyArray<{ version: number; statements: readonly string[] }> = [
  {
    version: 1,
    statements: [
      // One row per rollout id: the lock every append takes (SELECT … FOR UPDATE), and which chain
      // (the run id of its first record) and segment are current.
      `CREATE TABLE wavegate_audit_chains (
        rollout_id text PRIMARY KEY,
        chain_run text,
        segment integer NOT NULL DEFAULT 1 CHECK (segment >= 1)
      )`,
      // One row per sealed record. `record` is the record exactly as hashed and MACed (the JSONL line
      // of the file store); the other columns are copies for queries, never trusted by --verify.
      `CREATE TABLE wavegate_audit_records (
        rollout_id text NOT NULL,
        chain_run text NOT NULL,
        segment integer NOT NULL CHECK (segment >= 1),
        seq bigint NOT NULL CHECK (seq >= 1),
        run_id text NOT NULL,
        event text NOT NULL,
        at text NOT NULL,
        prev text NOT NULL,
        hash text NOT NULL,
        record text NOT NULL,
        written_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (rollout_id, chain_run, segment, seq)
      )`,
    ],
  },
  {
    version: 2,
    statements: [
      // Checkpoints kept beside a chain, never as records (docs/formats.md, "Where checkpoints are kept"):
      // one signed note per tree size `n` of the chain, so a retried checkpoint of one size is kept once.
      `CREATE TABLE wavegate_audit_checkpoints (
        rollout_id text NOT NULL,
        chain_run text NOT NULL,
        n bigint NOT NULL CHECK (n >= 0),
        note text NOT NULL,
        written_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (rollout_id, chain_run, n)
      )`,
    ],
  },
];

export const SCHEMA_VERSION = MIGRATIONS.at(-1)!.version;

/** Any fixed 64-bit number: the advisory lock only wavegate's migrations take. ("wavegate" in ASCII.) */
const MIGRATION_LOCK = '8603990598738469989';

/** Bring the database to SCHEMA_VERSION; idempotent. Returns the version found and the one left. */
export async function migrateAuditSchema(pool: Pool): Promise<{ from: number; to: number }> {
  const client = await pool.connect();
  try {
    await client.query('SELECT pg_advisory_lock($1::bigint)', [MIGRATION_LOCK]);
    try {
      await client.query(
        'CREATE TABLE IF NOT EXISTS wavegate_schema (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())',
      );
      const from = Number(
        (await client.query<{ v: number }>('SELECT coalesce(max(version), 0) AS v FROM wavegate_schema')).rows[0]!.v,
      );
      if (from > SCHEMA_VERSION) {
        throw new WavegateError(
          'INVALID_STATE',
          `the audit store's schema is at version ${from}, newer than this wavegate knows (${SCHEMA_VERSION}): upgrade this worker`,
        );
      }
      for (const migration of MIGRATIONS.filter((m) => m.version > from)) {
        await client.query('BEGIN');
        try {
          for (const sql of migration.statements) await client.query(sql);
          await client.query('INSERT INTO wavegate_schema (version) VALUES ($1)', [migration.version]);
          await client.query('COMMIT');
        } catch (err) {
          await client.query('ROLLBACK').catch(() => {});
          throw err;
        }
      }
      return { from, to: Math.max(from, SCHEMA_VERSION) };
    } finally {
      await client.query('SELECT pg_advisory_unlock($1::bigint)', [MIGRATION_LOCK]).catch(() => {});
    }
  } finally {
    client.release();
  }
}
