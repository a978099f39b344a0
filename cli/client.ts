import { createHash } from 'node:crypto';
import type { Command } from 'commander';
import {
  Client,
  Connection,
  WorkflowExecutionAlreadyStartedError,
  WorkflowNotFoundError,
  WorkflowUpdateFailedError,
  type WorkflowHandle,
} from '@temporalio/client';
import { canonicalize } from '../core/canonical';
import { checkControl, isFinalState, type ControlBase, type ControlName } from '../core/controls';
import { ROLLOUT_STATES } from '../core/rollout-state';
import { readStatus } from '../core/rollout/outcome';
import { WavegateError } from '../core/errors';
import type { RolloutState } from '../core/rollout-state';
import { WavegatePhase, WavegateProfile, WavegateRevision, WavegateState, WavegateVerdict } from '../core/search-attributes';
import { connectionOptions, DEFAULT_ADDRESS, DEFAULT_TASK_QUEUE, type ConnectionSettings } from '../workers/connection';
import { connectionFailure } from '../workers/connection-failure';
import { checkProfileName } from '../intake/profile-dir';
import type { RolloutStatus } from '../workflows/messages';
import type { RolloutInput } from '../core/rollout/input';
import type { rolloutWorkflow } from '../workflows/rollout';

/** Add the connection options every Temporal-facing command takes (resolved by workers/connection.ts). */
export function withTemporalOptions(cmd: Command): Command {
  return cmd
    .option('--address <host:port>', `Temporal frontend address (default $TEMPORAL_ADDRESS, the config profile, or ${DEFAULT_ADDRESS})`)
    .option('--namespace <ns>', 'Temporal namespace (default $TEMPORAL_NAMESPACE, the config profile, or "default")')
    .option('--task-queue <queue>', `worker task queue (default $WAVEGATE_TASK_QUEUE or "${DEFAULT_TASK_QUEUE}")`)
    .option('--profile-name <name>', 'Temporal client config profile (default $TEMPORAL_PROFILE or "default")')
    .option('--config-file <file.toml>', 'Temporal client config file (default $TEMPORAL_CONFIG_FILE or ~/.config/temporalio/temporal.toml)')
    .option('--api-key-file <file>', 'file holding the API key for a hosted Temporal (default $TEMPORAL_API_KEY or the config profile); implies TLS')
    .option('--api-key-env <VAR>', 'environment variable holding the API key; implies TLS')
    .option('--tls', 'connect with TLS (implied by an API key or any --tls-* option)')
    .option('--tls-ca-cert <file>', 'server CA certificate (PEM)')
    .option('--tls-cert <file>', 'client certificate for mTLS (PEM)')
    .option('--tls-key <file>', 'client private key for mTLS (PEM)')
    .option('--tls-server-name <name>', 'server name to verify instead of the address host')
    .option('--ui-url <url>', 'Temporal Web UI base URL for printed links (default $WAVEGATE_UI_URL or derived from the address)');
}

export async function connectClient(settings: ConnectionSettings): Promise<Client> {
  try {
    const connection = await Connection.connect({ ...connectionOptions(settings), connectTimeout: 5_000 });
    return new Client({ connection, namespace: settings.namespace });
  } catch (err) {
    // A TLS setting at fault is bad input (exit 2), named; a server that is not there stays UNAVAILABLE.
    throw await connectionFailure(settings, err, '; start one with `wavegate dev` or set TEMPORAL_ADDRESS');
  }
}

/**
 * gRPC codes a poll outlives: the server or the path to it was away for a moment (UNAVAILABLE), a call
 * or a query was cut off (DEADLINE_EXCEEDED, CANCELLED: no worker answered the query in time, a worker
 * restarting), the server shed load (RESOURCE_EXHAUSTED) or a call raced another (ABORTED).
 */
const TRANSIENT_GRPC_CODES: ReadonlySet<number> = new Set([1, 4, 8, 10, 14]);

