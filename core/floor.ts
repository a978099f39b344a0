/**
 * A device's floor for a profile: the revision a *completed* rollout confirmed on it. Nothing below it
 * is applied again (a completed release is undone by rolling forward to a higher revision), with one
 * exception the floor itself records: going back to the rollout's `from` revision until `revertUntil`
 * (the spec's `revertWindow`). Compensation inside a rollout never meets the floor: the floor moves only
 * when a rollout completes. Pure: the device stores the text, the worker decides.
 */
export interface DeviceFloor {
  revision: number;
  /** The revision the completing rollout replaced. */
  from: number;
  /** Epoch milliseconds (worker clock) until which going back to `from` is allowed; 0: never. */
  revertUntil: number;
  /** The rollout that confirmed it (for the operator reading the device). */
  rollout: string;
}

/** The spec's `revertWindow` when a rollout's input carries none (recorded before the field existed). */
export const DEFAULT_REVERT_WINDOW_MS = 86_400_000;

/**
 * Until when a revert to `from` stays allowed, for a floor confirmed at `confirmedAt` (epoch ms) with a
 * window of `revertWindowMs` (0: never). The worker writes this on each device; `wavegate revert` asks
 * the same question of the rollout's close time before it starts anything.
 */
export function revertUntilOf(confirmedAt: number, revertWindowMs: number): number {
  return revertWindowMs > 0 ? confirmedAt + revertWindowMs : 0;
}

/** The floor file, `key=value` lines; unreadable or absent: null (no floor). */
export function parseFloor(text: string): DeviceFloor | null {
  const fields = new Map<string, string>();
  for (const line of text.split('\n')) {
    const at = line.indexOf('=');
    if (at > 0) fields.set(line.slice(0, at), line.slice(at + 1));
  }
  const num = (k: string) => (/^\d+$/.test(fields.get(k) ?? '') ? Number(fields.get(k)) : undefined);
  const revision = num('revision');
  if (revision === undefined) return null;
  return { revision, from: num('from') ?? revision, revertUntil: num('revertUntil') ?? 0, rollout: fields.get('rollout') ?? '' };
}

export function formatFloor(floor: DeviceFloor): string {
  // The rollout id is for people; keep it to characters that need no quoting anywhere.
  const rollout = floor.rollout.replace(/[^A-Za-z0-9:._/@+-]/g, '_').slice(0, 200);
  return `revision=${floor.revision}\nfrom=${floor.from}\nrevertUntil=${floor.revertUntil}\nrollout=${rollout}\n`;
}

/** Null when applying `revision` over this floor is allowed at `now`; else why not, for the operator. */
export function floorRefusal(floor: DeviceFloor | null, revision: number, now: number): string | null {
  if (!floor || revision >= floor.revision) return null;
  if (revision === floor.from && now < floor.revertUntil) return null;
  const window =
    revision === floor.from
      ? floor.revertUntil > 0
        ? ` (its revert window closed at ${new Date(floor.revertUntil).toISOString()})`
        : ' (it was confirmed with no revert window)'
      : '';
  return `r${revision} is below the device's floor r${floor.revision}, confirmed by ${floor.rollout || 'a completed rollout'}${window}: roll forward instead (sign a revision above r${floor.revision} with the content you want)`;
}
