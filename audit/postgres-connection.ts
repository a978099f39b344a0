import { ApplicationFailure } from '@temporalio/common';
import { Client, Pool, type PoolClient } from 'pg';
import { WavegateError } from '../core/errors';
import { readPgpass, storeClientConfig, type StoreClientConfig } from './config';
import { countAuditWriteFailure } from './failures';

/**
 * The PostgreSQL store's connections (postgres.ts): one pool per store, its password asked for only when
 * the server wants one, and each use one transaction whose failures are the audit's (AuditUnwritable,
 * AuditBusy, NOT_FOUND for a database no worker has migrated).
 */

const UNIQUE_VIOLATION = '23505';
const UNDEFINED_TABLE = '42P01';

/** Run `fn` in one transaction on a pooled connection (see connectAuditStore). */
export type WithClient = <T>(
  fn: (client: PoolClient) => Promise<T>,
  transaction: 'write' | 'read',
  caller?: 'activity' | 'cli',
) => Promise<T>;

export interface AuditStoreConnection {
  pool: Pool;
  withClient: WithClient;
}

/**
 * pg leaves the socket of a connection that failed on the client's side mid-authentication (no password
 * to answer SCRAM with) open until the server's authentication_timeout, which keeps a CLI from exiting
 * for a minute: a failed connect closes its socket here.
 */
class ClosingClient extends Client {
  override connect(): Promise<Client>;
  override connect(callback: (err: Error | null, client?: Client) => void): void;
  override connect(callback?: (err: Error | null, client?: Client) => void): Promise<Client> | undefined {
    if (!callback) return super.connect();
    super.connect((err: Error | null) => {
      if (err) (this as unknown as { connection?: { stream?: { destroy(): void } } }).connection?.stream?.destroy();
      callback(err, this);
    });
  }
}

/**
 * The password, asked for only when the server wants one (pg calls this then): the file's
 * (`$WAVEGATE_AUDIT_STORE_PASSWORD_FILE`), else a non-empty `$PGPASSWORD`, else the matching line of
 * `$PGPASSFILE` or `~/.pgpass` (config.ts, as libpq reads it, bounded). With none, INVALID_INPUT saying
 * the three ways to give one, instead of pg's "SASL: SCRAM-SERVER-FIRST-MESSAGE: client password must
 * be a string".
 */
function passwordSource(given: string | undefined, location: string) {
  return async (params: { host?: string; port?: number; database?: string; user?: string }): Promise<string> => {
    if (given !== undefined) return given;
    if (process.env.PGPASSWORD) return process.env.PGPASSWORD;
    const target = {
      host: params.host ?? '',
      port: params.port ?? 5432,
      database: params.database ?? '',
      user: params.user ?? '',
    };
    const pgpass = readPgpass(target);
    if (pgpass.password) return pgpass.password;
    throw new WavegateError(
      'INVALID_INPUT',
      `audit store ${location}: the server asks for the password of user ${JSON.stringify(target.user)} and none was given: set $PGPASSWORD, name a file holding it (mode 0600) with $WAVEGATE_AUDIT_STORE_PASSWORD_FILE, or add a line ${target.host}:${target.port}:${target.database}:${target.user}:<password> to ~/.pgpass (mode 0600)${pgpass.ignored ? ` (${pgpass.ignored}: ignored)` : ''}`,
      { store: location, field: 'password' },
    );
  };
}

/**
 * A connection that could not be made, in words that name the server (host and port, never a password):
 * pg's own "timeout exceeded when trying to connect" says neither where nor how long.
 */
function connectError(err: unknown, client: StoreClientConfig): unknown {
  if (err instanceof WavegateError) return err;
  const message = (err as Error).message ?? String(err);
  if (/timeout exceeded when trying to connect|connection timeout/i.test(message)) {
    const where = `${client.host}:${client.port ?? 5432}`;
    const e = new Error(
      `no connection to ${where} within ${(client.connectionTimeoutMillis ?? 0) / 1000}s (?connect_timeout= sets how long)`,
    );
    (e as { code?: string }).code = 'ETIMEDOUT';
    return e;
  }
  return err;
}

/**
 * The store's pool. The URL carries host, port, user, database and sslmode/sslrootcert… (checked, files
 * read: config.ts, bounded; a file it cannot read is bad input); the password is never in it, and is asked
 * for only when the server wants one.
 */
export function connectAuditStore(opts: {
  url: string;
  location: string;
  password?: string;
  maxConnections?: number;
  log: (line: string) => void;
}): AuditStoreConnection {
  const clientConfig = storeClientConfig(opts.url);
  const pool = new Pool({
    ...clientConfig,
    // pg calls it with the connection's parameters (its types declare no argument).
    password: passwordSource(opts.password, opts.location) as () => Promise<string>,
    max: opts.maxConnections ?? 10,
    query_timeout: 30_000,
    // Idle connections never keep a CLI or a stopped worker alive.
    allowExitOnIdle: true,
    Client: ClosingClient,
  });
  // An idle connection the server drops must not take the worker down; the next query reconnects.
  pool.on('error', (err) => opts.log(`audit store ${opts.location}: idle connection lost (${err.message})`));

  /**
   * `caller`: an activity (append, health) turns any connection failure into a retryable AuditUnwritable
   * (the password may be given later); the CLI (segments, earlierRuns) gets bad configuration (no
   * password) as the INVALID_INPUT it is, exit 2.
   */
  const withClient: WithClient = async (fn, transaction, caller = 'activity') => {
    let client: PoolClient;
    try {
      client = await pool.connect();
    } catch (err) {
      const cause = connectError(err, clientConfig);
      if (caller === 'cli' && cause instanceof WavegateError) throw cause;
      throw unwritable(opts.location, cause);
    }
    try {
      await client.query(transaction === 'write' ? 'BEGIN' : 'BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
      const result = await fn(client);
      await client.query('COMMIT');
      return result;
    } catch (err) {
      await client.query('ROLLBACK').catch(() => {});
      throw transactionFailure(opts.location, err);
    } finally {
      client.release();
    }
  };
  return { pool, withClient };
}

/** What a transaction that failed throws: the audit's own failures as they are, the database's in the audit's words. */
function transactionFailure(location: string, err: unknown): unknown {
  if (err instanceof ApplicationFailure || err instanceof WavegateError) return err;
  if ((err as { code?: string }).code === UNIQUE_VIOLATION) {
    return ApplicationFailure.create({
      type: 'AuditBusy',
      message: `audit store ${location}: another writer wrote the same place at the same moment; retrying`,
      nonRetryable: false,
    });
  }
  if ((err as { code?: string }).code === UNDEFINED_TABLE) {
    return new WavegateError(
      'NOT_FOUND',
      `audit store ${location}: no wavegate audit tables (no worker with --audit-store has started against this database yet)`,
    );
  }
  return unwritable(location, err);
}

/** A store it cannot write now: retryable, counted as an `unwritable` write failure. */
function unwritable(location: string, err: unknown): ApplicationFailure {
  countAuditWriteFailure('unwritable');
  // A WavegateError already names the store.
  const message = err instanceof WavegateError ? err.message : `audit store ${location}: ${(err as Error).message}`;
  return ApplicationFailure.create({
    type: 'AuditUnwritable',
    message,
    nonRetryable: false,
    details: [{ store: location, code: (err as { code?: string }).code ?? null }],
  });
}
