import type { Client } from '@temporalio/client';
import { defaultPayloadConverter } from '@temporalio/common';
import type { History } from '@temporalio/common/lib/proto-utils';
import { temporal } from '@temporalio/proto';

/**
 * Walking workflow histories for the scale limits in docs/architecture.md: an execution keeps its history under
 * 10,240 events and its pending activities (and children) in the hundreds. "Pending" is computed over
 * the history itself: an activity is pending from ActivityTaskScheduled until it completes, fails,
 * times out or is cancelled (retries stay pending: the server records one Started per final attempt);
 * a child is pending from StartChildWorkflowExecutionInitiated until its start fails or it closes.
 * Shared by the scale tests, which assert these numbers, and the benchmarks in bench/, which report them.
 */

const E = temporal.api.enums.v1.EventType;
type HistoryEvent = temporal.api.history.v1.IHistoryEvent;

/** The server's warning threshold for one execution's history (stay under it). */
export const HISTORY_EVENT_LIMIT = 10_240;
/** What this project aims for per execution (the server's hard limit is 2,000). */
export const PENDING_LIMIT = 500;

export interface HistoryShape {
  workflowId: string;
  events: number;
  /** Encoded size of the whole history (the server's hard limit is 50 MB). */
  bytes: number;
  activitiesScheduled: number;
  maxPendingActivities: number;
  childrenInitiated: number;
  maxPendingChildren: number;
  /** The longest workflow task (started → completed): the worker's time to run one activation. */
  maxWorkflowTaskMs: number;
}

const ACTIVITY_CLOSED = new Set([
  E.EVENT_TYPE_ACTIVITY_TASK_COMPLETED,
  E.EVENT_TYPE_ACTIVITY_TASK_FAILED,
  E.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT,
  E.EVENT_TYPE_ACTIVITY_TASK_CANCELED,
]);
const CHILD_CLOSED = new Set([
  E.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_FAILED,
  E.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED,
  E.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_FAILED,
  E.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_CANCELED,
  E.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_TIMED_OUT,
  E.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_TERMINATED,
]);

function millis(t: temporal.api.history.v1.IHistoryEvent['eventTime']): number {
  return Number(String(t?.seconds ?? 0)) * 1000 + Math.floor((t?.nanos ?? 0) / 1e6);
}

function events(history: History): HistoryEvent[] {
  return history.events ?? [];
}

/** Event count and the peak number of pending activities and children over one execution's history. */
export function historyShape(workflowId: string, history: History): HistoryShape {
  let pendingActivities = 0;
  let pendingChildren = 0;
  let taskStartedAt: number | undefined;
  const shape: HistoryShape = {
    workflowId,
    events: 0,
    bytes: temporal.api.history.v1.History.encode(history).finish().length,
    activitiesScheduled: 0,
    maxPendingActivities: 0,
    childrenInitiated: 0,
    maxPendingChildren: 0,
    maxWorkflowTaskMs: 0,
  };
  for (const event of events(history)) {
    shape.events += 1;
    const type = event.eventType ?? E.EVENT_TYPE_UNSPECIFIED;
    if (type === E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED) {
      shape.activitiesScheduled += 1;
      shape.maxPendingActivities = Math.max(shape.maxPendingActivities, ++pendingActivities);
    } else if (ACTIVITY_CLOSED.has(type)) {
      pendingActivities -= 1;
    } else if (type === E.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED) {
      shape.childrenInitiated += 1;
      shape.maxPendingChildren = Math.max(shape.maxPendingChildren, ++pendingChildren);
    } else if (CHILD_CLOSED.has(type)) {
      pendingChildren -= 1;
    } else if (type === E.EVENT_TYPE_WORKFLOW_TASK_STARTED) {
      taskStartedAt = millis(event.eventTime);
    } else if (type === E.EVENT_TYPE_WORKFLOW_TASK_COMPLETED && taskStartedAt !== undefined) {
      shape.maxWorkflowTaskMs = Math.max(shape.maxWorkflowTaskMs, millis(event.eventTime) - taskStartedAt);
      taskStartedAt = undefined;
    }
  }
  return shape;
}

/** Workflow ids of the children an execution started (from its ChildWorkflowExecutionStarted events). */
export function childWorkflowIds(history: History): string[] {
  return events(history)
    .filter((e) => e.eventType === E.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_STARTED)
    .map((e) => e.childWorkflowExecutionStartedEventAttributes?.workflowExecution?.workflowId ?? '')
    .filter((id) => id !== '');
}

