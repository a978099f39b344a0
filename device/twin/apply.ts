import type { Client } from '@temporalio/client';
import {
  answerTo,
  ageMs,
  askDecision,
  envelopeDigestOf,
  requestIdOf,
  type DesiredRequest,
  type TwinAskAnswer,
  type TwinView,
} from '../../core/twin';
import type { DeviceTarget } from '../../core/rollout-state';
import type { ApplyHolder, ApplyResult, RevisionSteps } from '../steps';
import { applyResultOf, enrolledAgentKey, type AnswerReceiptCheck } from './answer';
import { agentTrustNote } from './board';
import { askTwin, desireOnTwin, readTwin, readTwinRecord } from '../../clients/twin';
import { readSeenOne } from '../../clients/presence';
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
  /** The rollout's phase index the request is for (ApplyContext.phase): the desired entry carries it to the agent's receipt. */
  phase?: number;
  /** Where an agent's receipt that fails the worker's check is said (default: nowhere). */
  log?: (line: string) => void;
  heartbeat?: (detail: string) => void;
  signal?: AbortSignal;
  /** With no change heard from the feed, the twin is read again after this long (default REPORT_SAFETY_READ_MS). */
  safetyReadMs?: number;
  now?: () => number;
}

/**
 * `awaited`: an apply activity (the holder) waits for the answer, and the gateway may complete it (DesiredEntry.awaited).
 * `phase`: the rollout's phase index the request is for (the agent's receipt names it).
 */
export function desiredRequestOf(
  steps: RevisionSteps,
  holder: ApplyHolder,
  rollout: string | null,
  fromRevision: number | null,
  awaited = false,
  phase?: number,
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
    ...(phase !== undefined ? { phase } : {}),
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
  // Awaited: the gateway that writes the agent's answer completes this activity by its id (gateway/answers.ts),
  // the first route an answer takes; this apply then learns at a heartbeat that it was answered elsewhere.
  const request = desiredRequestOf(steps, opts.holder, opts.rollout, opts.fromRevision ?? null, true, opts.phase);
  // The agent's receipt is checked against this request and the device's enrolled key (its inventory agentKey).
  const check: AnswerReceiptCheck & { request: DesiredRequest } = {
    request,
    key: enrolledAgentKey(target.agentKey),
    log: opts.log ?? (() => {}),
  };
  // Subscribed before asking, so an answer however quick is not missed (device/twin/report-watch.ts). An answer
  // written while no attempt waited (a worker restarting) is the twin's answer to the retried attempt's ask.
  const subscription = reportWatchOf(opts.client).subscribe(target.id);
  let detail = 'desired: waiting for the agent';
  // Heartbeat on a clock of its own: the activity's heartbeat timeout is a few seconds.
  const ticker = setInterval(() => beat(detail), 1_000);
  try {
    // The checks before asking and the desire in one round trip: a retried apply whose agent already answered
    // this request gets that answer, asking nothing again (core/twin.ts `askDecision`).
    const asked = await askOnce(target.id, request, opts, now, (d) => (detail = d));
    if (asked.decision.kind !== 'asked') return askedNothing(target, steps, asked.decision, check);
    return await waitForAnswer(target, steps, check, opts, now, subscription, asked.readBefore, (d) => (detail = d));
  } finally {
    clearInterval(ticker);
    subscription.close();
  }
}

/**
 * Ask the twin (`twinAsk`, one update: the twin decides the checks against its record); a device with no twin, or a
 * twin on a build without `twinAsk`, is read then signalled as before. `readBefore`: the twin's record was read
 * (or answered) before the request was sent, so the next read waits for its report to change.
 */
