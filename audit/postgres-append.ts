import { ApplicationFailure } from '@temporalio/common';
import type { PoolClient } from 'pg';
import {
  GENESIS_HASH,
  macRecord,
  sealRecord,
  serializeAuditRecord,
  type AuditEvent,
  type AuditHead,
  type AuditRecord,
} from '../core/audit';
import { inspectRows, rowPlace, type ChainRow, type PostgresStoreContext } from './postgres-segment';
import { appendStep, storedAt } from './segment-check';

/**
 * The append of the PostgreSQL store, in the transaction postgres.ts opens: the file store's append
 * (file-append.ts) over rows, under the rollout's row lock in `wavegate_audit_chains` (SELECT … FOR
 * UPDATE), so two workers appending to one rollout take turns. `content` is the event's content key.
 */
export async function appendLocked(
  ctx: PostgresStoreContext,
  client: PoolClient,
  event: AuditEvent,
  content: string,
): Promise<AuditHead> {
  const id = event.rolloutId;
  const chain = await lockChain(client, id);
  const state = await inspectRows(ctx, client, id, chain.chain_run, chain.segment);

  const { existing, done } = storedAt(state, event, content);
  if (done) return done;

  // A seq-1 record of another run starts a new chain; the finished one stays under its own run id.
  if (
    event.seq === 1 &&
    event.event !== 'audit.override' &&
    chain.chain_run !== null &&
    chain.chain_run !== event.runId
  )
    return startChain(ctx, client, event, chain.chain_run);
  const chainRun = chain.chain_run ?? event.runId;

  const step = appendStep(state, event, existing, rowPlace(ctx.location, id, state.segment));
  if (step.kind === 'new-segment') {
    ctx.log(
      `audit: ${id}: override by ${event.by} starts segment ${step.segment} after record ${event.lastGood!.seq}; segment ${state.segment} is kept as it is`,
    );
    return insert(ctx, client, id, chainRun, step.segment, sealRecord(event, step.prevHash));
  }
  return insert(ctx, client, id, chainRun, state.segment, sealRecord(event, step.prevHash));
}

/** The rollout id's chain row, made when it has none, and locked until the transaction ends. */
async function lockChain(client: PoolClient, rolloutId: string): Promise<ChainRow> {
  await client.query('INSERT INTO wavegate_audit_chains (rollout_id) VALUES ($1) ON CONFLICT (rollout_id) DO NOTHING', [
    rolloutId,
  ]);
  return (
    await client.query<ChainRow>(
      'SELECT chain_run, segment FROM wavegate_audit_chains WHERE rollout_id = $1 FOR UPDATE',
      [rolloutId],
    )
  ).rows[0]!;
}

/** A seq-1 record of run `event.runId` after run `previous`'s chain: its own chain, the earlier one kept. */
async function startChain(
  ctx: PostgresStoreContext,
  client: PoolClient,
  event: AuditEvent,
  previous: string,
): Promise<AuditHead> {
  const id = event.rolloutId;
  const taken = await client.query(
    'SELECT 1 FROM wavegate_audit_records WHERE rollout_id = $1 AND chain_run = $2 LIMIT 1',
    [id, event.runId],
  );
  if (taken.rowCount)
    throw ApplicationFailure.create({
      type: 'AuditConflict',
      message: `cannot start a new chain for ${id}: run ${event.runId} already has one in ${ctx.location}`,
      nonRetryable: true,
    });
  ctx.log(`audit: ${id}: a new run starts a new chain; run ${previous}'s chain is kept in ${ctx.location}`);
  return insert(ctx, client, id, event.runId, 1, sealRecord(event, GENESIS_HASH));
}

/** One record's row (with its MAC when the worker holds a key), and the chain row pointing at its chain and segment. */
async function insert(
  ctx: PostgresStoreContext,
  client: PoolClient,
  rolloutId: string,
  chainRun: string,
  segment: number,
  sealed: AuditRecord,
): Promise<AuditHead> {
  const record = ctx.macKey ? macRecord(sealed, ctx.macKey) : sealed;
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
