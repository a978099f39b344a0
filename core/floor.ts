import { formatDurationMs } from './duration';

/**
 * A device's floor for a profile: the revision the device itself confirmed for a rollout (verified,
 * marker written), tagged with that rollout and run. Nothing below it is applied again (a confirmed
 * release is undone by rolling forward to a higher revision), with two exceptions the floor itself makes
 * checkable, both only back to its `from`:
 *   - the compensation of the very rollout and run that raised it (rollback on a failed gate, abort with
 *     rollback, cancel, deadline rollback, a canary put back);
 *   - a `wavegate revert` of that rollout and run while its revert window is open: the floor carries the
 *     window's length (`window`), the revert names when the rollout closed (`closedAt`, which the worker
 *     reads from Temporal, never from the revert's input), so the window runs from the rollout's completion.
 * Both only while the floor's **way back** is open: `wayBack` ms from `at`, the device's own clock when it
 * confirmed the revision, `wayBack` taken from the revision's signed body (or DEVICE_WAY_BACK_MS when it
 * says nothing) by the worker or agent that verified it. A request can name the rollout and run (they are
 * no secret), but it cannot move `at` or lengthen `wayBack`. And only once: a floor gone below is replaced
 * by one at the revision it went back to, with no way back (stepDownFloor), and no path removes a floor.
 * Pure: the device stores the text (`floor` under the profile's directory), the worker or agent decides.
 *
 * Floors written by a completed rollout's floor pass, before the floor moved into the apply, carry no
 * `run`: for them the old rule holds (back to `from` until `revertUntil`, for anyone).
 */
export interface DeviceFloor {
  revision: number;
  /** The revision the raising apply replaced: the only one a compensation or revert may go back to. */
  from: number;
  /**
   * Legacy floors (no `run`): epoch milliseconds (worker clock) until which going back to `from` is
   * allowed; 0: never. New floors write 0, so a worker from before reads them as strict.
   */
  revertUntil: number;
  /** The rollout that raised it (its top-level workflow id). */
  rollout: string;
  /** The run of that rollout: compensation and revert must name this exact run. Absent: a legacy floor. */
  run?: string;
  /** The raising rollout's revert window in ms (0: none): a revert may go back until `closedAt + window`. */
  window?: number;
  /** When the device confirmed it (epoch ms, the device's own clock; floors before the way back: the worker's). */
  at?: number;
  /**
   * How long after `at` the rollout that raised it may still take the device back to `from` (ms): the
   * raised revision's signed `wayBack`, or DEVICE_WAY_BACK_MS when it signs none. Absent (floors written
   * before it): DEVICE_WAY_BACK_MS.
   */
  wayBack?: number;
}

/**
 * What one apply asks of the floor, carried with its steps (RevisionSteps.floor) to whichever channel
 * runs it; absent (histories recorded before the floor moved into the apply): the floor is only checked.
 */
export interface FloorIntent {
  /** The rollout (top-level workflow id) and run this apply is for: the floor it raises is tagged with them. */
  rollout: string;
  run: string;
  /**
   * Raise the floor to the steps' revision once the apply is confirmed (verify passed, marker written):
   * `from` is the revision a compensation or revert may go back to (the rollout's fromRevision; the
   * target itself for a revert or a convergence: no way back), `windowMs` the revert window. A device
   * found already in place gets its floor raised only when it was below, with no way back.
   */
  raise?: { from: number; windowMs: number };
  /** Go below the floor to its `from`: this apply is that rollout's compensation, or a revert of it. */
  below?: FloorExemption;
}

export type FloorExemption =
  /** The compensation of the rollout and run that raised the floor; on success the floor it replaced comes back. */
  | { kind: 'compensation'; rollout: string; run: string }
  /** A revert of that completed rollout and run, which closed at `closedAt` (epoch ms, from Temporal). */
  | { kind: 'revert'; rollout: string; run: string; closedAt: number };

