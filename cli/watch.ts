import type { Client } from '@temporalio/client';
import { WorkflowNotFoundError } from '@temporalio/client';
import { isFinalState } from '../core/controls';
import { WavegateError } from '../core/errors';
import { isTransientFailure, retryNote, retryTransient } from './client';
import { readStatus } from '../core/rollout/outcome';
import { proofOf, summarizeCounts, summarizeProof, type DeviceState } from '../core/rollout-state';
import { statusQuery, type RolloutStatus } from '../contracts/rollout';
import { phaseCounts } from '../core/rollout/sliced-records';
import type { PhaseStatus } from '../core/rollout/status';
import { phaseLabel } from '../core/rollout/verdict';
import { describeEta, estimateRollout, localZone, shortEta } from '../core/eta';
import { formatDurationMs } from '../core/duration';
import { describeWatch } from '../core/rollout/watch';

/**
 * `wavegate watch`: live per-phase progress bars and a device table. On a terminal the block redraws in
 * place (cursor up, clear to end of screen); anywhere else (pipes, CI logs) it prints a plain line
 * whenever something changed, so a log reads as a history rather than a smear of escape codes.
 */

const DONE: ReadonlySet<DeviceState> = new Set([
  'applied',
  'claimed',
  'skipped',
  'not-for-me',
  'not-started',
  'failed',
  'rolled-back',
  'rollback-failed',
]);

function bar(done: number, total: number, width: number): string {
  const filled = total === 0 ? width : Math.round((done / total) * width);
  return `[${'#'.repeat(filled)}${'.'.repeat(width - filled)}]`;
}

/** A phase's devices that are done (whatever their end) of its total, and how many of them applied or claimed. */
function phaseDone(
  status: RolloutStatus,
  phase: PhaseStatus,
): { done: number; total: number; applied: number; claimed: number } {
  const counts = phaseCounts(status, phase.index);
  let done = 0;
  for (const state of DONE) done += counts[state];
  // A sliced phase's size is the plan's (its devices are counted as their slices end).
  const total = status.slices ? phase.devices : counts.total;
  return { done, total, applied: counts.applied, claimed: counts.claimed };
}

/** Devices that are moving first (applying, rolling back), then failures and waits for a dependency, then the rest by phase. */
function deviceOrder(state: DeviceState): number {
  return (
    (
      { applying: 0, 'rolling-back': 0, failed: 1, 'rollback-failed': 1, waiting: 1 } as Partial<
        Record<DeviceState, number>
      >
    )[state] ?? 2
  );
}

/** The lines of one frame: a header, one bar per phase, and a device table of at most `maxDevices` rows. */
export function renderFrame(
  status: RolloutStatus,
  opts: { width?: number; maxDevices?: number; now?: Date } = {},
): string[] {
  // One character short of the terminal: a line that wraps would throw off the cursor-up redraw.
  const width = Math.max(60, Math.min((opts.width ?? 100) - 1, 200));
  const maxDevices = opts.maxDevices ?? 20;
  const lines: string[] = [];
  lines.push(
    `rollout ${status.rolloutId}  ${status.profile} r${status.fromRevision} → r${status.toRevision}  state ${status.state}  phase ${status.phase}${opts.now ? `  at ${opts.now.toISOString().slice(11, 19)}` : ''}`,
  );
  if (status.state === 'paused') lines.push(`  ${pauseLine(status)}`.slice(0, width));
  else if (status.pausedReason) lines.push(`  paused: ${status.pausedReason}`.slice(0, width));
  if (status.watch) lines.push(`  ${describeWatch(status.watch)}`.slice(0, width));
  lines.push(`  ${summarizeCounts(status.counts)}`);
  // The estimated ends (core/eta.ts) as of this frame, in this machine's zone, named.
  const eta = opts.now ? estimateRollout(status, opts.now.getTime()) : undefined;
  const zone = localZone();
  if (eta && eta.rollout.kind !== 'done') lines.push(`  eta: ${describeEta(eta.rollout, zone)}`);
  const barWidth = Math.max(10, Math.min(40, width - 72));
  for (const phase of status.phases) {
    const { done, total, applied, claimed } = phaseDone(status, phase);
    const name = `${phase.index} ${phase.name}`.padEnd(20).slice(0, 20);
    const ends = eta?.phases[phase.index] ? shortEta(eta.phases[phase.index]!.eta, zone) : '';
    lines.push(
      `  ${name} ${bar(done, total, barWidth)} ${String(done).padStart(4)}/${String(total).padEnd(4)} applied ${applied}${claimed ? ` claimed ${claimed}` : ''}  ${phase.stage}${phase.gateOutcome ? ` (${phase.gateOutcome})` : ''}${ends ? `  ${ends}` : ''}`,
    );
  }
  const shown = [...status.devices].sort(
    (a, b) => deviceOrder(a.state) - deviceOrder(b.state) || a.phase - b.phase || a.id.localeCompare(b.id),
  );
  lines.push(`  ${summarizeProof(status.devices)}`);
  lines.push(`  ${'DEVICE'.padEnd(16)} ${'PHASE'.padEnd(6)} ${'STATE'.padEnd(16)} ${'PROOF'.padEnd(8)} NOTE`);
  for (const d of shown.slice(0, maxDevices)) {
    lines.push(
      `  ${d.id.padEnd(16)} ${String(d.phase < 0 ? '-' : d.phase).padEnd(6)} ${d.state.padEnd(16)} ${proofOf(d).padEnd(8)} ${d.reason ?? ''}`.slice(
        0,
        width,
      ),
    );
  }
  if (shown.length > maxDevices)
    lines.push(`  … ${shown.length - maxDevices} more devices (wavegate status ${status.rolloutId})`);
  return lines.map((line) => (line.length > width ? line.slice(0, width) : line));
}

