import { connect } from 'node:net';
import { WorkflowNotFoundError } from '@temporalio/client';
import type { AuditHead } from '../core/audit';
import { statusQuery } from '../contracts/rollout';
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

/**
 * What the server says about one run of a rollout's audit: the head it holds, or why there is none to
 * compare with (never a silent pass). `kind` tells a rollout the server does not have (`no-rollout`)
 * from one that holds no head yet (`no-head`) from a server that could not be asked (`unreachable`).
 */
export type WorkflowHead =
  | { head: AuditHead; source: string; runId: string; state: string }
  | { head: null; why: string; kind: 'unreachable' | 'no-rollout' | 'no-head'; runId?: string; state?: string };

/** One connection, asked about one run or several (`runId` undefined: the rollout id's latest run). */
export interface WorkflowHeads {
  headOf(runId?: string): Promise<WorkflowHead>;
  /** Where it asks, fit to print. */
  readonly address: string;
}

/**
 * Ask the rollout's workflow runs for the audit head each holds (`status.auditHead`): a running run answers
 * the `status` query, a completed one its result (no worker needed). Each run is described by its own
 * run id, so a chain an earlier run wrote is compared with that run's head, not the latest run's. Any
 * failure to reach or read it is an answer saying so, so that verification states what it did not check.
 */
export async function withWorkflowHeads<T>(
  flags: TemporalFlags,
  rolloutId: string,
  body: (heads: WorkflowHeads) => Promise<T>,
): Promise<T> {
  let settings: ReturnType<typeof resolveConnectionSettings>;
  try {
    settings = resolveConnectionSettings(flags);
  } catch (err) {
    const why = `the Temporal connection settings are not usable (${(err as Error).message})`;
    return body({ address: '-', headOf: async () => ({ head: null, why, kind: 'unreachable' }) });
  }
  const address = settings.address;
  let client: Awaited<ReturnType<typeof connectClient>>;
  try {
    if (!(await portAnswers(address))) throw new Error('refused');
    client = await connectClient(settings);
  } catch {
    const why = `no Temporal server reachable at ${address} to ask for the rollout's head`;
    return body({ address, headOf: async () => ({ head: null, why, kind: 'unreachable' }) });
  }
  const connected = client;
  const headOf = async (runId?: string): Promise<WorkflowHead> => {
    try {
      return await connected.connection.withDeadline(
        Date.now() + STATUS_DEADLINE_MS,
        async (): Promise<WorkflowHead> => {
          const described = await connected.workflow.getHandle(rolloutId, runId).describe();
          // Read that very run (its id from describe), never the latest one by accident.
          const exact = connected.workflow.getHandle(rolloutId, described.runId, { followRuns: false });
          const state = described.status.name;
          const status = (
            state === 'COMPLETED' ? await exact.result() : await exact.query(statusQuery)
          ) as RolloutStatus;
          const where = `${rolloutId} run ${described.runId} on ${address}, ${state.toLowerCase()}`;
          if (!status?.auditHead)
            return {
              head: null,
              why: `the workflow (${where}) holds no audit head yet`,
              kind: 'no-head',
              runId: described.runId,
              state,
            };
          return { head: status.auditHead, source: `the workflow's head (${where})`, runId: described.runId, state };
        },
      );
    } catch (err) {
      if (err instanceof WorkflowNotFoundError)
        return {
          head: null,
          why: `no rollout "${rolloutId}"${runId ? ` run ${runId}` : ''} on ${address}`,
          kind: 'no-rollout',
        };
      return {
        head: null,
        why: `could not read the rollout's status from ${address} (${(err as Error).message})`,
        kind: 'unreachable',
      };
    }
  };
  try {
    return await body({ address, headOf });
  } finally {
    await connected.connection.close().catch(() => {});
  }
}

/** The head one run of a rollout holds (`runId` undefined: its latest run), or why there is none. */
export function workflowAuditHead(flags: TemporalFlags, rolloutId: string, runId?: string): Promise<WorkflowHead> {
  return withWorkflowHeads(flags, rolloutId, (heads) => heads.headOf(runId));
}
