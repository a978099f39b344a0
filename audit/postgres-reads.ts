import type { PoolClient } from 'pg';
import type { AuditSegment } from '../core/audit';
import { WavegateError } from '../core/errors';
import { currentChain, rowSegmentName } from './postgres-segment';

/**
 * What `wavegate audit` reads of the PostgreSQL store, in a read-only transaction postgres.ts opens: a
 * chain's segments as the file store gives them (the rows of each joined by newlines, as a JSONL file),
 * and the runs of a re-used rollout id whose chains are kept apart.
 */

/** Every segment of the current chain (or run `runId`'s), in order; NOT_FOUND when it has none. */
export async function chainSegments(
  client: PoolClient,
  location: string,
  rolloutId: string,
  runId?: string,
): Promise<AuditSegment[]> {
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
      `no audit trail for rollout "${rolloutId}"${runId ? ` run ${runId}` : ''} in ${location}`,
      { store: location },
    );
  }
  const bySegment = new Map<number, string[]>();
  for (const row of rows) bySegment.set(row.segment, [...(bySegment.get(row.segment) ?? []), row.record]);
  return [...bySegment.entries()].map(([segment, lines]) => ({
    name: `${rowSegmentName(location, rolloutId, segment)}${runId ? ` run ${runId}` : ''}`,
    text: `${lines.join('\n')}\n`,
  }));
}

/** The run ids of the rollout id's chains other than the current one, oldest first. */
export async function earlierChainRuns(client: PoolClient, rolloutId: string): Promise<string[]> {
  const current = (await currentChain(client, rolloutId))?.chain_run ?? null;
  const { rows } = await client.query<{ chain_run: string }>(
    'SELECT chain_run FROM wavegate_audit_records WHERE rollout_id = $1 AND chain_run IS DISTINCT FROM $2 GROUP BY chain_run ORDER BY min(written_at)',
    [rolloutId, current],
  );
  return rows.map((r) => r.chain_run);
}