/** One plain line for logs: state, phase, counts, and the stage of every phase. */
export function plainLine(status: RolloutStatus): string {
  const stages = status.phases.map((p) => `${p.name}:${p.stage}`).join(' ');
  return `[${status.state}] phase ${status.phase}: ${summarizeCounts(status.counts)}${stages ? ` | ${stages}` : ''}${status.pausedReason ? ` | ${status.pausedReason}` : ''}${status.watch ? ` | ${describeWatch(status.watch)}` : ''}`;
}

/** What a paused rollout is waiting for, and the exact commands that move it on. */
export function pauseLine(status: Pick<RolloutStatus, 'rolloutId' | 'pausedReason'>): string {
  return `paused: ${status.pausedReason ?? 'by an operator'} — to go on: wavegate resume ${status.rolloutId}; to stop: wavegate abort ${status.rolloutId}`;
}

/** A clock time as a log reads it: `14:05:09`, local. */
function clock(at: Date): string {
  return [at.getHours(), at.getMinutes(), at.getSeconds()].map((n) => String(n).padStart(2, '0')).join(':');
}

/**
 * One phase's progress line for `--wait` (a log's history of the rollout): `phase 1/3 canary: applying
 * 0/1`, `phase 1/3 canary: gate 10m (until 14:05:09)`, `phase 1/3 canary: passed (health gate pass)`.
 * `since` is when the phase was first seen in its stage (a gate's end is that plus its time). Null for a
 * phase still pending.
 */
export function phaseProgressLine(status: RolloutStatus, phase: PhaseStatus, since: Date): string | null {
  const { done, total, applied, claimed } = phaseDone(status, phase);
  const label = phaseLabel(status, phase.name);
  const gate = phase.gateOutcome ? `health gate ${phase.gateOutcome}` : undefined;
  switch (phase.stage) {
    case 'pending':
      return null;
    case 'applying':
      return `${label}: applying ${done}/${total}`;
    case 'gate':
      return phase.gate === 'manual' || phase.gate === 0
        ? `${label}: health gate`
        : `${label}: gate ${formatDurationMs(phase.gate)} (until ${clock(new Date(since.getTime() + phase.gate))}), then its health gate`;
    case 'awaiting-approval':
      return `${label}: awaiting approval — wavegate approve ${status.rolloutId}`;
    case 'passed':
      return `${label}: passed, ${applied + claimed}/${total} at r${status.toRevision}${gate ? ` (${gate})` : ''}`;
    case 'failed':
      return `${label}: failed (${gate ?? 'failure gate tripped'})`;
    case 'inconclusive':
      return `${label}: ${gate ?? 'health gate inconclusive'}, held for an operator`;
    case 'stopped':
      return `${label}: stopped`;
  }
}

