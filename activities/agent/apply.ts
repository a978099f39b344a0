import type { Client } from '@temporalio/client';
import {
  answerTo,
  ageMs,
  envelopeDigestOf,
  isOffline,
  requestIdOf,
  type DesiredRequest,
  type TwinView,
} from '../../core/twin';
import type { DeviceTarget } from '../../core/rollout-state';
import type { ApplyHolder, ApplyResult, RevisionSteps } from '../device-steps';
import { applyResultOf } from './answer';
import { desireOnTwin, readTwin, readTwinRecord } from '../../clients/twin';
import { REPORT_SAFETY_READ_MS, reportWatchOf, type ReportSubscription } from './report-watch';

/**
 * Apply a revision to a `transport: agent` device: set it as the device's desired state on its twin
 * (signal-with-start), then wait for the agent's report answering this request. The device runs the
 * same steps as the SSH path (verify first, apply, verify, marker, under the device's apply lock), so
 * the report maps onto the same results and errors and the workflow handles them unchanged. The worker
 * checks nothing of the envelope here: the AGENT verifies it against its own pins.
 */
export interface TwinApplyOptions {
  client: Client;
  /** The rollout task queue: the twin, when this starts it, runs there. */
  taskQueue: string;
  holder: ApplyHolder;
  /** The rollout that asked (the desired entry names it); null for a convergence. */
  rollout: string | null;
  fromRevision?: number | null;
  /** Return the 'offline' outcome for a device whose agent is not syncing, instead of waiting for it. */
  reportOffline?: boolean;
  /** Return the 'ahead' outcome, asking nothing, for a device whose agent last reported a revision above this (ApplyInput.aheadAbove). */
  aheadAbove?: number;
  heartbeat?: (detail: string) => void;
  signal?: AbortSignal;
  /** With no change heard from the feed, the twin is read again after this long (default REPORT_SAFETY_READ_MS). */
  safetyReadMs?: number;
  now?: () => number;
}

/** `awaited`: an apply activity (the holder) waits for the answer, and the gateway may complete it (DesiredEntry.awaited). */
export function desiredRequestOf(
  steps: RevisionSteps,
  holder: ApplyHolder,
  rollout: string | null,
  fromRevision: number | null,
  awaited = false,
): DesiredRequest {
  return {
    requestId: requestIdOf(holder),
    profile: steps.profile,
    revision: steps.revision,
    steps: publicSteps(steps),
    envelopeDigest: envelopeDigestOf(steps.envelope),
    holder,
    rollout,
    fromRevision,
    ...(awaited ? { awaited } : {}),
  };
}

/** Only what a device may see: the signed content, and payload entries without the worker's file paths. */
function publicSteps(steps: RevisionSteps): RevisionSteps {
  return { ...steps, payload: steps.payload.map(({ source: _source, ...file }) => ({ ...file, source: file.name })) };
}

export async function applyThroughTwin(
  target: DeviceTarget,
  steps: RevisionSteps,
  opts: TwinApplyOptions,
): Promise<ApplyResult> {
  const now = opts.now ?? Date.now;
  const beat = opts.heartbeat ?? (() => {});
  const request = desiredRequestOf(steps, opts.holder, opts.rollout, opts.fromRevision ?? null, true);
  const checks = opts.reportOffline || opts.aheadAbove !== undefined;
  // Subscribed before the first read, so an answer however quick is not missed (activities/agent/report-watch.ts).
  const subscription = reportWatchOf(opts.client).subscribe(target.id);
  let detail = 'desired: waiting for the agent';
  // Heartbeat on a clock of its own: the activity's heartbeat timeout is a few seconds.
  const ticker = setInterval(() => beat(detail), 1_000);
  try {
    // One read before asking: the offline and ahead checks need it, and a retried apply whose agent already
    // answered this request returns that answer, asking nothing again. Without checks, a twin too busy to answer
    // now is read again once the request is sent.
    const first = await readTwin(opts.client, target.id).then(
      (view) => ({ view }),
      (err: unknown) => {
        if (checks) throw err;
        return null;
      },
    );
    const view = first?.view ?? null;
    if (view) {
      const answer = answerTo(view, steps.profile, request.requestId);
      if (answer.state !== 'pending') return applyResultOf(target.id, steps, answer);
    }
    // (A read that failed was tolerated only without checks, so there is nothing to check then.)
    const skipped = checkBeforeAsking(target, steps, request, view, opts, now());
    if (skipped) return skipped;
    beat('desire');
    await desireOnTwin(opts.client, opts.taskQueue, target.id, request);
    // The twin was read before the request was sent: the next read waits for its report to change.
    return await waitForAnswer(target, steps, request, opts, now, subscription, first !== null, (d) => (detail = d));
  } finally {
    clearInterval(ticker);
    subscription.close();
  }
}

