/**
 * Where a rollout's time went, from its history (a file `sshd-compare.ts` keeps per run, the JSON of
 * `fetchHistory()`): every activity, timer and child in the order scheduled, consecutive ones of the
 * same type folded into one line with the span they were scheduled over and the span they closed over,
 * offsets from the first event. Read it to find what is idle or serial on the critical path.
 *
 *   npx tsx bench/history-timeline.ts /tmp/wavegate-sshd-bench-100/wavegate/history-run1.json
 */
import { readFileSync } from 'node:fs';

interface Ev {
  eventId: string;
  eventTime: string | { seconds: string | number; nanos?: number };
  eventType: string | number;
  [k: string]: unknown;
}

const file = process.argv[2];
if (!file) {
  console.error('usage: npx tsx bench/history-timeline.ts <history.json>');
  process.exit(2);
}
const history = JSON.parse(readFileSync(file, 'utf8')) as { events: Ev[] };
const ms = (t: Ev['eventTime']): number =>
  typeof t === 'string' ? Date.parse(t) : Number(t.seconds) * 1000 + Math.floor((t.nanos ?? 0) / 1e6);
const t0 = ms(history.events[0]!.eventTime);
const at = (e: Ev) => ((ms(e.eventTime) - t0) / 1000).toFixed(2);
const typeName = (e: Ev): string => String(e.eventType).replace(/^EVENT_TYPE_/, '');

// biome-ignore lint/suspicious/noExplicitAny: a report reading whichever attributes an event type has, field by field
type Attributes = Record<string, any>;
/** An event's attributes object (the one `*EventAttributes` field it carries). */
const attrs = (e: Ev): Attributes => {
  for (const [k, v] of Object.entries(e)) if (k.endsWith('EventAttributes') && v) return v as Attributes;
  return {};
};

interface Row {
  kind: string;
  scheduled: number;
  closed?: number;
}
const rows: Row[] = [];
const byScheduled = new Map<string, Row>();
for (const e of history.events) {
  const type = typeName(e);
  const a = attrs(e);
  const t = ms(e.eventTime) - t0;
  if (/ACTIVITY_TASK_SCHEDULED|ActivityTaskScheduled/i.test(type)) {
    const row = { kind: `activity ${a.activityType?.name ?? '?'}`, scheduled: t };
    rows.push(row);
    byScheduled.set(String(e.eventId), row);
  } else if (/TIMER_STARTED|TimerStarted/i.test(type)) {
    const row = { kind: `timer ${a.startToFireTimeout?.seconds ?? '?'}s`, scheduled: t };
    rows.push(row);
    byScheduled.set(`timer:${a.timerId}`, row);
  } else if (/START_CHILD_WORKFLOW_EXECUTION_INITIATED|StartChildWorkflowExecutionInitiated/i.test(type)) {
    const row = { kind: `child ${a.workflowType?.name ?? '?'}`, scheduled: t };
    rows.push(row);
    byScheduled.set(String(e.eventId), row);
  } else if (/TIMER_FIRED|TimerFired/i.test(type)) {
    const row = byScheduled.get(`timer:${a.timerId}`);
    if (row) row.closed = t;
  } else if (
    a.scheduledEventId !== undefined &&
    /ACTIVITY_TASK_(COMPLETED|FAILED|TIMED_OUT|CANCELED)|ActivityTask(Completed|Failed|TimedOut|Canceled)/i.test(type)
  ) {
    const row = byScheduled.get(String(a.scheduledEventId));
    if (row) row.closed = t;
  } else if (
    a.initiatedEventId !== undefined &&
    /CHILD_WORKFLOW_EXECUTION_(COMPLETED|FAILED|CANCELED|TERMINATED|TIMED_OUT)|ChildWorkflowExecution(Completed|Failed|Canceled|Terminated|TimedOut)/i.test(
      type,
    )
  ) {
    const row = byScheduled.get(String(a.initiatedEventId));
    if (row) row.closed = t;
  }
}
const s = (x: number) => (x / 1000).toFixed(2);
let i = 0;
console.log(
  `${history.events.length} events, first ${at(history.events[0]!)} s, last ${at(history.events[history.events.length - 1]!)} s`,
);
while (i < rows.length) {
  let j = i;
  while (j + 1 < rows.length && rows[j + 1]!.kind === rows[i]!.kind) j++;
  const group = rows.slice(i, j + 1);
  const closed = group.map((r) => r.closed).filter((c): c is number => c !== undefined);
  const sched = `${s(group[0]!.scheduled)}${group.length > 1 ? `–${s(group[group.length - 1]!.scheduled)}` : ''}`;
  const done = closed.length ? `${s(Math.min(...closed))}–${s(Math.max(...closed))}` : 'open';
  console.log(
    `${String(group.length).padStart(4)} × ${group[0]!.kind.padEnd(32)} scheduled ${sched.padEnd(13)} closed ${done}`,
  );
  i = j + 1;
}