/** The spec's `revertWindow` when a rollout's input carries none (recorded before the field existed). */
export const DEFAULT_REVERT_WINDOW_MS = 86_400_000;

/**
 * The device-side maximum of a floor's way back when the raised revision signs no `wayBack`: a week from
 * the device's own confirmation covers a rollout's gates and pauses plus the default 24 h revert window.
 */
export const DEVICE_WAY_BACK_MS = 7 * 86_400_000;

/** The longest `wayBack` a revision may sign (a 30-day revert window after a rollout of weeks). */
export const MAX_WAY_BACK_MS = 90 * 86_400_000;

/** The way back a confirmed apply of `revision` writes: its signed `wayBack`, else the device maximum. */
export function wayBackOf(revision: { wayBack?: number } | undefined): number {
  const signed = revision?.wayBack;
  return signed !== undefined && Number.isSafeInteger(signed) && signed >= 0
    ? Math.min(signed, MAX_WAY_BACK_MS)
    : DEVICE_WAY_BACK_MS;
}

/**
 * Until when a revert to `from` stays allowed, for a rollout that closed at `closedAt` (epoch ms) with a
 * window of `revertWindowMs` (0: never). `wavegate revert` asks it before it starts anything; the
 * devices ask the same of the floor they hold (floorRefusal).
 */
export function revertUntilOf(closedAt: number, revertWindowMs: number): number {
  return revertWindowMs > 0 ? closedAt + revertWindowMs : 0;
}

/** A rollout id or run as the floor file keeps it: characters that need no quoting anywhere, at most 200. */
export function floorTag(value: string): string {
  return value.replace(/[^A-Za-z0-9:._/@+-]/g, '_').slice(0, 200);
}

/** The floor file, `key=value` lines (the last of a key wins); unreadable or absent: null (no floor). */
export function parseFloor(text: string): DeviceFloor | null {
  const fields = new Map<string, string>();
  for (const line of text.split('\n')) {
    const at = line.indexOf('=');
    if (at > 0) fields.set(line.slice(0, at), line.slice(at + 1));
  }
  const num = (k: string) => (/^\d{1,15}$/.test(fields.get(k) ?? '') ? Number(fields.get(k)) : undefined);
  const revision = num('revision');
  if (revision === undefined) return null;
  const run = fields.get('run');
  const window = num('window');
  const at = num('at');
  const wayBack = num('wayBack');
  return {
    revision,
    from: num('from') ?? revision,
    revertUntil: num('revertUntil') ?? 0,
    rollout: fields.get('rollout') ?? '',
    ...(run ? { run } : {}),
    ...(window !== undefined ? { window } : {}),
    ...(at !== undefined ? { at } : {}),
    ...(wayBack !== undefined ? { wayBack } : {}),
  };
}

export function formatFloor(floor: DeviceFloor): string {
  const lines = [
    `revision=${floor.revision}`,
    `from=${floor.from}`,
    `revertUntil=${floor.revertUntil}`,
    `rollout=${floorTag(floor.rollout)}`,
  ];
  if (floor.run !== undefined) lines.push(`run=${floorTag(floor.run)}`);
  if (floor.window !== undefined) lines.push(`window=${floor.window}`);
  if (floor.wayBack !== undefined) lines.push(`wayBack=${floor.wayBack}`);
  // Last: the device writes it, on its own clock, after the rest (device/transport/apply-script.ts).
  if (floor.at !== undefined) lines.push(`at=${floor.at}`);
  return `${lines.join('\n')}\n`;
}

/**
 * The floor a confirmed apply writes (FloorIntent.raise), at `now` on the device's clock, with the way
 * back the verified revision signs (wayBackOf). Over an existing floor the device keeps `from` at or
 * above that floor's revision (the apply script does, as it knows the floor it replaces): no raise opens
 * a way below a floor already there (a converge of drifted devices, a forged raise).
 */