/** Is this a failure a `--wait` loop should retry rather than die of? Walks the error's causes. */
export function isTransientFailure(err: unknown): boolean {
  for (let e: unknown = err, depth = 0; e && typeof e === 'object' && depth < 5; e = (e as { cause?: unknown }).cause, depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'number' && TRANSIENT_GRPC_CODES.has(code)) return true;
    if (typeof code === 'string' && /^(?:ECONNRESET|ECONNREFUSED|EPIPE|ETIMEDOUT)$/.test(code)) return true;
    if (e instanceof WavegateError && e.code === 'UNAVAILABLE') return true;
  }
  return false;
}

/**
 * Run one poll (a query, a describe) until it answers: a transient failure (isTransientFailure) waits
 * and tries again, 0.5 s doubling to `maxDelayMs`, telling `onRetry` once per run of failures; any other
 * failure is thrown. A wait never dies of a server restart or a cut query.
 */
export async function retryTransient<T>(poll: () => Promise<T>, opts: { onRetry?: (err: unknown) => void; maxDelayMs?: number; sleep?: (ms: number) => Promise<void> } = {}): Promise<T> {
  const sleep = opts.sleep ?? ((ms: number) => new Promise<void>((r) => setTimeout(r, ms)));
  let delay = 500;
  let told = false;
  for (;;) {
    try {
      return await poll();
    } catch (err) {
      if (!isTransientFailure(err)) throw err;
      if (!told) opts.onRetry?.(err);
      told = true;
      await sleep(delay);
      delay = Math.min(delay * 2, opts.maxDelayMs ?? 5_000);
    }
  }
}

/** Run `body` with a connected client and close the connection afterwards (a CLI process must exit). */
export async function withClient<T>(settings: ConnectionSettings, body: (client: Client) => Promise<T>): Promise<T> {
  const client = await connectClient(settings);
  try {
    return await body(client);
  } finally {
    await client.connection.close().catch(() => {});
  }
}

/** The Web UI page of a workflow, for people to click. */
export function workflowUrl(uiUrl: string, namespace: string, workflowId: string): string {
  return `${uiUrl}/namespaces/${encodeURIComponent(namespace)}/workflows/${encodeURIComponent(workflowId)}`;
}

/**
 * What makes two starts "the same": the whole validated rollout input except who sent it. Stored in the
 * workflow's memo, so a retried start can be recognised without any state outside Temporal.
 */
export function rolloutFingerprint(input: RolloutInput): string {
  const { startedBy: _startedBy, ...content } = input;
  return createHash('sha256').update(canonicalize(JSON.parse(JSON.stringify(content)))).digest('hex');
}

export interface StartOutcome {
  handle: WorkflowHandle<typeof rolloutWorkflow>;
  runId: string;
  /** True when a retried start (same key, same spec) found the rollout it had already started. */
  existing: boolean;
}

interface StartMemo {
  wavegateKey?: string;
  wavegateSpec?: string;
}

/**
 * Start the rollout as workflow `rollout:<profile>`: one running rollout per profile. With an
 * idempotency `key`, a retried start with the same key and the same spec returns the rollout it started
 * (running or finished) instead of failing; any other start while one runs is a CONFLICT naming it.
 */
