import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import { parseAuditLog, verifyAuditSegments, type AuditRecord, type AuditSegment } from '../../core/audit';
import {
  abortPreview,
  bannerOf,
  boardDevices,
  boardOutcome,
  DEFAULT_ROLE,
  DEVICE_HISTORY,
  deviceHistoryRow,
  gateEvidenceOf,
  metricSeriesOf,
  pageOfDevices,
  phaseProgress,
  proofCounts,
  pageOfRollouts,
  ROLLOUT_LIST,
  sortFailuresFirst,
  timelineOf,
  type BoardControl,
  type RolloutListQuery,
  type BoardOutcome,
  type ControlBody,
  type DeviceHistoryRow,
  type DeviceQuery,
} from '../../core/board';
import { WavegateError } from '../../core/errors';
import { describeControl, readStatus, rolloutOutcome } from '../../core/rollout/outcome';
import type { RolloutStatus } from '../../contracts/rollout';
import { readAuditKey, type AuditLocation } from '../../audit/file';
import { deviceRecords, findDevice } from '../../clients/rollout-records';
import { listRollouts, queryStatus, retryTransient, sendControl, type RolloutListing } from '../client';
import { readChain, verifyLinkedTrails, verifyReport } from '../commands/audit';
import { checkRevert, startRevert } from '../commands/revert';
import { revertUntilOf } from '../../core/floor';
import { revertWindowOf } from '../../core/rollout/revert';
import { deviceSetDigest } from './fleet';
import { estimateRollout } from '../../core/eta';
import type { Role } from '../../core/approval';
import type { KeyPair } from '../../core/signing';
import { signedApproval } from '../operator-statement';

/**
 * What the board reads, through the same client and audit store as the CLI: the rollout list with each
 * rollout's true outcome, one rollout's view (banner, phases, gate evidence from the audit trail, the
 * device table), the audit trail verified as `wavegate audit --verify` does, and the controls sent as
 * `wavegate pause|resume|approve|abort` sends them (sendControl).
 */
export interface BoardSources {
  client: Client;
  /** Where the trails are: the store (`--audit-store`, PostgreSQL) or the directory, and the audit key if any. */
  audit: { store?: string; where: AuditLocation };
  /** Device id → transport, from `--inventory` when given. */
  transports: ReadonlyMap<string, string>;
  /** The workers' task queue: where a revert started from the board runs. */
  taskQueue: string;
  /** The profiles root a revert reads its revisions from (`--profiles`, as `wavegate revert`). */
  profilesRoot: string;
  /** The board's own `--inventory`: the only inventory a revert started from the board reads. */
  inventory?: string;
  /** How long a read of Temporal is retried through transient failures before the page is told (default 10 s). */
  readRetryMs?: number;
  /** How long the rollout list waits for its rows' statuses before it answers with the rest as visibility has them (default 3 s). */
  listDetailMs?: number;
  /**
   * The board's key (`--approval-key`, pinned as `role: board` in a profile's approvers.yaml): an approval sent
   * from the board carries a statement it signs naming the operator signed in and their role (core/approval.ts).
   */
  approvalKey?: KeyPair;
}

const ROLLOUT_TYPES = new Set(['rolloutWorkflow', 'nightlyCanaryWorkflow']);
/** A read of Temporal retried through a server restart for this long, then answered 503 UNAVAILABLE. */
const READ_RETRY_MS = 10_000;

function retried<T>(src: BoardSources, what: string, poll: () => Promise<T>): Promise<T> {
  return retryTransient(poll, { what, giveUpAfterMs: src.readRetryMs ?? READ_RETRY_MS, maxDelayMs: 2_000 });
}

