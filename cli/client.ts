import type { SignedStatement } from '../core/approval';
import { createHash } from 'node:crypto';
import {
  Client,
  Connection,
  WorkflowExecutionAlreadyStartedError,
  WorkflowNotFoundError,
  WorkflowUpdateFailedError,
  WorkflowUpdateRPCTimeoutOrCancelledError,
  type WorkflowHandle,
} from '@temporalio/client';
import { canonicalize } from '../core/canonical';
import { checkControl, isFinalState, type ControlBase, type ControlName } from '../core/controls';
import { ROLLOUT_STATES } from '../core/rollout-state';
import { readStatus } from '../core/rollout/outcome';
import { WavegateError } from '../core/errors';
import type { RolloutState } from '../core/rollout-state';
import {
  WavegateKey,
  WavegatePhase,
  WavegateProfile,
  WavegateRevision,
  WavegateState,
  WavegateVerdict,
} from '../contracts/search-attributes';
import { checkIdempotencyKey, legacyRolloutId, newRolloutId, profileLockId } from '../core/rollout-id';
import { heldRolloutOf } from '../clients/profile-lock';
import { connectionOptions, type ConnectionSettings } from '../workers/connection';
import { withTemporalOptions } from './temporal-options';
import { connectionFailure } from '../workers/connection-failure';
import { checkProfileName } from '../core/profile-name';
import { statusQuery, type RolloutStatus } from '../contracts/rollout';
import { deviceRecords } from '../clients/rollout-records';
import { changedDevices } from '../core/rollout/revert';
import type { RolloutInput } from '../core/rollout/input';
import type { rolloutWorkflow } from '../workflows/rollout';
import type { LockHolder } from '../contracts/profile-lock';
import type { profileLockWorkflow } from '../workflows/profile-lock';

export { withTemporalOptions };

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
 * gRPC codes a wait outlives: the server or the path to it was away for a moment (UNAVAILABLE), a call
 * or a query was cut off (DEADLINE_EXCEEDED, CANCELLED: no worker answered the query in time, a worker
 * restarting), the server shed load (RESOURCE_EXHAUSTED), a call raced another (ABORTED), or a query found
 * no worker to answer it (FAILED_PRECONDITION: "no poller seen for task queue recently, worker may be
 * down", which the server says after holding the query about 30 s; also a workflow not ready for queries
 * yet). Each is a state of the moment that a worker's or the server's return ends; the SDK's own retry
 * (about 20 s, UNAVAILABLE and RESOURCE_EXHAUSTED only) has run out by the time one reaches us.
 */
const TRANSIENT_GRPC_CODES: ReadonlySet<number> = new Set([1, 4, 8, 9, 10, 14]);
const GRPC_INTERNAL = 13;
/** The INTERNAL errors that are a cut HTTP/2 stream (a proxy, a server closing), told apart as the SDK's own retry does. */
const CUT_STREAM = /RST_STREAM with code [02]|Call ended without gRPC status/i;

/** Is this a failure a wait loop should retry rather than die of? Walks the error's causes. */
export function isTransientFailure(err: unknown): boolean {
  for (
    let e: unknown = err, depth = 0;
    e && typeof e === 'object' && depth < 5;
    e = (e as { cause?: unknown }).cause, depth++
  ) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'number' && TRANSIENT_GRPC_CODES.has(code)) return true;
    if (code === GRPC_INTERNAL) {
      const details = String((e as { details?: unknown }).details ?? '');
      if (CUT_STREAM.test(details) && !/SSL alert number/i.test(details)) return true; // a TLS alert is no cut
    }
    if (typeof code === 'string' && /^(?:ECONNRESET|ECONNREFUSED|EPIPE|ETIMEDOUT)$/.test(code)) return true;
    if (e instanceof WavegateError && e.code === 'UNAVAILABLE') return true;
    // An update whose call was cut by its deadline (the update itself may still run: asking again is safe).
    if (e instanceof WorkflowUpdateRPCTimeoutOrCancelledError) return true;
  }
  return false;
}

/**
 * An error's first line and its causes', short: what a one-line note on stderr quotes. The SDK wraps
 * the server's answer ("Failed to query Workflow": "9 FAILED_PRECONDITION: no poller seen…"), and the
 * cause is what says why.
 */
