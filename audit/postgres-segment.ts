import { createHash, type Hash } from 'node:crypto';
import type { PoolClient } from 'pg';
import type { AuditRecord } from '../core/audit';
import type { SegmentChecker, SegmentPlace, SegmentState, WholePrefix } from './segment-check';

/**
 * A segment of the PostgreSQL store read from its rows and checked (segment-check.ts), as the file store
 * checks a file's lines: the rows of `wavegate_audit_records` of one rollout, chain run and segment, in
 * seq order, each row's `record` one record as hashed and MACed.
 */

/**
 * What the store proves a segment's prefix with: the SHA-256 of its rows joined by newlines (as the
 * server's string_agg joins them), and the hasher to go on from after them.
 */
export interface RowsProof {
  hasher: Hash;
  digest: string;
}

/** What the PostgreSQL store's parts share: where it is (fit to print), the key, the log, what was found whole. */
export interface PostgresStoreContext {
  location: string;
  macKey?: Uint8Array;
  log: (line: string) => void;
  checker: SegmentChecker<RowsProof>;
}

/** The current chain of a rollout id: the run of its first record and its current segment. */
export interface ChainRow {
  chain_run: string | null;
  segment: number;
}

interface Row {
  seq: string;
  record: string;
}

/** How the store names a segment: `<store> rollout "<id>" segment <n>`. */
export function rowSegmentName(location: string, rolloutId: string, segment: number): string {
  return `${location} rollout ${JSON.stringify(rolloutId)} segment ${segment}`;
}

/** The store's words for a place in a segment: `<segment> seq N`. */
export function rowPlace(location: string, rolloutId: string, segment: number): SegmentPlace {
  const name = rowSegmentName(location, rolloutId, segment);
  return {
    name,
    of: (p) => `${name} seq ${p.seq}`,
    repair: `repair the row (check with \`wavegate audit ${rolloutId} --verify --audit-store …\`)`,
  };
}

/** The rollout id's chain row, when it has one (read without a lock). */
export async function currentChain(client: PoolClient, rolloutId: string): Promise<ChainRow | undefined> {
  return (
    await client.query<ChainRow>('SELECT chain_run, segment FROM wavegate_audit_chains WHERE rollout_id = $1', [
      rolloutId,
    ])
  ).rows[0];
}

/**
 * Read and check a segment: every row a record, chained from its start, each MAC the key's. The rows
 * found whole before are compared by a digest the server computes over them (so an UPDATE or DELETE of
 * any of them is still seen), and only the rows after them are fetched and checked: an append stays
 * O(new records) instead of re-reading the whole chain.
 */
export async function inspectRows(
  ctx: PostgresStoreContext,
  client: PoolClient,
  rolloutId: string,
  chainRun: string | null,
  segment: number,
): Promise<SegmentState> {
  const id = JSON.stringify([rolloutId, chainRun, segment]);
  if (chainRun === null) return ctx.checker.check(id, segment, undefined, { kind: 'absent' });
  const known = await unchangedPrefix(ctx, client, id, rolloutId, chainRun, segment);
  // Only the rows after the prefix found whole (every row, seq ≥ 1, without one).
  const after = known ? known.records.at(-1)!.seq : 0;
  const { rows } = await client.query<Row>(
    'SELECT seq, record FROM wavegate_audit_records WHERE rollout_id = $1 AND chain_run = $2 AND segment = $3 AND seq > $4 ORDER BY seq',
    [rolloutId, chainRun, segment, after],
  );
  const fresh: AuditRecord[] = [];
  for (const row of rows) {
    const record = recordOfRow(row.record);
    if (!record) {
      const problem = {
        line: (known?.records.length ?? 0) + fresh.length + 1,
        seq: Number(row.seq),
        problem: 'edited',
        message: `the row at seq ${row.seq} is not a JSON audit record`,
      };
      return ctx.checker.check(id, segment, known, { kind: 'failed', fresh, problem });
    }
    fresh.push(record);
  }
  const proof = (): RowsProof => {
    // The rows joined by newlines, as string_agg joins them; hashed on from where the prefix ended.
    const hasher = known ? known.proof.hasher.copy() : createHash('sha256');
    for (const [i, row] of rows.entries()) hasher.update(known || i > 0 ? `\n${row.record}` : row.record, 'utf8');
    return { hasher, digest: hasher.copy().digest('hex') };
  };
  return ctx.checker.check(id, segment, known, { kind: 'read', fresh, unreadable: null, proof });
}

/** What the checker last found whole of the segment, when the rows it covers are still exactly those. */
async function unchangedPrefix(
  ctx: PostgresStoreContext,
  client: PoolClient,
  id: string,
  rolloutId: string,
  chainRun: string,
  segment: number,
): Promise<WholePrefix<RowsProof> | undefined> {
  const known = ctx.checker.wholePrefix(id);
  if (!known) return undefined;
  const { rows } = await client.query<{ n: string; digest: string | null }>(
    `SELECT count(*) AS n, encode(sha256(convert_to(string_agg(record, E'\\n' ORDER BY seq), 'UTF8')), 'hex') AS digest
       FROM wavegate_audit_records WHERE rollout_id = $1 AND chain_run = $2 AND segment = $3 AND seq <= $4`,
    [rolloutId, chainRun, segment, known.records.at(-1)!.seq],
  );
  return Number(rows[0]!.n) === known.records.length && rows[0]!.digest === known.proof.digest ? known : undefined;
}

/** A row's record, or undefined when it is not a JSON object. */
function recordOfRow(text: string): AuditRecord | undefined {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return undefined;
  }
  return parsed === null || typeof parsed !== 'object' || Array.isArray(parsed) ? undefined : (parsed as AuditRecord);
}