/** The trail's records, or none when the store does not hold it (a board on another host than the worker). */
async function trailOf(
  src: BoardSources,
  id: string,
  runId?: string,
): Promise<{ records: AuditRecord[]; segments: AuditSegment[]; location?: string; missing?: string }> {
  try {
    const { segments, location } = await readChain(id, {
      auditDir: src.audit.where.auditDir,
      ...(src.audit.store ? { auditStore: src.audit.store } : {}),
      ...(runId ? { run: runId } : {}),
    });
    return { records: segments.flatMap((s) => parseAuditLog(s.text).records), segments, location };
  } catch (err) {
    if (err instanceof WavegateError && (err.code === 'NOT_FOUND' || err.code === 'UNAVAILABLE'))
      return { records: [], segments: [], missing: err.message };
    throw err;
  }
}

/** The rollout's latest run, or NOT_FOUND naming the id (also for a workflow that is not a rollout). */
async function describeRollout(src: BoardSources, id: string) {
  try {
    const d = await retried(src, `describe of ${id}`, () => src.client.workflow.getHandle(id).describe());
    if (!ROLLOUT_TYPES.has(d.type))
      throw new WavegateError('NOT_FOUND', `no rollout with id "${id}"`, { field: 'id', value: id });
    return d;
  } catch (err) {
    if (err instanceof WorkflowNotFoundError)
      throw new WavegateError('NOT_FOUND', `no rollout with id "${id}"`, { field: 'id', value: id });
    throw err;
  }
}

async function statusOf(src: BoardSources, id: string, runId?: string): Promise<RolloutStatus> {
  return retried(src, `status query of ${id}`, () => queryStatus(src.client, id, runId));
}

export interface RolloutRow extends RolloutListing {
  outcome: BoardOutcome;
  startedBy?: string;
  fromRevision?: number;
  toRevision?: number;
  phases?: ReturnType<typeof phaseProgress>;
  counts?: RolloutStatus['counts'];
}

/** Finished rollouts never change: their row is kept by run id. */
const closedRows = new Map<string, RolloutRow>();
const MAX_CACHED = 2_000;

/** Rows read in full (status and who started it) at once, at most: the rest of a long list stays from visibility. */
const DETAILED_ROWS = 50;
/** How long the list waits for its rows' statuses (each a query a worker answers) before answering without the rest. */
const LIST_DETAIL_MS = 3_000;

async function detailedRow(src: BoardSources, row: RolloutListing): Promise<RolloutRow> {
  const cached = closedRows.get(row.runId);
  if (cached) return cached;
  const status = await queryStatus(src.client, row.workflowId, row.runId).catch(() => undefined);
  const started = (await trailOf(src, row.workflowId).catch(() => undefined))?.records.find(
    (r) => r.event === 'rollout.started' && r.runId === row.runId,
  );
  const out: RolloutRow = {
    ...row,
    outcome: boardOutcome(row.status, row.state, status),
    ...(started ? { startedBy: started.by } : {}),
    ...(status
      ? {
          fromRevision: status.fromRevision,
          toRevision: status.toRevision,
          phases: phaseProgress(status),
          counts: status.counts,
        }
      : {}),
  };
  if (row.status !== 'RUNNING' && status) {
    if (closedRows.size >= MAX_CACHED) closedRows.delete(closedRows.keys().next().value!);
    closedRows.set(row.runId, out);
  }
  return out;
}

/**
 * One page of the rollout list (`GET /api/rollouts`): the newest ROLLOUT_LIST.scan rollouts visibility lists
 * (the state and profile, whitelisted, are its query's filters; the search is matched here, never put in a
 * query), failures first, and the page asked for, its rows read in full (status and who started it).
 */
export async function rolloutRows(src: BoardSources, query: RolloutListQuery) {
  const listed = await retried(src, 'the rollout list', () =>
    listRollouts(src.client, {
      ...(query.state ? { state: query.state } : {}),
      ...(query.profile ? { profile: query.profile } : {}),
      limit: ROLLOUT_LIST.scan,
    }),
  );
  const { rows, ...page } = pageOfRollouts<RolloutListing & { outcome: BoardOutcome }>(
    listed.map((r) => ({ ...r, outcome: boardOutcome(r.status, r.state) })),
    query,
  );
  const out: RolloutRow[] = [...rows];
  // Four at a time: a query of a closed rollout is a replay on a worker. Within a budget: a rollout whose
  // worker is away (its query waits for one) leaves its row as visibility has it, not the whole list unanswered.
  const until = Date.now() + (src.listDetailMs ?? LIST_DETAIL_MS);
  const detailed = rows.slice(0, DETAILED_ROWS);
  for (let i = 0; i < detailed.length && Date.now() < until; i += 4)
    await Promise.all(
      detailed.slice(i, i + 4).map(async (row, j) => {
        out[i + j] = await src.client.connection.withDeadline(until, () => detailedRow(src, row));
      }),
    );
  return { rollouts: sortFailuresFirst(out), ...page, read: listed.length, readLimit: ROLLOUT_LIST.scan };
}