export async function startOrJoinRollout(client: Client, taskQueue: string, input: RolloutInput, opts: { key?: string } = {}): Promise<StartOutcome> {
  const { spec } = input;
  const fingerprint = rolloutFingerprint(input);
  const sameRetry = async (): Promise<StartOutcome | undefined> => {
    if (!opts.key) return undefined;
    const handle = client.workflow.getHandle<typeof rolloutWorkflow>(input.rolloutId);
    let memo: StartMemo;
    let runId: string;
    try {
      const described = await handle.describe();
      memo = (described.memo ?? {}) as StartMemo;
      runId = described.runId;
    } catch (err) {
      if (err instanceof WorkflowNotFoundError) return undefined;
      throw err;
    }
    if (memo.wavegateKey !== opts.key) return undefined;
    if (memo.wavegateSpec !== fingerprint) {
      throw new WavegateError('CONFLICT', `idempotency key "${opts.key}" was used for ${input.rolloutId} with a different spec; use a new key for a new rollout`);
    }
    return { handle, runId, existing: true };
  };
  const retried = await sameRetry();
  if (retried) return retried;
  try {
    const handle = await client.workflow.start<typeof rolloutWorkflow>('rolloutWorkflow', {
      workflowId: input.rolloutId,
      taskQueue,
      args: [input],
      workflowIdConflictPolicy: 'FAIL',
      memo: { wavegateSpec: fingerprint, ...(opts.key ? { wavegateKey: opts.key } : {}) },
      typedSearchAttributes: [
        { key: WavegateProfile, value: spec.profile },
        { key: WavegateState, value: 'running' },
        { key: WavegatePhase, value: 'snapshot' },
        { key: WavegateRevision, value: spec.toRevision },
      ],
      staticSummary: `${spec.profile}: r${spec.fromRevision} → r${spec.toRevision} in ${spec.phases.length} phases`,
      staticDetails: [
        `**Profile** ${spec.profile}, **revision** ${spec.fromRevision} → ${spec.toRevision}`,
        '',
        `**Phases** ${spec.phases.map((p) => (p.canary ? 'canary' : 'bulk')).join(' → ')}`,
        '',
        `**Started by** ${input.startedBy}; inventory \`${input.inventoryPath}\`; rollback on ${spec.rollback.on}`,
      ].join('\n'),
    });
    return { handle, runId: handle.firstExecutionRunId, existing: false };
  } catch (err) {
    if (err instanceof WorkflowExecutionAlreadyStartedError) {
      // Two retries racing: the other one won; it is ours if key and spec match.
      const raced = await sameRetry();
      if (raced) return raced;
      throw new WavegateError('CONFLICT', `a rollout of profile "${spec.profile}" is already running (${input.rolloutId}) with ${opts.key ? 'another key or spec' : 'no matching idempotency key'}; pause, abort or wait for it first`);
    }
    throw err;
  }
}

/** Start `rollout:<profile>`; a second start while one runs is a CONFLICT naming it. */
export async function startRollout(client: Client, taskQueue: string, input: RolloutInput): Promise<WorkflowHandle<typeof rolloutWorkflow>> {
  return (await startOrJoinRollout(client, taskQueue, input)).handle;
}

/** The status query of a rollout, or NOT_FOUND naming the id. */
export async function queryStatus(client: Client, id: string): Promise<RolloutStatus> {
  try {
    // Read as it is meant whichever build answered: an older one says not-for-me and not-started as skipped.
    return readStatus(await client.workflow.getHandle(id).query<RolloutStatus>('status'));
  } catch (err) {
    if (err instanceof WorkflowNotFoundError) throw new WavegateError('NOT_FOUND', `no rollout with id "${id}"`);
    throw err;
  }
}

/** The workflow update behind each control (docs/architecture.md, "Controls"): validated at once, answered with the new status. */
export const CONTROL_UPDATES: Record<ControlName, string> = {
  pause: 'pauseRollout',
  resume: 'resumeRollout',
  approve: 'approvePhase',
  abort: 'abortRollout',
  'override-audit': 'overrideAudit',
};

/**
 * Send an operator control as an update. An invalid transition is refused by the workflow's validator
 * with the current state (INVALID_STATE, exit 2); a finished rollout is refused the same way here, and an
 * unknown id is NOT_FOUND.
 */
export async function sendControl(
  client: Client,
  id: string,
  name: ControlName,
  control: ControlBase & { rollback?: boolean; phase?: number | string },
): Promise<RolloutStatus> {
  const handle = client.workflow.getHandle(id);
  let running: boolean;
  try {
    running = (await handle.describe()).status.name === 'RUNNING';
  } catch (err) {
    if (err instanceof WorkflowNotFoundError) throw new WavegateError('NOT_FOUND', `no rollout with id "${id}"`);
    throw err;
  }
  if (!running) {
    const state = await handle.query<RolloutStatus>('status').then(
      (s) => s.state,
      () => 'finished' as RolloutState,
    );
    throw new WavegateError('INVALID_STATE', `${id}: ${checkControl(name, { state: isFinalState(state) ? state : 'completed', aborting: false }) ?? `rollout is ${state}`}`);
  }
  try {
    return readStatus(await handle.executeUpdate<RolloutStatus, [typeof control]>(CONTROL_UPDATES[name], { args: [control] }));
  } catch (err) {
    if (err instanceof WorkflowUpdateFailedError) {
      throw new WavegateError('INVALID_STATE', `${id}: ${err.cause?.message ?? err.message}`);
    }
    if (err instanceof WorkflowNotFoundError) throw new WavegateError('INVALID_STATE', `${id}: the rollout finished before ${name} arrived`);
    throw err;
  }
}

