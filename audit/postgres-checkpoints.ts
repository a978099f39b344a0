import type { PoolClient } from 'pg';
import { WavegateError } from '../core/errors';
import { checkpointSizeOf } from '../core/trail-checkpoints';
import { currentChain } from './postgres-segment';

/**
 * The PostgreSQL store's checkpoints (docs/formats.md, "Where checkpoints are kept"), in the transaction
 * postgres.ts opens: one row of `wavegate_audit_checkpoints` per tree size `n` of the current chain, the note as
 * given. An append locks the rollout's chain row (as a record's append does), so it is never interleaved with a
 * record of a new chain, and adds nothing when a checkpoint of its size or larger is kept already.
 */

/** Keep `note` beside the current chain of `rolloutId` (INVALID_INPUT: not its checkpoint; NOT_FOUND: no trail). */
export async function appendCheckpointRow(
  client: PoolClient,
  location: string,
  rolloutId: string,
  note: string,
): Promise<boolean> {
  const size = checkpointSizeOf(rolloutId, note);
  const chain = (
    await client.query<{ chain_run: string | null }>(
      'SELECT chain_run FROM wavegate_audit_chains WHERE rollout_id = $1 FOR UPDATE',
      [rolloutId],
    )
  ).rows[0];
  if (!chain?.chain_run)
    throw new WavegateError('NOT_FOUND', `no audit trail for rollout "${rolloutId}" in ${location}`, {
      store: location,
    });
  const largest = (
    await client.query<{ n: string | null }>(
      'SELECT max(n) AS n FROM wavegate_audit_checkpoints WHERE rollout_id = $1 AND chain_run = $2',
      [rolloutId, chain.chain_run],
    )
  ).rows[0]!.n;
  if (largest !== null && size <= Number(largest)) return false;
  await client.query(
    'INSERT INTO wavegate_audit_checkpoints (rollout_id, chain_run, n, note) VALUES ($1, $2, $3, $4)',
    [rolloutId, chain.chain_run, size, note],
  );
  return true;
}

/** The current chain's checkpoint notes, by size; empty when it has none (or there is no trail). */
export async function checkpointRows(client: PoolClient, rolloutId: string): Promise<string[]> {
  const chainRun = (await currentChain(client, rolloutId))?.chain_run ?? null;
  if (chainRun === null) return [];
  const { rows } = await client.query<{ note: string }>(
    'SELECT note FROM wavegate_audit_checkpoints WHERE rollout_id = $1 AND chain_run = $2 ORDER BY n',
    [rolloutId, chainRun],
  );
  return rows.map((r) => r.note);
}