async function askOnce(
  deviceId: string,
  request: DesiredRequest,
  opts: TwinApplyOptions,
  now: () => number,
  say: (detail: string) => void,
): Promise<{ decision: TwinAskAnswer; readBefore: boolean }> {
  const checks = { reportOffline: opts.reportOffline, aheadAbove: opts.aheadAbove };
  // The presence mark only matters to the offline check (an idle agent's syncs stay in the gateway). A presence
  // shard that does not answer must not stop the rollout (seen at 10,000 agents: one shard wedged in the worker by
  // the SDK, every query to it refused with "consistent query buffer is full", and every apply retrying on it): the
  // device is then asked without the offline check, so an agent in fact offline holds its slot until applyTimeout
  // instead of being skipped, and nothing is skipped that was online.
  const presence = opts.reportOffline
    ? await readSeenOne(opts.client, deviceId).then(
        (mark) => ({ mark: mark ?? null }),
        (err: Error) => ({ error: err.message }),
      )
    : null;
  if (presence && 'error' in presence)
    say(`presence not readable (${presence.error.slice(0, 200)}): asked without the offline check`);
  const seen = presence && 'mark' in presence ? presence.mark : null;
  const sentAt = new Date(now()).toISOString();
  const decision = await askTwin(opts.client, deviceId, {
    request: { ...request, sentAt },
    ...(seen ? { seen } : {}),
    ...(presence && 'mark' in presence ? { reportOffline: true } : {}),
    ...(opts.aheadAbove !== undefined ? { aheadAbove: opts.aheadAbove } : {}),
  });
  if (decision) return { decision, readBefore: true };
  // Without checks, a twin too busy to answer a read now is read again once the request is sent.
  const first = await readTwin(opts.client, deviceId).then(
    (view) => ({ view }),
    (err: unknown) => {
      if (checks.reportOffline || checks.aheadAbove !== undefined) throw err;
      return null;
    },
  );
  const read = first ? askDecision(first.view, { ...checks, request }, now()) : ({ kind: 'asked' } as const);
  if (read.kind === 'asked') await desireOnTwin(opts.client, opts.taskQueue, deviceId, request);
  return { decision: read, readBefore: first !== null };
}

/** The result of an ask that asked nothing: the agent's earlier answer to this request, or offline, or ahead. */
function askedNothing(
  target: DeviceTarget,
  steps: RevisionSteps,
  decision: Exclude<TwinAskAnswer, { kind: 'asked' }>,
  check: AnswerReceiptCheck,
): ApplyResult {
  if (decision.kind === 'answered') return applyResultOf(target.id, steps, decision.answer, check);
  return { device: target.id, outcome: decision.kind, steps: [], detail: decision.detail };
}

/**
 * Read the twin each time the feed says its report changed (or every safetyReadMs), until the agent's report answers
 * this request. A read after a change reads the twin's own record (the answer is there); one on the safety tick adds
 * the device's presence, for the heartbeat's "seen" and the decision to ask again. A twin too busy to answer a read
 * now is read again at the next change or tick.
 *
 * The safety tick is the third route an answer takes into the rollout (docs/architecture.md, "Reports reach the
 * rollout"), and the only one that loses nothing: it reads what the twin holds, however the answer got there. It
 * finds the answers the other two miss: one the twin did not stamp and no gateway completed (a gateway killed
 * between its durable write, sent `answersDelivered`, and its completion; a completion the server refused three
 * times), and a stamp no feed look listed (visibility down, or behind by more than the feed's 60 s look-back).
 * Without it such an apply would wait until its applyTimeout and fail a device its agent had applied.
 */
async function waitForAnswer(
  target: DeviceTarget,
  steps: RevisionSteps,
  check: AnswerReceiptCheck & { request: DesiredRequest },
  opts: TwinApplyOptions,
  now: () => number,
  subscription: ReportSubscription,
  readBefore: boolean,
  say: (detail: string) => void,
): Promise<ApplyResult> {
  const safetyReadMs = opts.safetyReadMs ?? REPORT_SAFETY_READ_MS;
  const { request } = check;
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
    if (answer.state !== 'pending') return applyResultOf(target.id, steps, answer, check);
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
  const note = agentTrustNote(view, profile);
  return `agent ${report?.state ?? 'idle'}, ${seen}${note ? `; ${note}` : ''}`;
}