/**
 * A device's history across rollouts (`GET /api/devices/<id>/history`): of the newest DEVICE_HISTORY.scan
 * rollouts visibility lists, those whose status names the device, newest first, what each did to it.
 *
 * Why this source: a rollout's status already names its devices (inline, or in its slices: findDevice, as
 * `status --device` reads it), and a closed rollout's status is its result in the history (no worker, no
 * replay). The audit trails hold the same per device but in no index by device: finding one device there
 * reads every trail in full, file or store. Statuses are read four at a time within a budget; a rollout
 * whose status cannot be read in it (a running one whose worker is away, one terminated) is counted, not guessed.
 */
export async function deviceHistoryView(src: BoardSources, device: string) {
  const listed = await retried(src, 'the rollout list', () => listRollouts(src.client, { limit: DEVICE_HISTORY.scan }));
  const newest = [...listed].sort((a, b) => b.startTime.localeCompare(a.startTime));
  const rows: DeviceHistoryRow[] = [];
  let unread = 0;
  let read = 0;
  const until = Date.now() + (src.listDetailMs ?? HISTORY_DETAIL_MS);
  for (let i = 0; i < newest.length && rows.length < DEVICE_HISTORY.rows && Date.now() < until; i += 4) {
    const batch = newest.slice(i, i + 4);
    const found = await Promise.all(
      batch.map((row) =>
        src.client.connection
          .withDeadline(until, async () => {
            const status = await runStatus(src, row);
            const d = await findDevice(src.client, status, device);
            return d ? deviceHistoryRow(row, status, d) : null;
          })
          .catch(() => undefined),
      ),
    );
    read += batch.length;
    for (const f of found) {
      if (f === undefined) unread += 1;
      else if (f) rows.push(f);
    }
  }
  return {
    device,
    rollouts: rows.slice(0, DEVICE_HISTORY.rows),
    // How far it looked: rollouts read, those it could not read, and those left unread (the budget or the bound).
    read,
    unread,
    notRead: newest.length - read,
    scanLimit: DEVICE_HISTORY.scan,
  };
}

/** How long a device's history waits for rollouts' statuses before it answers with what it read. */
const HISTORY_DETAIL_MS = 8_000;

/** A listed run's status: a closed run's from its result in the history (no worker), a running one's by query. */
async function runStatus(src: BoardSources, row: RolloutListing): Promise<RolloutStatus> {
  if (row.status === 'COMPLETED')
    return readStatus(await src.client.workflow.getHandle(row.workflowId, row.runId).result());
  return queryStatus(src.client, row.workflowId, row.runId);
}

