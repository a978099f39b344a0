/**
 * Maintenance windows (the spec's `window`): no device starts outside one; the workflow sleeps until the
 * next opening. Pure: the caller passes the time (workflow time inside workflows).
 */
export interface MaintenanceWindow {
  days: Array<'mon' | 'tue' | 'wed' | 'thu' | 'fri' | 'sat' | 'sun'>;
  start: string; // HH:MM local
  end: string; // HH:MM local; end < start means the window runs past midnight
  timezone: string;
}

const DAY_NAMES = ['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'] as const;

function localParts(ms: number, timeZone: string): { day: (typeof DAY_NAMES)[number]; minutes: number } {
  const parts = new Intl.DateTimeFormat('en-US', {
    timeZone,
    weekday: 'short',
    hour: '2-digit',
    minute: '2-digit',
    hourCycle: 'h23',
  }).formatToParts(new Date(ms));
  const get = (type: string) => parts.find((p) => p.type === type)!.value;
  return {
    day: get('weekday').toLowerCase().slice(0, 3) as (typeof DAY_NAMES)[number],
    minutes: Number(get('hour')) * 60 + Number(get('minute')),
  };
}

function toMinutes(hhmm: string): number {
  const [h, m] = hhmm.split(':').map(Number);
  return h! * 60 + m!;
}

export function insideWindow(ms: number, window: MaintenanceWindow): boolean {
  const { day, minutes } = localParts(ms, window.timezone);
  const start = toMinutes(window.start);
  const end = toMinutes(window.end);
  if (start === end) return window.days.includes(day); // whole day
  if (start < end) return window.days.includes(day) && minutes >= start && minutes < end;
  // Past midnight: the evening part belongs to `day`, the early part to the day before.
  const yesterday = DAY_NAMES[(DAY_NAMES.indexOf(day) + 6) % 7]!;
  return (window.days.includes(day) && minutes >= start) || (window.days.includes(yesterday) && minutes < end);
}

/** Milliseconds from `ms` until the window is open (0 when it is open now). */
export function msUntilWindowOpens(ms: number, window: MaintenanceWindow): number {
  if (insideWindow(ms, window)) return 0;
  // Step minute by minute from the next whole minute; a week bounds the search.
  const first = Math.ceil(ms / 60_000) * 60_000;
  for (let t = first; t <= ms + 8 * 86_400_000; t += 60_000) {
    if (insideWindow(t, window)) return t - ms;
  }
  throw new Error(`maintenance window ${JSON.stringify(window)} never opens`);
}