/**
 * `--wait`'s progress: a line each time a phase changes stage (and once when the rollback starts), so
 * a 20-minute wait shows where it is. Feed it every status read (WatchOptions.onStatus).
 */
export function waitProgress(write: (line: string) => void, now: () => Date = () => new Date()) {
  const seen = new Map<number, string>();
  let rollingBack = false;
  let watched = '';
  return (status: RolloutStatus): void => {
    for (const phase of status.phases) {
      const key = `${phase.stage}|${phase.gateOutcome ?? ''}`;
      if (seen.get(phase.index) === key) continue;
      seen.set(phase.index, key);
      const line = phaseProgressLine(status, phase, now());
      if (line) write(line);
    }
    // The watch after promotion: a line when it starts, after each check, and when it ends.
    const w = status.watch;
    const watchKey = w ? `${w.outcome}|${w.checks}|${w.alerts.length}` : '';
    if (w && watchKey !== watched) {
      watched = watchKey;
      write(`watch: ${describeWatch(w)}`);
    }
    if (status.phase === 'rollback' && !rollingBack) {
      rollingBack = true;
      const n = status.changedDevices;
      write(
        `rollback: putting back ${n === undefined ? 'the devices' : `the ${n} device${n === 1 ? '' : 's'}`} this rollout changed`,
      );
    }
  };
}

export interface WatchOptions {
  intervalMs: number;
  /** Redraw in place (a terminal) or print plain lines. */
  tty: boolean;
  write: (text: string) => void;
  columns?: () => number | undefined;
  rows?: () => number | undefined;
  /** Called once each time the rollout enters `paused` (a pipeline log must say why it is waiting). */
  onPause?: (status: RolloutStatus) => void;
  /** Return as soon as the rollout pauses, instead of waiting for a final state (`--exit-on-pause`). */
  stopOnPause?: boolean;
  /**
   * The rollout's status is final but its run is still open (its webhook outbox delivering the last
   * events): called with a line saying so, again whenever that line changes, until the run has closed.
   */
  onClosing?: (line: string) => void;
  /** A poll failed transiently (the server away, a query cut off) and is retried: once per run of failures. */
  onRetry?: (line: string) => void;
  /** The run to watch (a start knows it); default: the id's latest run when the watch starts. */
  runId?: string;
  /** Every status read, in order (`--wait`'s progress lines). */
  onStatus?: (status: RolloutStatus) => void;
}

/** What a run whose status is final still does before it closes: `completed; closing (delivering 2 webhook events)…`. */
export function closingLine(status: Pick<RolloutStatus, 'state' | 'webhooks'>): string {
  const pending = status.webhooks?.pending ?? 0;
  return `${status.state}; closing${pending > 0 ? ` (delivering ${pending} webhook event${pending === 1 ? '' : 's'})` : ''}…`;
}

type Closed = { status: RolloutStatus } | 'closed' | 'retry';

/**
 * Poll the rollout's status until it reaches a final state AND its run has closed; return the final
 * status. A final state comes before the close (the outbox drains the last webhook events, up to 30 s):
 * returning then would let the next command (`revert`) find the run still open. The run is pinned when
 * the watch starts, so a later run of the re-used id is never waited for instead. Every poll outlives a
 * transient failure (retryTransient). The in-place redraw moves the cursor up over the previous frame
 * and clears to the end of the screen, so the terminal shows one block.
 */