/**
 * The shape of a workflow and of every descendant it started, parent first (children found through the
 * parent's own ChildWorkflowExecutionStarted events, so none is missed or borrowed from another run).
 */
export async function executionTreeShapes(
  client: Client,
  workflowId: string,
  onHistory?: (workflowId: string, history: History) => void,
): Promise<HistoryShape[]> {
  const out: HistoryShape[] = [];
  const queue = [workflowId];
  while (queue.length > 0) {
    const id = queue.shift()!;
    const history = await client.workflow.getHandle(id).fetchHistory();
    onHistory?.(id, history);
    out.push(historyShape(id, history));
    queue.push(...childWorkflowIds(history));
  }
  return out;
}

export interface ActivityRun {
  scheduledEventId: number;
  activityType: string;
  /** The summary shown in the Web UI (e.g. `apply r2 → edge-05 (bulk 1)`). */
  summary: string | undefined;
  /** Decoded arguments. */
  input: unknown[];
  /** The attempt recorded by ActivityTaskStarted (the final attempt), if it started. */
  attempt: number | undefined;
  /** How many ActivityTaskStarted events the history holds for it. */
  startedEvents: number;
  outcome: 'completed' | 'failed' | 'timed-out' | 'canceled' | 'pending';
  failure?: { message: string; type: string | undefined; nonRetryable: boolean; retryState: string };
}

const num = (v: unknown): number => Number(String(v ?? 0));

function decode(payload: temporal.api.common.v1.IPayload | null | undefined): unknown {
  return payload ? defaultPayloadConverter.fromPayload(payload) : undefined;
}

/** The events that close an activity with nothing more to read than its outcome: their attributes, and that outcome. */
const CLOSED_AS: Partial<Record<number, [keyof HistoryEvent, ActivityRun['outcome']]>> = {
  [E.EVENT_TYPE_ACTIVITY_TASK_COMPLETED]: ['activityTaskCompletedEventAttributes', 'completed'],
  [E.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT]: ['activityTaskTimedOutEventAttributes', 'timed-out'],
  [E.EVENT_TYPE_ACTIVITY_TASK_CANCELED]: ['activityTaskCanceledEventAttributes', 'canceled'],
};

/** Every activity of one execution, with its decoded input, final attempt and outcome. */
export function activityRuns(history: History): ActivityRun[] {
  const runs = new Map<number, ActivityRun>();
  for (const event of events(history)) {
    const id = num(event.eventId);
    const closed = CLOSED_AS[event.eventType ?? 0];
    if (closed) {
      const attributes = event[closed[0]] as { scheduledEventId?: unknown } | null | undefined;
      const run = runs.get(num(attributes?.scheduledEventId));
      if (run) run.outcome = closed[1];
      continue;
    }
    switch (event.eventType) {
      case E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED: {
        const a = event.activityTaskScheduledEventAttributes!;
        const summary = decode(event.userMetadata?.summary);
        runs.set(id, {
          scheduledEventId: id,
          activityType: a.activityType?.name ?? '',
          summary: typeof summary === 'string' ? summary : undefined,
          input: (a.input?.payloads ?? []).map((p) => decode(p)),
          attempt: undefined,
          startedEvents: 0,
          outcome: 'pending',
        });
        break;
      }
      case E.EVENT_TYPE_ACTIVITY_TASK_STARTED: {
        const a = event.activityTaskStartedEventAttributes!;
        const run = runs.get(num(a.scheduledEventId));
        if (run) {
          run.startedEvents += 1;
          run.attempt = a.attempt ?? undefined;
        }
        break;
      }
      case E.EVENT_TYPE_ACTIVITY_TASK_FAILED: {
        const a = event.activityTaskFailedEventAttributes!;
        const run = runs.get(num(a.scheduledEventId));
        if (run) {
          run.outcome = 'failed';
          run.failure = {
            message: a.failure?.message ?? '',
            type: a.failure?.applicationFailureInfo?.type ?? undefined,
            nonRetryable: a.failure?.applicationFailureInfo?.nonRetryable ?? false,
            retryState: temporal.api.enums.v1.RetryState[a.retryState ?? 0] ?? String(a.retryState),
          };
        }
        break;
      }
    }
  }
  return [...runs.values()];
}