/** One rollout: what the page shows, with one page of the device table. */
export async function rolloutView(src: BoardSources, id: string, query: DeviceQuery) {
  const described = await describeRollout(src, id);
  const status = await statusOf(src, id);
  const trail = await trailOf(src, id, described.runId);
  const records = trail.records.filter((r) => r.runId === described.runId);
  // A large rollout keeps its devices' records in its slices: read them there, as `status --devices` does.
  const all = {
    ...status,
    devices: await retried(src, `device records of ${id}`, () => deviceRecords(src.client, status)),
  };
  const devices = boardDevices(all, records, src.transports);
  return {
    rolloutId: status.rolloutId,
    runId: described.runId,
    temporalStatus: described.status.name,
    profile: status.profile,
    fromRevision: status.fromRevision,
    toRevision: status.toRevision,
    state: status.state,
    outcome: boardOutcome(described.status.name, status.state, status),
    outcomeSummary: rolloutOutcome(status).summary,
    banner: bannerOf(status),
    phases: phaseProgress(all).map((p) => ({ ...p, evidence: status.phases[p.index]?.evidence ?? [] })),
    // Each phase's and the rollout's estimated end as of this read (core/eta.ts); the page labels the times with its zone.
    eta: estimateRollout(all, Date.now()),
    gates: gateEvidenceOf(records),
    // Phases, gates and controls in order, with the values the threshold checks read (core/board.ts).
    timeline: { ...timelineOf(status, records), series: metricSeriesOf(records) },
    counts: status.counts,
    // Of the devices at the target, those proven by their own receipts (every device, not only this page).
    proof: proofCounts(devices),
    controls: status.controls,
    // What the abort dialog says a rollback would put back (the count of devices this rollout changed).
    abort: abortPreview(status.changedDevices),
    deadline: status.deadline ?? null,
    startedBy: records.find((r) => r.event === 'rollout.started')?.by ?? null,
    startTime: described.startTime.toISOString(),
    closeTime: described.closeTime?.toISOString() ?? null,
    awaitingApproval: status.phases.some((p) => p.stage === 'awaiting-approval'),
    trail: trail.missing ? { missing: trail.missing } : { location: trail.location ?? null, records: records.length },
    devices: pageOfDevices(devices, query),
  };
}

/** The trail as `wavegate audit --verify` reads it: the same chain, the same checks, the same report lines. */
export async function auditView(src: BoardSources, id: string) {
  const described = await describeRollout(src, id);
  const status = await statusOf(src, id).catch(() => undefined);
  const trail = await trailOf(src, id);
  if (trail.missing) throw new WavegateError('NOT_FOUND', `${id}: ${trail.missing}`, { field: 'id', value: id });
  const where = src.audit.where;
  const key = where.keyFile === undefined ? undefined : readAuditKey(where.keyFile, where.keyFrom);
  // The head the workflow acknowledged, when the chain is this run's: what cuts off the end are caught by.
  const chainRun = trail.records[0]?.runId;
  const head = chainRun === described.runId ? status?.auditHead : undefined;
  const verdict = verifyAuditSegments(trail.segments, { ...(head ? { head } : {}), ...(key ? { key } : {}) });
  // The trails its records link (a slice's own trail), each verified the same way, as `audit --verify` does.
  const linked = await verifyLinkedTrails(id, trail.segments, verdict, {
    ...(src.audit.store ? { store: src.audit.store } : {}),
    auditDir: where.auditDir,
    ...(key ? { key } : {}),
  });
  const report = verifyReport(
    `audit ${id}`,
    verdict,
    head
      ? { checked: `the workflow's status: record ${head.seq} ${head.hash.slice(0, 12)}…`, why: null }
      : {
          checked: null,
          why: chainRun === described.runId ? 'the status holds no head' : 'the chain is of another run',
        },
    { file: where.keyFile, from: where.keyFrom, lookedFor: where.keyLookedFor },
    linked,
  );
  return {
    rolloutId: id,
    runId: described.runId,
    location: trail.location ?? null,
    ok: verdict.ok && linked.ok,
    linkedTrails: linked.trails,
    failure: verdict.failure,
    headChecked: !!head,
    macChecked: !!key,
    report,
    records: trail.records,
  };
}

/** A control as the CLI sends it (sendControl: the workflow's update, its validator, the same audit record). */
export async function sendBoardControl(
  src: BoardSources,
  id: string,
  name: BoardControl,
  body: ControlBody,
  by: string,
  role: Role = DEFAULT_ROLE,
): Promise<{ message: string; state: string }> {
  await describeRollout(src, id);
  // Under the two-person rule only this statement says who approves: the operator signed in, with their role here.
  const statement =
    name === 'approve' && src.approvalKey
      ? await signedApproval(src.client, id, src.approvalKey, body.reason, { operator: by, role })
      : undefined;
  const control = {
    by,
    reason: body.reason,
    ...(name === 'abort' ? { rollback: body.rollback !== false } : {}),
    ...(name === 'approve' && body.phase !== undefined ? { phase: body.phase } : {}),
    ...(statement ? { statement } : {}),
  };
  const status = await sendControl(src.client, id, name, control);
  return { message: `${describeControl(name, status, control)} (${id}, by ${by})`, state: status.state };
}