export async function watchRollout(client: Client, id: string, opts: WatchOptions): Promise<RolloutStatus> {
  const retry = <T>(what: string, poll: () => Promise<T>): Promise<T> =>
    retryTransient(poll, {
      what: `${what} of ${id}`,
      onRetry: (err) => opts.onRetry?.(retryNote(`${what} of ${id}`, err)),
      // The rollout runs in Temporal whatever happens to this wait.
      giveUpHint: `the rollout goes on without this wait: \`wavegate watch ${id}\` waits again`,
    });
  let runId: string;
  try {
    runId = opts.runId ?? (await retry('describe', () => client.workflow.getHandle(id).describe())).runId;
  } catch (err) {
    if (err instanceof WorkflowNotFoundError) throw new WavegateError('NOT_FOUND', `no rollout with id "${id}"`);
    throw err;
  }
  const handle = client.workflow.getHandle(id, runId, { followRuns: false });
  const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
  // The rollout's result is its final status: waiting on it (a long poll) ends the watch the moment the
  // workflow closes instead of up to an interval later. A run that closes without one (cancelled,
  // terminated, failed) is read by the query and describe below; a transient failure of the long poll
  // arms it again.
  const armClosed = (): Promise<Closed> =>
    handle.result().then(
      (status: RolloutStatus) => ({ status }),
      (err: unknown) => (isTransientFailure(err) ? ('retry' as const) : ('closed' as const)),
    );
  let closed: Promise<Closed> | undefined = armClosed();
  /** Wait an interval, or less when the run closes; what the long poll said, if it said anything. */
  const next = async (): Promise<RolloutStatus | undefined> => {
    let tick: ReturnType<typeof setTimeout> | undefined;
    const interval = new Promise<'tick'>((r) => (tick = setTimeout(() => r('tick'), opts.intervalMs)));
    const said = await (closed ? Promise.race([interval, closed]) : interval);
    clearTimeout(tick);
    if (said === 'tick') return undefined;
    if (said === 'retry') {
      await sleep(opts.intervalMs);
      closed = armClosed();
      return undefined;
    }
    closed = undefined; // 'closed': no status in the result, the query reads the closed run
    return said === 'closed' ? undefined : readStatus(said.status);
  };
  const queryStatus = async (): Promise<RolloutStatus> => {
    try {
      // Read as it is meant whichever build answered: an older one says not-for-me and not-started as skipped.
      return readStatus(await retry('status query', () => handle.query(statusQuery)));
    } catch (err) {
      if (err instanceof WorkflowNotFoundError) throw new WavegateError('NOT_FOUND', `no rollout with id "${id}"`);
      throw err;
    }
  };
  /** The status is final: wait for the run to close, saying what it still does. */
  const untilClosed = async (status: RolloutStatus): Promise<RolloutStatus> => {
    let said = '';
    for (;;) {
      const described = await retry('describe', () => handle.describe());
      if (described.status.name !== 'RUNNING') {
        // Closed: its result is the final status (deliveries counted); a run closed another way keeps the last read.
        if (described.status.name !== 'COMPLETED') return status;
        return readStatus(await retry('result', () => handle.result()));
      }
      const line = closingLine(status);
      if (line !== said) opts.onClosing?.(line);
      said = line;
      const result = await next();
      if (result) return result;
      status = await queryStatus();
    }
  };
  let previousLines = 0;
  let lastPlain = '';
  let wasPaused = false;
  let final: RolloutStatus | undefined;
  for (;;) {
    const status = final ?? (await queryStatus());
    opts.onStatus?.(status);
    if (opts.tty) {
      const rows = opts.rows?.() ?? 40;
      const lines = renderFrame(status, {
        width: opts.columns?.() ?? 100,
        maxDevices: Math.max(3, rows - status.phases.length - 8),
        now: new Date(),
      });
      opts.write(`${previousLines ? `\x1b[${previousLines}A\r` : ''}\x1b[J${lines.join('\n')}\n`);
      previousLines = lines.length;
    } else {
      const line = plainLine(status);
      if (line !== lastPlain) opts.write(`${new Date().toISOString()} ${line}\n`);
      lastPlain = line;
    }
    if (isFinalState(status.state)) return final ?? untilClosed(status);
    const paused = status.state === 'paused';
    if (paused && !wasPaused) opts.onPause?.(status);
    wasPaused = paused;
    if (paused && opts.stopOnPause) return status;
    const described = await retry('describe', () => handle.describe());
    // Completed since the status above was read (a describe retried through a failure can see a later
    // moment than the query): its result is the final status.
    if (described.status.name === 'COMPLETED') return readStatus(await retry('result', () => handle.result()));
    // A workflow closed without reaching a final state (terminated, or failed outside the main path).
    if (described.status.name !== 'RUNNING')
      return { ...status, state: 'failed', pausedReason: `workflow ${described.status.name.toLowerCase()}` };
    final = await next();
  }
}