export function firstLineOf(err: unknown): string {
  const lines: string[] = [];
  for (
    let e: unknown = err, depth = 0;
    e !== undefined && e !== null && depth < 5;
    e = (e as { cause?: unknown }).cause, depth++
  ) {
    const line = String((e as Error).message ?? e).split('\n')[0]!;
    if (line && !lines.some((seen) => seen.includes(line))) lines.push(line);
    if (typeof e !== 'object') break;
  }
  return lines.join(': ').slice(0, 200);
}

/** The one-line note of a wait that retries: `wavegate: <what> failed (<error and its cause>); retrying`. */
export function retryNote(what: string, err: unknown): string {
  return `wavegate: ${what} failed (${firstLineOf(err)}); retrying`;
}

/** How long a wait goes on through failures before it gives up (a run of them: any answer starts it again). */
export const WAIT_FAILURES_LIMIT_MS = 5 * 60_000;

export interface RetryOptions {
  /** What is polled, for the final message: `status query of rollout:demo:…`. */
  what?: string;
  /** Told on the first failure of each run of failures (one line on stderr, say). */
  onRetry?: (err: unknown) => void;
  /** A run of failures this long ends the wait (default WAIT_FAILURES_LIMIT_MS). */
  giveUpAfterMs?: number;
  /** Said after the final message: what the operator can do (the rollout goes on without this wait). */
  giveUpHint?: string;
  maxDelayMs?: number;
  sleep?: (ms: number) => Promise<void>;
  now?: () => number;
}

/**
 * Run one poll (a query, a describe) until it answers: a transient failure (isTransientFailure) waits
 * and tries again, 0.5 s doubling to `maxDelayMs`, telling `onRetry` once per run of failures; any other
 * failure is thrown. A wait never dies of a server restart, a worker away or a cut query; a run of
 * failures past `giveUpAfterMs` ends it with UNAVAILABLE (exit 1) naming what failed, for how long and
 * the last error, never with a stack trace.
 */
export async function retryTransient<T>(poll: () => Promise<T>, opts: RetryOptions = {}): Promise<T> {
  const sleep = opts.sleep ?? ((ms: number) => new Promise<void>((r) => setTimeout(r, ms)));
  const now = opts.now ?? Date.now;
  const limitMs = opts.giveUpAfterMs ?? WAIT_FAILURES_LIMIT_MS;
  let delay = 500;
  let failingSince: number | undefined;
  for (;;) {
    try {
      return await poll();
    } catch (err) {
      if (!isTransientFailure(err)) throw err;
      if (failingSince === undefined) {
        failingSince = now();
        opts.onRetry?.(err);
      } else if (now() - failingSince >= limitMs) {
        throw new WavegateError(
          'UNAVAILABLE',
          `${opts.what ?? 'a poll of Temporal'} failed for ${Math.round((now() - failingSince) / 1000)} s, giving up (last error: ${firstLineOf(err)})${opts.giveUpHint ? `; ${opts.giveUpHint}` : ''}`,
          { cause: err },
        );
      }
      await sleep(delay);
      delay = Math.min(delay * 2, opts.maxDelayMs ?? 5_000);
    }
  }
}