/** The status's fingerprint for live updates: a new frame is sent only when something a page shows changed. */
export async function liveFingerprint(src: BoardSources, id: string): Promise<string> {
  const s = await statusOf(src, id);
  return JSON.stringify([
    s.state,
    s.phase,
    s.pausedReason,
    s.phases,
    s.devices,
    s.controls.length,
    s.deadline,
    s.auditHead,
  ]);
}

/**
 * The inventory a revert from the board reads: the board's own `--inventory`, never the path the reverted
 * rollout's input names. That input was written by whoever could start a workflow, and a path in it read
 * on this host (its refusal quoting the file) would answer with any file the board can read.
 */
function boardInventory(src: BoardSources): string {
  if (src.inventory) return src.inventory;
  throw new WavegateError(
    'INVALID_INPUT',
    "a revert from the board reads the board's own inventory, and this board has none: start it with --inventory <fleet.yaml>, or run `wavegate revert <id>`; nothing was started",
    { field: '--inventory' },
  );
}

/** What a revert of this rollout would touch, or why there is none: checkRevert, the command's own refusals. */
export async function revertPreview(src: BoardSources, id: string) {
  await describeRollout(src, id);
  try {
    const plan = await checkRevert(src.client, id, { inventory: boardInventory(src) }, src.profilesRoot);
    const { spec } = plan.original;
    const closedAt = plan.finished.closedAt ?? Date.now();
    const until = revertUntilOf(closedAt, revertWindowOf(spec));
    return {
      applies: true as const,
      rolloutId: id,
      profile: spec.profile,
      from: spec.toRevision,
      to: spec.fromRevision,
      devices: plan.finished.changed,
      digest: deviceSetDigest(plan.finished.changed),
      phases: spec.phases.length,
      windowClosesAt: until ? new Date(until).toISOString() : null,
      inventory: plan.inventoryPath,
    };
  } catch (err) {
    if (err instanceof WavegateError && err.code !== 'UNAVAILABLE' && err.code !== 'NOT_FOUND')
      return { applies: false as const, rolloutId: id, why: err.message };
    throw err;
  }
}

/**
 * Start the revert an operator confirmed, as `wavegate revert` starts it, started by the operator. The
 * devices it touches are checked again against what the page showed (their number and deviceSetDigest):
 * a revert that would now touch another set, even one of the same size, is refused (CONFLICT) rather
 * than started.
 */
export async function startBoardRevert(
  src: BoardSources,
  id: string,
  body: { fast: boolean; devices: number; digest: string },
  by: string,
): Promise<{ rolloutId: string; message: string }> {
  await describeRollout(src, id);
  const inventory = boardInventory(src);
  const plan = await checkRevert(src.client, id, { inventory }, src.profilesRoot);
  const now = plan.finished.changed;
  if (now.length !== body.devices || deviceSetDigest(now) !== body.digest)
    throw new WavegateError(
      'CONFLICT',
      `devices: the page showed ${body.devices} device(s) to revert, ${id} has ${now.length} now (${now.slice(0, 20).join(', ')}${now.length > 20 ? ', …' : ''}), not the same set; look again before reverting; nothing was started`,
      { field: 'devices' },
    );
  const { handle, input } = await startRevert(src.client, src.taskQueue, plan, { fast: body.fast, inventory }, by);
  return {
    rolloutId: handle.workflowId,
    message: `revert ${handle.workflowId} started by ${by}: r${input.spec.fromRevision} → r${input.spec.toRevision} over the ${now.length} device(s) ${id} changed${body.fast ? ', one phase, no gate (fast)' : ''}`,
  };
}
