import { createHash, type Hash } from 'node:crypto';
import { ApplicationFailure } from '@temporalio/common';
import { Client, Pool, type PoolClient } from 'pg';
import {
  auditContentKey,
  auditContentOfEvent,
  GENESIS_HASH,
  macRecord,
  sealRecord,
  serializeAuditRecord,
  verifyAuditChain,
  type AuditEvent,
  type AuditHead,
  type AuditRecord,
  type AuditSegment,
} from '../core/audit';
import { WavegateError } from '../core/errors';
import { recordAuditWriteFailure } from '../core/metrics';
import { activityMeter } from './activity-meter';
import { nextAppend } from './append-rule';
import { readPgpass, storeClientConfig, type StoreClientConfig } from './config';
import { migrateAuditSchema } from './schema';
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

/** A segment as read from its rows, checked like a file segment. */
interface SegmentState {
  chainRun: string | null;
  segment: number;
  records: AuditRecord[];
  start: AuditHead;
  problem: { line: number | null; seq: number; problem: string; message: string } | null;
}

interface Row {
  seq: string;
  record: string;
}

const GENESIS: AuditHead = { seq: 0, hash: GENESIS_HASH };
const UNIQUE_VIOLATION = '23505';
const UNDEFINED_TABLE = '42P01';

function headOf(state: SegmentState): AuditHead | null {
  const last = state.records.at(-1);
  if (last) return { seq: last.seq, hash: last.hash };
  return state.start.seq > 0 ? state.start : null;
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

/** The URL as pg reads it, checked (config.ts): its TLS files read here, bounded; a file it cannot read is bad input. */
function clientConfigOf(url: string): StoreClientConfig {
  return storeClientConfig(url);
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

export function createPostgresAuditStore(opts: PostgresAuditStoreOptions): PostgresAuditStore {
  const log = opts.log ?? (() => {});
  // The URL carries host, port, user, database and sslmode/sslrootcert… (checked, files read: config.ts);
  // the password is never in it, and is asked for only when the server wants one.
  const clientConfig = clientConfigOf(opts.url);
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
  pool.on('error', (err) => log(`audit store ${opts.location}: idle connection lost (${err.message})`));

  const where = (rolloutId: string, segment: number) =>
    `${opts.location} rollout ${JSON.stringify(rolloutId)} segment ${segment}`;

  /** The worker's `wavegate_audit_write_failures{reason}`, as the file store counts them. */
  function countFailure(reason: 'unwritable' | 'corrupt'): void {
    const meter = activityMeter();
    if (meter) recordAuditWriteFailure(meter, reason);
  }

  function unwritable(err: unknown): ApplicationFailure {
    countFailure('unwritable');
    // A WavegateError already names the store.
    const message =
      err instanceof WavegateError ? err.message : `audit store ${opts.location}: ${(err as Error).message}`;
    return ApplicationFailure.create({
      type: 'AuditUnwritable',
      message,
      nonRetryable: false,
      details: [{ store: opts.location, code: (err as { code?: string }).code ?? null }],
    });
  }

  function invalid(err: unknown): never {
    if (err instanceof WavegateError)
      throw ApplicationFailure.create({ type: 'AuditInvalid', message: err.message, nonRetryable: true });
    throw err;
  }

  /**
   * `caller`: an activity (append, health) turns any connection failure into a retryable AuditUnwritable
   * (the password may be given later); the CLI (segments, earlierRuns) gets bad configuration (no
   * password) as the INVALID_INPUT it is, exit 2.
   */
  async function withClient<T>(
    fn: (client: PoolClient) => Promise<T>,
    transaction: 'write' | 'read',
    caller: 'activity' | 'cli' = 'activity',
  ): Promise<T> {
    let client: PoolClient;
    try {
      client = await pool.connect();
    } catch (err) {
      const cause = connectError(err, clientConfig);
      if (caller === 'cli' && cause instanceof WavegateError) throw cause;
      throw unwritable(cause);
    }
    try {
      await client.query(transaction === 'write' ? 'BEGIN' : 'BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
      const result = await fn(client);
      await client.query('COMMIT');
      return result;
    } catch (err) {
      await client.query('ROLLBACK').catch(() => {});
      if (err instanceof ApplicationFailure || err instanceof WavegateError) throw err;
      if ((err as { code?: string }).code === UNIQUE_VIOLATION) {
        throw ApplicationFailure.create({
          type: 'AuditBusy',
          message: `audit store ${opts.location}: another writer wrote the same place at the same moment; retrying`,
          nonRetryable: false,
        });
      }
      if ((err as { code?: string }).code === UNDEFINED_TABLE) {
        throw new WavegateError(
          'NOT_FOUND',
          `audit store ${opts.location}: no wavegate audit tables (no worker with --audit-store has started against this database yet)`,
        );
      }
      throw unwritable(err);
    } finally {
      client.release();
    }
  }

  async function readSegment(client: PoolClient, rolloutId: string, chainRun: string, segment: number): Promise<Row[]> {
    const { rows } = await client.query<Row>(
      'SELECT seq, record FROM wavegate_audit_records WHERE rollout_id = $1 AND chain_run = $2 AND segment = $3 ORDER BY seq',
      [rolloutId, chainRun, segment],
    );
    return rows;
  }

  /**
   * What this store last found whole, per segment: the next inspect compares a digest the server computes
   * over those rows (so an UPDATE or DELETE of any of them is still seen) and fetches and checks only the
   * rows after them, keeping an append O(new records) instead of re-reading the whole chain.
   */
  const verified = new Map<string, { hasher: Hash; records: AuditRecord[]; digest: string }>();
  const MAX_CACHED_SEGMENTS = 1000;

  async function knownPrefix(client: PoolClient, key: string, rolloutId: string, chainRun: string, segment: number) {
    const known = verified.get(key);
    const last = known?.records.at(-1);
    if (!known || !last) return undefined;
    const { rows } = await client.query<{ n: string; digest: string | null }>(
      `SELECT count(*) AS n, encode(sha256(convert_to(string_agg(record, E'\\n' ORDER BY seq), 'UTF8')), 'hex') AS digest
         FROM wavegate_audit_records WHERE rollout_id = $1 AND chain_run = $2 AND segment = $3 AND seq <= $4`,
      [rolloutId, chainRun, segment, last.seq],
    );
    return Number(rows[0]!.n) === known.records.length && rows[0]!.digest === known.digest
      ? { ...known, last }
      : undefined;
  }

  /** Read and check a segment: every row a record, chained from its start, each MAC the key's. */
  async function inspect(
    client: PoolClient,
    rolloutId: string,
    chainRun: string | null,
    segment: number,
  ): Promise<SegmentState> {
    const state: SegmentState = { chainRun, segment, records: [], start: GENESIS, problem: null };
    if (chainRun === null) return state;
    const key = JSON.stringify([rolloutId, chainRun, segment]);
    const known = await knownPrefix(client, key, rolloutId, chainRun, segment);
    const rows = known
      ? (
          await client.query<Row>(
            'SELECT seq, record FROM wavegate_audit_records WHERE rollout_id = $1 AND chain_run = $2 AND segment = $3 AND seq > $4 ORDER BY seq',
            [rolloutId, chainRun, segment, known.last.seq],
          )
        ).rows
      : await readSegment(client, rolloutId, chainRun, segment);
    verified.delete(key);
    const fresh: AuditRecord[] = [];
    state.records = known ? [...known.records] : [];
    for (const row of rows) {
      let parsed: unknown;
      try {
        parsed = JSON.parse(row.record);
      } catch {
        parsed = undefined;
      }
      if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) {
        state.problem = {
          line: state.records.length + 1,
          seq: Number(row.seq),
          problem: 'edited',
          message: `the row at seq ${row.seq} is not a JSON audit record`,
        };
        return state;
      }
      fresh.push(parsed as AuditRecord);
      state.records.push(parsed as AuditRecord);
    }
    if (segment > 1) {
      const first = state.records[0];
      if (first?.event !== 'audit.override' || !first.lastGood) {
        state.problem = {
          line: 1,
          seq: first?.seq ?? 0,
          problem: 'no-override',
          message: 'a later segment must start with an audit.override record',
        };
        return state;
      }
      state.start = first.lastGood;
    }
    const verdict = known
      ? verifyAuditChain(fresh, undefined, { start: { seq: known.last.seq, hash: known.last.hash }, key: opts.macKey })
      : verifyAuditChain(state.records, undefined, { start: state.start, key: opts.macKey });
    if (!verdict.ok) {
      state.problem = {
        line: Math.max(1, verdict.seq - state.start.seq),
        seq: verdict.seq,
        problem: verdict.problem,
        message: verdict.message,
      };
      return state;
    }
    // The rows joined by newlines, as string_agg joins them; hashed on from where the prefix ended.
    const hasher = known ? known.hasher.copy() : createHash('sha256');
    for (const [i, row] of rows.entries()) hasher.update(known || i > 0 ? `\n${row.record}` : row.record, 'utf8');
    if (verified.size >= MAX_CACHED_SEGMENTS) verified.delete(verified.keys().next().value!);
    if (state.records.length > 0)
      verified.set(key, { hasher, records: state.records, digest: hasher.copy().digest('hex') });
    return state;
  }

  async function insert(
    client: PoolClient,
    rolloutId: string,
    chainRun: string,
    segment: number,
    sealed: AuditRecord,
  ): Promise<AuditHead> {
    const record = opts.macKey ? macRecord(sealed, opts.macKey) : sealed;
    await client.query(
      'INSERT INTO wavegate_audit_records (rollout_id, chain_run, segment, seq, run_id, event, at, prev, hash, record) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)',
      [
        rolloutId,
        chainRun,
        segment,
        record.seq,
        record.runId,
        record.event,
        record.at,
        record.prev,
        record.hash,
        serializeAuditRecord(record),
      ],
    );
    await client.query('UPDATE wavegate_audit_chains SET chain_run = $2, segment = $3 WHERE rollout_id = $1', [
      rolloutId,
      chainRun,
      segment,
    ]);
    return { seq: record.seq, hash: record.hash };
  }

  function corrupt(state: SegmentState, rolloutId: string): ApplicationFailure {
    countFailure('corrupt');
    const p = state.problem!;
    const place = where(rolloutId, state.segment);
    return ApplicationFailure.create({
      type: 'AuditCorrupt',
      message: `${place} seq ${p.seq}: ${p.message}; no record is written to a trail that is not whole: repair the row (check with \`wavegate audit ${rolloutId} --verify --audit-store …\`) or record an operator override`,
      nonRetryable: true,
      details: [{ file: place, line: p.line, seq: p.seq, problem: p.problem, segment: state.segment }],
    });
  }

  /** The append under the rollout's row lock: the file store's appendLocked, over rows. */
  async function appendLocked(client: PoolClient, event: AuditEvent, content: string): Promise<AuditHead> {
    const id = event.rolloutId;
    await client.query(
      'INSERT INTO wavegate_audit_chains (rollout_id) VALUES ($1) ON CONFLICT (rollout_id) DO NOTHING',
      [id],
    );
    const chain = (
      await client.query<{ chain_run: string | null; segment: number }>(
        'SELECT chain_run, segment FROM wavegate_audit_chains WHERE rollout_id = $1 FOR UPDATE',
        [id],
      )
    ).rows[0]!;
    const state = await inspect(client, id, chain.chain_run, chain.segment);

    const existing = state.records.find((r) => r.seq === event.seq);
    if (existing && auditContentKey(existing) === content) return { seq: existing.seq, hash: existing.hash };

    // A seq-1 record of another run starts a new chain; the finished one stays under its own run id.
    if (
      event.seq === 1 &&
      event.event !== 'audit.override' &&
      chain.chain_run !== null &&
      chain.chain_run !== event.runId
    ) {
      const taken = await client.query(
        'SELECT 1 FROM wavegate_audit_records WHERE rollout_id = $1 AND chain_run = $2 LIMIT 1',
        [id, event.runId],
      );
      if (taken.rowCount)
        throw ApplicationFailure.create({
          type: 'AuditConflict',
          message: `cannot start a new chain for ${id}: run ${event.runId} already has one in ${opts.location}`,
          nonRetryable: true,
        });
      log(`audit: ${id}: a new run starts a new chain; run ${chain.chain_run}'s chain is kept in ${opts.location}`);
      return insert(client, id, event.runId, 1, sealRecord(event, GENESIS_HASH));
    }
    const chainRun = chain.chain_run ?? event.runId;

    const step = nextAppend(
      { segment: state.segment, start: state.start, head: headOf(state), problem: !!state.problem },
      event,
      existing,
      where(id, state.segment),
    );
    if (step === 'corrupt') throw corrupt(state, id);
    if (step.kind === 'new-segment') {
      log(
        `audit: ${id}: override by ${event.by} starts segment ${step.segment} after record ${event.lastGood!.seq}; segment ${state.segment} is kept as it is`,
      );
      return insert(client, id, chainRun, step.segment, sealRecord(event, step.prevHash));
    }
    return insert(client, id, chainRun, state.segment, sealRecord(event, step.prevHash));
  }

  async function currentChain(
    client: PoolClient,
    rolloutId: string,
  ): Promise<{ chain_run: string | null; segment: number } | undefined> {
    return (
      await client.query<{ chain_run: string | null; segment: number }>(
        'SELECT chain_run, segment FROM wavegate_audit_chains WHERE rollout_id = $1',
        [rolloutId],
      )
    ).rows[0];
  }

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
        invalid(err);
      }
      return withClient((client) => appendLocked(client, event, content), 'write');
    },

    async health(input: AuditHealthInput): Promise<AuditHealth> {
      if (typeof input?.rolloutId !== 'string' || input.rolloutId.length === 0)
        invalid(
          new WavegateError(
            'INVALID_INPUT',
            `rollout id ${JSON.stringify(input?.rolloutId)}: expected a non-empty string`,
          ),
        );
      return withClient(async (client): Promise<AuditHealth> => {
        const chain = await currentChain(client, input.rolloutId);
        const state = await inspect(client, input.rolloutId, chain?.chain_run ?? null, chain?.segment ?? 1);
        const place = where(input.rolloutId, state.segment);
        const notWhole = (p: NonNullable<SegmentState['problem']>): AuditHealth => ({
          ok: false,
          reason: `${place} seq ${p.seq}: ${p.message}`,
          problem: p.problem,
          file: place,
          line: p.line,
          segment: state.segment,
        });
        if (state.problem) return notWhole(state.problem);
        if (input.head) {
          const held = verifyAuditChain(state.records, input.head, { start: state.start });
          if (!held.ok) return notWhole({ line: null, seq: held.seq, problem: held.problem, message: held.message });
        }
        return { ok: true, head: headOf(state), file: place, segment: state.segment };
      }, 'read');
    },

    async segments(rolloutId: string, runId?: string): Promise<AuditSegment[]> {
      return withClient(
        async (client) => {
          const chainRun = runId ?? (await currentChain(client, rolloutId))?.chain_run ?? null;
          const { rows } =
            chainRun === null
              ? { rows: [] as Array<{ segment: number; seq: string; record: string }> }
              : await client.query<{ segment: number; seq: string; record: string }>(
                  'SELECT segment, seq, record FROM wavegate_audit_records WHERE rollout_id = $1 AND chain_run = $2 ORDER BY segment, seq',
                  [rolloutId, chainRun],
                );
          if (rows.length === 0) {
            throw new WavegateError(
              'NOT_FOUND',
              `no audit trail for rollout "${rolloutId}"${runId ? ` run ${runId}` : ''} in ${opts.location}`,
              { store: opts.location },
            );
          }
          const bySegment = new Map<number, string[]>();
          for (const row of rows) bySegment.set(row.segment, [...(bySegment.get(row.segment) ?? []), row.record]);
          return [...bySegment.entries()].map(([segment, lines]) => ({
            name: `${where(rolloutId, segment)}${runId ? ` run ${runId}` : ''}`,
            text: `${lines.join('\n')}\n`,
          }));
        },
        'read',
        'cli',
      );
    },

    async earlierRuns(rolloutId: string): Promise<string[]> {
      return withClient(
        async (client) => {
          const current = (await currentChain(client, rolloutId))?.chain_run ?? null;
          const { rows } = await client.query<{ chain_run: string }>(
            'SELECT chain_run FROM wavegate_audit_records WHERE rollout_id = $1 AND chain_run IS DISTINCT FROM $2 GROUP BY chain_run ORDER BY min(written_at)',
            [rolloutId, current],
          );
          return rows.map((r) => r.chain_run);
        },
        'read',
        'cli',
      );
    },

    close: () => pool.end(),
  };
}