/** retryTransient for a CLI wait: `what` names the poll in its note on stderr (once per run of failures) and in its final message. */
export function retryWait<T>(
  what: string,
  poll: () => Promise<T>,
  opts: Omit<RetryOptions, 'what' | 'onRetry'> = {},
): Promise<T> {
  return retryTransient(poll, { ...opts, what, onRetry: (err) => process.stderr.write(`${retryNote(what, err)}\n`) });
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
 * What makes two starts "the same": the whole validated rollout input except who sent it and the id it
 * gets (each start picks a fresh one). Stored in the rollout's memo, so a retried start can be recognised
 * without any state outside Temporal.
 */
export function rolloutFingerprint(input: RolloutInput): string {
  const { startedBy: _startedBy, rolloutId: _rolloutId, ...content } = input;
  return digestOf(content);
}

/** The fingerprint as rollouts started before per-rollout ids stored it: the id `rollout:<profile>` included. */
function legacyFingerprint(input: RolloutInput): string {
  const { startedBy: _startedBy, ...content } = input;
  return digestOf({ ...content, rolloutId: legacyRolloutId(input.spec.profile) });
}

function digestOf(content: unknown): string {
  return createHash('sha256')
    .update(canonicalize(JSON.parse(JSON.stringify(content))))
    .digest('hex');
}

export interface StartOutcome {
  handle: WorkflowHandle<typeof rolloutWorkflow>;
  /** The rollout's first run (empty only for a keyed retry that found a rollout whose run is still being started). */
  runId: string;
  /** True when a retried start (same key, same spec) found the rollout it had already started. */
  existing: boolean;
}

interface StartMemo {
  wavegateKey?: string;
  wavegateSpec?: string;
  wavegateRollout?: string;
}

export interface StartOptions {
  /** Idempotency key: a start with the same key and the same spec returns the rollout it started, whenever. */
  key?: string;
  /**
   * Give the rollout an id of its own, `rollout:<profile>:<UTC timestamp>` (start, revert). Without it
   * the input's id is used as it is (a converge names its own).
   */
  newId?: boolean;
  /** The clock for the new id (tests). */
  now?: () => Date;
  /** How long to wait for the lock to have started the rollout (a worker must pick the lock up). */
  startTimeoutMs?: number;
  /** The starter's signed statement for the rollout's id, once it has one (core/approval.ts; `start --identity-key`). */
  signStart?: (rolloutId: string) => SignedStatement;
}

/**
 * The rollout an idempotency key started, found by the WavegateKey search attribute (any profile,
 * running or finished), else (a start so recent that visibility has not listed it yet) in the memo of
 * the profile's lock, running or closed, else in the memo of `rollout:<profile>` (starts before
 * per-rollout ids). Same spec: that rollout. Another spec: CONFLICT naming it.
 */
export async function rolloutOfKey(
  client: Client,
  key: string,
  input: RolloutInput,
): Promise<StartOutcome | undefined> {
  const fingerprint = rolloutFingerprint(input);
  const check = (rolloutId: string, memo: StartMemo, fingerprints: string[]) => {
    if (memo.wavegateKey !== key) return false;
    if (!fingerprints.includes(memo.wavegateSpec ?? '')) {
      throw new WavegateError(
        'CONFLICT',
        `idempotency key "${key}" was used for ${rolloutId} with a different spec; use a new key for a new rollout`,
        { rolloutId },
      );
    }
    return true;
  };
  for await (const info of client.workflow.list({
    query: `WorkflowType = 'rolloutWorkflow' AND WavegateKey = '${checkIdempotencyKey(key)}'`,
    pageSize: 10,
  })) {
    if (check(info.workflowId, (info.memo ?? {}) as StartMemo, [fingerprint])) {
      return {
        handle: client.workflow.getHandle<typeof rolloutWorkflow>(info.workflowId),
        runId: info.runId,
        existing: true,
      };
    }
  }
  const lock = await describeOrUndefined(client, profileLockId(input.spec.profile));
  const lockMemo = (lock?.memo ?? {}) as StartMemo;
  if (lock && lockMemo.wavegateRollout && check(lockMemo.wavegateRollout, lockMemo, [fingerprint])) {
    const handle = client.workflow.getHandle<typeof rolloutWorkflow>(lockMemo.wavegateRollout);
    return {
      handle,
      runId:
        (await awaitLockedRollout(client, lock.workflowId, lock.runId, 30_000).catch(() => undefined))?.runId ?? '',
      existing: true,
    };
  }
  const legacy = await describeOrUndefined(client, legacyRolloutId(input.spec.profile));
  if (legacy && check(legacy.workflowId, (legacy.memo ?? {}) as StartMemo, [legacyFingerprint(input), fingerprint])) {
    return {
      handle: client.workflow.getHandle<typeof rolloutWorkflow>(legacy.workflowId),
      runId: legacy.runId,
      existing: true,
    };
  }
  return undefined;
}

async function describeOrUndefined(client: Client, workflowId: string, runId?: string) {
  try {
    return await client.workflow.getHandle(workflowId, runId).describe();
  } catch (err) {
    if (err instanceof WorkflowNotFoundError) return undefined;
    throw err;
  }
}

/** Wait (bounded) for a lock whose rollout has closed to close after it. */
async function awaitLockClosed(client: Client, lockId: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (let delay = 50; Date.now() < deadline; delay = Math.min(delay * 2, 500)) {
    const described = await describeOrUndefined(client, lockId);
    if (described?.status.name !== 'RUNNING') return;
    await new Promise((r) => setTimeout(r, delay));
  }
}

/**
 * The rollout a lock run started, once it has: its pending child while the rollout runs, or the lock's
 * result once it has closed (a rollout may end before it is looked at). Read by describe, which needs no
 * worker to answer. FAILED when the lock closed without starting one, UNAVAILABLE after `timeoutMs`.
 */
async function awaitLockedRollout(
  client: Client,
  lockId: string,
  lockRunId: string,
  timeoutMs: number,
): Promise<LockHolder> {
  const deadline = Date.now() + timeoutMs;
  const lock = client.workflow.getHandle<typeof profileLockWorkflow>(lockId, lockRunId);
  for (let delay = 50; ; delay = Math.min(delay * 2, 500)) {
    // A describe cut by a transient failure is tried again, within this wait's own bound.
    const described = await retryWait(`describe of ${lockId}`, () => lock.describe(), {
      giveUpAfterMs: Math.max(deadline - Date.now(), 1_000),
    });
    const child = described.raw.pendingChildren?.find((c) => c.workflowId && c.runId);
    if (child) return { rolloutId: child.workflowId!, runId: child.runId! };
    if (described.status.name !== 'RUNNING') {
      try {
        const { rolloutId, runId } = await lock.result();
        return { rolloutId, runId };
      } catch (err) {
        throw new WavegateError('FAILED', `${lockId} closed without starting the rollout: ${(err as Error).message}`);
      }
    }
    if (Date.now() > deadline) {
      throw new WavegateError(
        'UNAVAILABLE',
        `${lockId} holds the profile but has not started its rollout within ${Math.round(timeoutMs / 1000)} s: is a worker polling the task queue? (it starts once one does)`,
      );
    }
    await new Promise((r) => setTimeout(r, delay));
  }
}

/**
 * Start a rollout. Its id is its own (`newId`: `rollout:<profile>:<UTC yyyymmdd-hhmmss>`);
 * one running rollout per profile is held by the lock workflow `profile-lock:<profile>` (id conflict
 * policy FAIL), which starts the rollout as its child (workflows/profile-lock.ts). A start while the lock
 * runs, or while a rollout `rollout:<profile>` started before per-rollout ids runs, is a CONFLICT naming the
 * running rollout. With an idempotency `key`, the rollout that key started (rolloutOfKey) is returned,
 * running or finished, when the spec is the same; another spec is a CONFLICT.
 */
export async function startOrJoinRollout(
  client: Client,
  taskQueue: string,
  input: RolloutInput,
  opts: StartOptions = {},
): Promise<StartOutcome> {
  const { spec } = input;
  if (opts.key !== undefined) {
    const joined = await rolloutOfKey(client, opts.key, input);
    if (joined) return joined;
  }
  const conflict = (rolloutId: string) =>
    new WavegateError(
      'CONFLICT',
      `a rollout of profile "${spec.profile}" is already running (${rolloutId})${opts.key ? ' with another key or spec' : ''}; pause, abort or wait for it first`,
      { running: [rolloutId] },
    );
  const held = await heldRolloutOf(client, spec.profile);
  if (held) throw conflict(held.rolloutId);
  const now = (opts.now ?? (() => new Date()))();
  let rolloutId = input.rolloutId;
  if (opts.newId) {
    // A second taken (a rollout that ended within the second it started in) gets `-2`, `-3`, …
    for (let attempt = 1; ; attempt++) {
      rolloutId = newRolloutId(spec.profile, now, attempt);
      if (attempt >= 9 || !(await describeOrUndefined(client, rolloutId))) break;
    }
  }
  const fingerprint = rolloutFingerprint(input);
  const memo: Record<string, string> = { wavegateSpec: fingerprint, ...(opts.key ? { wavegateKey: opts.key } : {}) };
  const lockId = profileLockId(spec.profile);
  const startLock = () =>
    client.workflow.start<typeof profileLockWorkflow>('profileLockWorkflow', {
      workflowId: lockId,
      taskQueue,
      args: [
        {
          // Seeded as `wavegate plan` seeds it (the profile's old shared id), so the plan shown is the plan made.
          rollout: {
            ...input,
            rolloutId,
            ...(rolloutId !== input.rolloutId ? { planSeed: input.planSeed ?? input.rolloutId } : {}),
            ...(opts.signStart ? { startStatement: opts.signStart(rolloutId) } : {}),
          },
          memo,
          ...(opts.key ? { key: opts.key } : {}),
          staticSummary: `${spec.profile}: r${spec.fromRevision} → r${spec.toRevision} in ${spec.phases.length} phases`,
          staticDetails: [
            `**Profile** ${spec.profile}, **revision** ${spec.fromRevision} → ${spec.toRevision}`,
            '',
            `**Phases** ${spec.phases.map((p) => (p.canary ? 'canary' : 'bulk')).join(' → ')}`,
            '',
            `**Started by** ${input.startedBy}; inventory \`${input.inventoryPath}\`; rollback on ${spec.rollback.on}`,
          ].join('\n'),
        },
      ],
      workflowIdConflictPolicy: 'FAIL',
      memo: { ...memo, wavegateRollout: rolloutId },
      typedSearchAttributes: [
        { key: WavegateProfile, value: spec.profile },
        ...(opts.key ? [{ key: WavegateKey, value: opts.key }] : []),
      ],
      staticSummary: `lock of profile ${spec.profile}: held by ${rolloutId} until it closes`,
      staticDetails: `One running rollout per profile. Terminating this lock does not stop ${rolloutId} (abandoned child): it only lets another rollout of ${spec.profile} start beside it.`,
    });
  let lock: Awaited<ReturnType<typeof startLock>>;
  try {
    lock = await startLock();
  } catch (err) {
    if (!(err instanceof WorkflowExecutionAlreadyStartedError)) throw err;
    // Two starts racing: the other one holds the lock; it is ours if key and spec match.
    const raced = opts.key !== undefined ? await rolloutOfKey(client, opts.key, input) : undefined;
    if (raced) return raced;
    const holder = await heldRolloutOf(client, spec.profile);
    if (holder) throw conflict(holder.rolloutId);
    // The lock's rollout has closed and the lock is closing after it (a start straight after a
    // `--wait` that returned at the rollout's close): wait for it, then take it.
    await awaitLockClosed(client, lockId, 30_000);
    lock = await startLock().catch(async (again: unknown) => {
      if (again instanceof WorkflowExecutionAlreadyStartedError)
        throw conflict((await heldRolloutOf(client, spec.profile))?.rolloutId ?? lockId);
      throw again;
    });
  }
  const started = await awaitLockedRollout(client, lockId, lock.firstExecutionRunId, opts.startTimeoutMs ?? 60_000);
  return {
    handle: client.workflow.getHandle<typeof rolloutWorkflow>(started.rolloutId),
    runId: started.runId,
    existing: false,
  };
}

/** Start a rollout under an id of its own; a second start while one of the profile runs is a CONFLICT naming it. */
export async function startRollout(
  client: Client,
  taskQueue: string,
  input: RolloutInput,
): Promise<WorkflowHandle<typeof rolloutWorkflow>> {
  return (await startOrJoinRollout(client, taskQueue, input, { newId: true })).handle;
}

/** The status query of a rollout (its latest run, or `runId`), or NOT_FOUND naming the id. */
export async function queryStatus(client: Client, id: string, runId?: string): Promise<RolloutStatus> {
  try {
    // Read as it is meant whichever build answered: an older one says not-for-me and not-started as skipped.
    return readStatus(await client.workflow.getHandle(id, runId).query(statusQuery));
  } catch (err) {
    if (err instanceof WorkflowNotFoundError)
      throw new WavegateError('NOT_FOUND', `no rollout with id "${id}"${runId ? ` and run ${runId}` : ''}`);
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
    const state = await handle.query(statusQuery).then(
      (s) => s.state,
      () => 'finished' as RolloutState,
    );
    throw new WavegateError(
      'INVALID_STATE',
      `${id}: ${checkControl(name, { state: isFinalState(state) ? state : 'completed', aborting: false }) ?? `rollout is ${state}`}`,
    );
  }
  try {
    return readStatus(
      await handle.executeUpdate<RolloutStatus, [typeof control]>(CONTROL_UPDATES[name], { args: [control] }),
    );
  } catch (err) {
    if (err instanceof WorkflowUpdateFailedError) {
      throw new WavegateError('INVALID_STATE', `${id}: ${err.cause?.message ?? err.message}`);
    }
    if (err instanceof WorkflowNotFoundError)
      throw new WavegateError('INVALID_STATE', `${id}: the rollout finished before ${name} arrived`);
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
    if (!states.includes(filter.state))
      throw new WavegateError(
        'INVALID_INPUT',
        `--state ${JSON.stringify(filter.state)}: must be one of ${states.join(', ')}`,
      );
    clauses.push(`WavegateState = '${filter.state}'`);
  }
  return clauses.join(' AND ');
}

export async function listRollouts(
  client: Client,
  filter: { profile?: string; state?: string; limit?: number },
): Promise<RolloutListing[]> {
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

/** How many completed rollouts, newest first, lastCompletedRollout reads for one that changed a device. */
const LAST_COMPLETED_LOOK = 20;

/**
 * The newest completed rollout of a profile that changed at least one device: the revision the fleet was
 * last brought to. A re-run that found every device in place (an old spec run again by mistake, a
 * converge with nothing behind) moves nothing, so it is passed over. Each run's status is read from its
 * result in the history: no worker needed. A sliced rollout whose slices cannot be read counts as changed
 * when its counts say a device was applied.
 */
export async function lastCompletedRollout(
  client: Client,
  profile: string,
): Promise<
  { rolloutId: string; runId: string; fromRevision: number; toRevision: number; closeTime: string } | undefined
> {
  const rows = (await listRollouts(client, { profile, state: 'completed', limit: 100 }))
    .filter((r) => r.type === 'rolloutWorkflow')
    .sort((a, b) => (b.closeTime ?? b.startTime).localeCompare(a.closeTime ?? a.startTime));
  for (const row of rows.slice(0, LAST_COMPLETED_LOOK)) {
    const status = (await client.workflow.getHandle(row.workflowId, row.runId).result()) as RolloutStatus;
    const records = await deviceRecords(client, status).catch(() => undefined);
    const changed = records
      ? changedDevices({ devices: records }).length > 0
      : status.counts.applied + status.counts.claimed > 0;
    if (changed)
      return {
        rolloutId: row.workflowId,
        runId: row.runId,
        fromRevision: status.fromRevision,
        toRevision: status.toRevision,
        closeTime: row.closeTime ?? row.startTime,
      };
  }
  return undefined;
}

/** The rollouts of a profile Temporal still runs (running or paused), with their target and state. */
export async function activeRolloutsOf(
  client: Client,
  profile: string,
): Promise<Array<{ rolloutId: string; state: string; phase?: string; toRevision?: number }>> {
  const rows = await listRollouts(client, { profile, limit: 100 });
  return rows
    .filter((r) => r.type === 'rolloutWorkflow' && r.status === 'RUNNING')
    .map((r) => ({
      rolloutId: r.workflowId,
      state: r.state ?? 'running',
      ...(r.phase !== undefined ? { phase: r.phase } : {}),
      ...(r.revision !== undefined ? { toRevision: r.revision } : {}),
    }));
}

/** The rollouts of a profile Temporal still runs, whatever their id (`rollout:<profile>`, converges). */
export async function runningRolloutsOf(client: Client, profile: string): Promise<string[]> {
  const rows = await listRollouts(client, { profile, limit: 100 });
  return rows.filter((r) => r.type === 'rolloutWorkflow' && r.status === 'RUNNING').map((r) => r.workflowId);
}
