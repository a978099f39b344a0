import { connect } from 'node:net';
import { WorkflowNotFoundError } from '@temporalio/client';
import type { AuditHead } from '../core/audit';
import type { RolloutStatus } from '../core/rollout/status';
import { resolveConnectionSettings, type TemporalFlags } from '../workers/connection';
import { connectClient } from './client';

/** How long `audit --verify` waits for the rollout's status before saying it could not compare. */
const STATUS_DEADLINE_MS = 10_000;

/** A refused port answers at once; the SDK's connect would retry for its whole timeout first. */
function portAnswers(address: string, timeoutMs = 2_000): Promise<boolean> {
  const colon = address.lastIndexOf(':');
  const host = address.slice(0, colon).replace(/^\[(.*)\]$/, '$1');
  const port = Number(address.slice(colon + 1));
  if (colon <= 0 || !Number.isInteger(port)) return Promise.resolve(true); // let the SDK judge the address
  return new Promise((resolve) => {
    const socket = connect({ host, port, timeout: timeoutMs });
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.once('connect', () => done(true));
    socket.once('timeout', () => done(false));
    socket.once('error', () => done(false));
  });
}

/** The head a rollout's workflow holds, or why there is none to compare with (never a silent pass). */
export type WorkflowHead = { head: AuditHead; source: string } | { head: null; why: string };

/**
 * Ask the rollout's workflow for the audit head it holds (`status.auditHead`): a running rollout answers
 * the `status` query, a completed one its result (no worker needed). Any failure to reach or read it is
 * an answer saying so, so that verification states plainly what it did not check.
 */
export async function workflowAuditHead(flags: TemporalFlags, rolloutId: string, runId?: string): Promise<WorkflowHead> {
  let settings;
  try {
    settings = resolveConnectionSettings(flags);
  } catch (err) {
    return { head: null, why: `the Temporal connection settings are not usable (${(err as Error).message})` };
  }
  let client;
  try {
    if (!(await portAnswers(settings.address))) throw new Error('refused');
    client = await connectClient(settings);
  } catch {
    return { head: null, why: `no Temporal server reachable at ${settings.address} to ask for the rollout's head` };
  }
  try {
    return await client.connection.withDeadline(Date.now() + STATUS_DEADLINE_MS, async (): Promise<WorkflowHead> => {
      const handle = client.workflow.getHandle(rolloutId, runId);
      const described = await handle.describe();
      const state = described.status.name;
      const status = (state === 'COMPLETED' ? await handle.result() : await handle.query('status')) as RolloutStatus;
      const where = `${rolloutId} run ${described.runId} on ${settings.address}, ${state.toLowerCase()}`;
      if (!status?.auditHead) return { head: null, why: `the workflow (${where}) holds no audit head yet` };
      return { head: status.auditHead, source: `the workflow's head (${where})` };
    });
  } catch (err) {
    if (err instanceof WorkflowNotFoundError) return { head: null, why: `no rollout "${rolloutId}"${runId ? ` run ${runId}` : ''} on ${settings.address}` };
    return { head: null, why: `could not read the rollout's status from ${settings.address} (${(err as Error).message})` };
  } finally {
    await client.connection.close().catch(() => {});
  }
}