export function raisedFloor(
  intent: FloorIntent & { raise: NonNullable<FloorIntent['raise']> },
  revision: number,
  now: number,
  wayBackMs: number,
): DeviceFloor {
  const from = Math.min(intent.raise.from, revision);
  return {
    revision,
    from,
    revertUntil: 0,
    rollout: floorTag(intent.rollout),
    run: floorTag(intent.run),
    window: intent.raise.windowMs,
    at: now,
    // A floor raised with no way back (a revert, a convergence) says so in both fields.
    wayBack: from === revision ? 0 : wayBackMs,
  };
}

/**
 * The floor a device holds once it went below a floor to its `from` (the compensation or the revert of
 * the rollout that raised it): at the revision it went back to, with no way back. So a floor goes down
 * one step, once: whatever a later request names, nothing below `revision` is applied again.
 */
export function stepDownFloor(rollout: string, run: string, revision: number, now: number): DeviceFloor {
  return {
    revision,
    from: revision,
    revertUntil: 0,
    rollout: floorTag(rollout),
    run: floorTag(run),
    window: 0,
    at: now,
    wayBack: 0,
  };
}

/**
 * Null when applying `revision` over this floor is allowed at `now` for an apply that may go below it
 * as `below` says; else why not, for the operator.
 */
export function floorRefusal(
  floor: DeviceFloor | null,
  revision: number,
  now: number,
  below?: FloorExemption,
): string | null {
  if (!floor || revision >= floor.revision) return null;
  const by = `${floor.rollout || 'a completed rollout'}${floor.run ? ` (run ${floor.run})` : ''}`;
  const refuse = (why: string) =>
    `r${revision} is below the device's floor r${floor.revision}, confirmed by ${by}${why}: roll forward instead (sign a revision above r${floor.revision} with the content you want)`;
  if (floor.run === undefined) {
    // A legacy floor (written by a completed rollout's floor pass): back to `from` inside its window, for anyone.
    if (revision === floor.from && now < floor.revertUntil) return null;
    if (revision !== floor.from) return refuse('');
    return refuse(
      floor.revertUntil > 0
        ? ` (its revert window closed at ${new Date(floor.revertUntil).toISOString()})`
        : ' (it was confirmed with no revert window)',
    );
  }
  if (revision !== floor.from)
    return refuse(
      floor.from === floor.revision
        ? ''
        : ` (only r${floor.from}, the revision that rollout replaced, may come back, and only by its compensation or its revert)`,
    );
  if (!below)
    return refuse(
      " (only that rollout's own compensation, or a revert of it inside its revert window, may go below it)",
    );
  if (floorTag(below.rollout) !== floor.rollout || floorTag(below.run) !== floor.run) {
    return refuse(
      ` (this ${below.kind === 'revert' ? 'revert' : 'compensation'} is for ${below.rollout} run ${below.run}, not for the rollout that raised the floor)`,
    );
  }
  const wayBack = Math.min(floor.wayBack ?? DEVICE_WAY_BACK_MS, MAX_WAY_BACK_MS);
  if (floor.at === undefined) return refuse(' (it records no time of confirmation to count its way back from)');
  if (wayBack <= 0) return refuse(` (r${floor.revision} signs no way back: wayBack 0)`);
  if (now >= floor.at + wayBack)
    return refuse(
      ` (its way back closed at ${new Date(floor.at + wayBack).toISOString()}, ${formatDurationMs(wayBack)} after this device confirmed it)`,
    );
  if (below.kind === 'compensation') return null;
  const windowMs = floor.window ?? 0;
  if (windowMs <= 0) return refuse(' (it was confirmed with no revert window)');
  if (!Number.isSafeInteger(below.closedAt) || below.closedAt < (floor.at ?? 0))
    return refuse(` (the revert says the rollout closed at ${below.closedAt}, before this device confirmed it)`);
  const until = below.closedAt + windowMs;
  if (now < until) return null;
  return refuse(` (its revert window closed at ${new Date(until).toISOString()})`);
}