export interface RolloutListing {
  workflowId: string;
  runId: string;
  type: string;
  /** Temporal's execution status: RUNNING, COMPLETED, FAILED, CANCELLED, TERMINATED, ... */
  status: string;
  profile?: string;
  state?: string;
  phase?: string;
  revision?: number;
  verdict?: string;
  startTime: string;
  closeTime?: string;
}

const LISTED_TYPES = ['rolloutWorkflow', 'nightlyCanaryWorkflow'];

/** The visibility query behind `wavegate list`: rollouts and nightly canaries, by search attribute. */
export function listQuery(filter: { profile?: string; state?: string }): string {
  const clauses = [`(${LISTED_TYPES.map((t) => `WorkflowType = '${t}'`).join(' OR ')})`];
  if (filter.profile !== undefined) {
    checkProfileName(filter.profile, '--profile');
    clauses.push(`WavegateProfile = '${filter.profile}'`);
  }
  if (filter.state !== undefined) {
    const states: readonly string[] = ROLLOUT_STATES;
    if (!states.includes(filter.state)) throw new WavegateError('INVALID_INPUT', `--state ${JSON.stringify(filter.state)}: must be one of ${states.join(', ')}`);
    clauses.push(`WavegateState = '${filter.state}'`);
  }
  return clauses.join(' AND ');
}

export async function listRollouts(client: Client, filter: { profile?: string; state?: string; limit?: number }): Promise<RolloutListing[]> {
  const out: RolloutListing[] = [];
  const limit = filter.limit ?? 100;
  for await (const info of client.workflow.list({ query: listQuery(filter), pageSize: Math.min(limit, 100) })) {
    const sa = info.typedSearchAttributes;
    const profile = sa.get(WavegateProfile);
    const state = sa.get(WavegateState);
    const phase = sa.get(WavegatePhase);
    const revision = sa.get(WavegateRevision);
    const verdict = sa.get(WavegateVerdict);
    out.push({
      workflowId: info.workflowId,
      runId: info.runId,
      type: info.type,
      status: info.status.name,
      ...(profile !== undefined ? { profile } : {}),
      ...(state !== undefined ? { state } : {}),
      ...(phase !== undefined ? { phase } : {}),
      ...(revision !== undefined ? { revision } : {}),
      ...(verdict !== undefined ? { verdict } : {}),
      startTime: info.startTime.toISOString(),
      ...(info.closeTime ? { closeTime: info.closeTime.toISOString() } : {}),
    });
    if (out.length >= limit) break;
  }
  return out;
}

/** The newest completed rollout of a profile (not a nightly canary), with the revisions its status carries. */
export async function lastCompletedRollout(client: Client, profile: string): Promise<{ rolloutId: string; fromRevision: number; toRevision: number } | undefined> {
  const rows = await listRollouts(client, { profile, state: 'completed', limit: 100 });
  const newest = rows.filter((r) => r.type === 'rolloutWorkflow').sort((a, b) => (b.closeTime ?? b.startTime).localeCompare(a.closeTime ?? a.startTime))[0];
  if (!newest) return undefined;
  const status = await queryStatus(client, newest.workflowId);
  return { rolloutId: newest.workflowId, fromRevision: status.fromRevision, toRevision: status.toRevision };
}

/** The rollouts of a profile Temporal still runs, whatever their id (`rollout:<profile>`, converges). */
export async function runningRolloutsOf(client: Client, profile: string): Promise<string[]> {
  const rows = await listRollouts(client, { profile, limit: 100 });
  return rows.filter((r) => r.type === 'rolloutWorkflow' && r.status === 'RUNNING').map((r) => r.workflowId);
}
