import type { Client } from '@temporalio/client';
import { WorkflowNotFoundError } from '@temporalio/client';
import { isFinalState } from '../core/controls';
import { WavegateError } from '../core/errors';
import { readStatus } from '../core/rollout/outcome';
import { summarizeCounts, type DeviceState } from '../core/rollout-state';
import type { RolloutStatus } from '../workflows/messages';

/**
 * `wavegate watch`: live per-phase progress bars and a device table. On a terminal the block redraws in
 * place (cursor up, clear to end of screen); anywhere else (pipes, CI logs) it prints a plain line
 * whenever something changed, so a log reads as a history rather than a smear of escape codes.
 */

const DONE: ReadonlySet<DeviceState> = new Set(['applied', 'claimed', 'skipped', 'not-for-me', 'not-started', 'failed', 'rolled-back', 'rollback-failed']);

function bar(done: number, total: number, width: number): string {
  const filled = total === 0 ? width : Math.round((done / total) * width);
  return `[${'#'.repeat(filled)}${'.'.repeat(width - filled)}]`;
}

/** Devices that are moving first (applying, rolling back), then failures and waits for a dependency, then the rest by phase. */
function deviceOrder(state: DeviceState): number {
  return ({ applying: 0, 'rolling-back': 0, failed: 1, 'rollback-failed': 1, waiting: 1 } as Partial<Record<DeviceState, number>>)[state] ?? 2;
}

/** The lines of one frame: a header, one bar per phase, and a device table of at most `maxDevices` rows. */
export function renderFrame(status: RolloutStatus, opts: { width?: number; maxDevices?: number; now?: Date } = {}): string[] {
  // One character short of the terminal: a line that wraps would throw off the cursor-up redraw.
  const width = Math.max(60, Math.min((opts.width ?? 100) - 1, 200));
  const maxDevices = opts.maxDevices ?? 20;
  const lines: string[] = [];
  lines.push(`rollout ${status.rolloutId}  ${status.profile} r${status.fromRevision} → r${status.toRevision}  state ${status.state}  phase ${status.phase}${opts.now ? `  at ${opts.now.toISOString().slice(11, 19)}` : ''}`);
  if (status.state === 'paused') lines.push(`  ${pauseLine(status)}`.slice(0, width));
  else if (status.pausedReason) lines.push(`  paused: ${status.pausedReason}`.slice(0, width));
  lines.push(`  ${summarizeCounts(status.counts)}`);
  const barWidth = Math.max(10, Math.min(40, width - 72));
  for (const phase of status.phases) {
    const members = status.devices.filter((d) => d.phase === phase.index);
    const done = members.filter((d) => DONE.has(d.state)).length;
    const applied = members.filter((d) => d.state === 'applied').length;
    const claimed = members.filter((d) => d.state === 'claimed').length;
    const name = `${phase.index} ${phase.name}`.padEnd(20).slice(0, 20);
    lines.push(`  ${name} ${bar(done, members.length, barWidth)} ${String(done).padStart(4)}/${String(members.length).padEnd(4)} applied ${applied}${claimed ? ` claimed ${claimed}` : ''}  ${phase.stage}${phase.gateOutcome ? ` (${phase.gateOutcome})` : ''}`);
  }
  const shown = [...status.devices].sort((a, b) => deviceOrder(a.state) - deviceOrder(b.state) || a.phase - b.phase || a.id.localeCompare(b.id));
  lines.push(`  ${'DEVICE'.padEnd(16)} ${'PHASE'.padEnd(6)} ${'STATE'.padEnd(16)} NOTE`);
  for (const d of shown.slice(0, maxDevices)) {
    lines.push(`  ${d.id.padEnd(16)} ${String(d.phase < 0 ? '-' : d.phase).padEnd(6)} ${d.state.padEnd(16)} ${d.reason ?? ''}`.slice(0, width));
  }
  if (shown.length > maxDevices) lines.push(`  … ${shown.length - maxDevices} more devices (wavegate status ${status.rolloutId})`);
  return lines.map((line) => (line.length > width ? line.slice(0, width) : line));
}

/** One plain line for logs: state, phase, counts, and the stage of every phase. */
export function plainLine(status: RolloutStatus): string {
  const stages = status.phases.map((p) => `${p.name}:${p.stage}`).join(' ');
  return `[${status.state}] phase ${status.phase}: ${summarizeCounts(status.counts)}${stages ? ` | ${stages}` : ''}${status.pausedReason ? ` | ${status.pausedReason}` : ''}`;
}

/** What a paused rollout is waiting for, and the exact commands that move it on. */
export function pauseLine(status: Pick<RolloutStatus, 'rolloutId' | 'pausedReason'>): string {
  return `paused: ${status.pausedReason ?? 'by an operator'} — to go on: wavegate resume ${status.rolloutId}; to stop: wavegate abort ${status.rolloutId}`;
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
}

/**
 * Poll the rollout's status until it reaches a final state; return it. The in-place redraw moves the
 * cursor up over the previous frame and clears to the end of the screen, so the terminal shows one block.
 */
export async function watchRollout(client: Client, id: string, opts: WatchOptions): Promise<RolloutStatus> {
  const handle = client.workflow.getHandle(id);
  let previousLines = 0;
  let lastPlain = '';
  let wasPaused = false;
  // The rollout's result is its final status: waiting on it (a long poll) ends the watch the moment the
  // workflow closes instead of up to an interval later. A run that closes without one (cancelled,
  // terminated, failed) is read by the query and describe below, as before.
  let closed: Promise<{ status: RolloutStatus } | 'closed'> | undefined = handle.result().then(
    (status: RolloutStatus) => ({ status }),
    () => 'closed' as const,
  );
  let final: RolloutStatus | undefined;
  for (;;) {
    let status: RolloutStatus;
    try {
      // Read as it is meant whichever build answered: an older one says not-for-me and not-started as skipped.
      status = readStatus(final ?? (await handle.query<RolloutStatus>('status')));
    } catch (err) {
      if (err instanceof WorkflowNotFoundError) throw new WavegateError('NOT_FOUND', `no rollout with id "${id}"`);
      throw err;
    }
    if (opts.tty) {
      const rows = opts.rows?.() ?? 40;
      const lines = renderFrame(status, { width: opts.columns?.() ?? 100, maxDevices: Math.max(3, rows - status.phases.length - 8), now: new Date() });
      opts.write(`${previousLines ? `\x1b[${previousLines}A\r` : ''}\x1b[J${lines.join('\n')}\n`);
      previousLines = lines.length;
    } else {
      const line = plainLine(status);
      if (line !== lastPlain) opts.write(`${new Date().toISOString()} ${line}\n`);
      lastPlain = line;
    }
    if (isFinalState(status.state)) return status;
    const paused = status.state === 'paused';
    if (paused && !wasPaused) opts.onPause?.(status);
    wasPaused = paused;
    if (paused && opts.stopOnPause) return status;
    // A workflow closed without reaching a final state (terminated, or failed outside the main path).
    const described = await handle.describe();
    if (described.status.name !== 'RUNNING') return { ...status, state: 'failed', pausedReason: `workflow ${described.status.name.toLowerCase()}` };
    let tick: ReturnType<typeof setTimeout> | undefined;
    const interval = new Promise<'tick'>((r) => (tick = setTimeout(() => r('tick'), opts.intervalMs)));
    const next = await (closed ? Promise.race([interval, closed]) : interval);
    clearTimeout(tick);
    if (next === 'closed') closed = undefined; // no status in the result: the query reads the closed run
    else if (next !== 'tick') {
      final = next.status;
      closed = undefined;
    }
  }
}