/** The outcome that asks nothing of the device (offline, or ahead of the rollout), or null to ask it. */
function checkBeforeAsking(
  target: DeviceTarget,
  steps: RevisionSteps,
  request: DesiredRequest,
  view: TwinView | null,
  opts: TwinApplyOptions,
  nowMs: number,
): ApplyResult | null {
  const alreadyAsked =
    view && Object.hasOwn(view.desired, steps.profile) && view.desired[steps.profile]!.requestId === request.requestId;
  if (alreadyAsked) return null;
  // First contact: an agent that is not syncing would take the request whenever it returns, outside
  // this rollout's budget, so nothing is asked of it; the rollout records it offline.
  if (opts.reportOffline && (!view || isOffline(view, nowMs))) {
    const seen = view?.lastSeenAt ? `last seen ${Math.round(ageMs(view.lastSeenAt, nowMs) / 1000)}s ago` : 'never seen';
    return {
      device: target.id,
      outcome: 'offline',
      steps: [],
      detail: `agent not syncing (${seen}): nothing asked of it`,
    };
  }
  // A device its agent last reported above the rollout's target is left alone (as the SSH path's `ahead`).
  const reported = view?.report?.profiles;
  const marker = reported && Object.hasOwn(reported, steps.profile) ? reported[steps.profile]!.revision : null;
  if (opts.aheadAbove !== undefined && marker !== null && marker > opts.aheadAbove) {
    return {
      device: target.id,
      outcome: 'ahead',
      steps: [],
      detail: `the device is at revision ${marker} (its agent's last report), above r${opts.aheadAbove}`,
    };
  }
  return null;
}

/**
 * Read the twin each time the feed says its report changed (or every safetyReadMs), until the agent's report answers
 * this request. A read after a change reads the twin's own record (the answer is there); one on the safety tick adds
 * the device's presence, for the heartbeat's "seen" and the decision to ask again. A twin too busy to answer a read
 * now is read again at the next change or tick.
 */
async function waitForAnswer(
  target: DeviceTarget,
  steps: RevisionSteps,
  request: DesiredRequest,
  opts: TwinApplyOptions,
  now: () => number,
  subscription: ReportSubscription,
  readBefore: boolean,
  say: (detail: string) => void,
): Promise<ApplyResult> {
  const safetyReadMs = opts.safetyReadMs ?? REPORT_SAFETY_READ_MS;
  const requestId = request.requestId;
  let askedAt = now();
  let askAgainMs = safetyReadMs;
  let heard: 'changed' | 'timeout' | 'first' = readBefore
    ? await subscription.next(safetyReadMs, opts.signal)
    : 'first';
  for (;;) {
    const read = await (heard === 'changed' ? readTwinRecord : readTwin)(opts.client, target.id).then(
      (view) => ({ view }),
      (err: unknown) => ({ error: (err as Error).message }),
    );
    const view = 'view' in read ? read.view : null;
    const answer = view ? answerTo(view, steps.profile, requestId) : { state: 'pending' as const };
    if (answer.state !== 'pending') return applyResultOf(target.id, steps, answer);
    say(
      'view' in read ? waitingDetail(view, steps.profile, now()) : `twin not readable now: ${read.error.slice(0, 200)}`,
    );
    // Nothing heard for a while and no answer from the agent to this request: ask again (the same request, so
    // nothing runs twice), which stamps the twin's change anew for any gateway that missed the first stamp. An
    // agent still applying says nothing until it is done, so the asks back off (30 s, 1, 2, 4 ... 10 min apart).
    if (heard === 'timeout' && view && now() - askedAt >= askAgainMs) {
      await desireOnTwin(opts.client, opts.taskQueue, target.id, request);
      askedAt = now();
      askAgainMs = Math.min(askAgainMs * 2, 600_000);
    }
    heard = await subscription.next('view' in read ? safetyReadMs : Math.min(safetyReadMs, 5_000), opts.signal);
  }
}

function waitingDetail(view: TwinView | null, profile: string, nowMs: number): string {
  const report = view?.report?.profiles[profile];
  const seen = view?.lastSeenAt ? `seen ${Math.round(ageMs(view.lastSeenAt, nowMs) / 1000)}s ago` : 'never seen';
  return `agent ${report?.state ?? 'idle'}, ${seen}`;
}
