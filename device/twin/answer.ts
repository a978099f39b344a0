import { parseAgentKey } from '../../core/agent-auth';
import type { ReceiptResult } from '../../core/receipt';
import type { DesiredEntry, RequestAnswer } from '../../core/twin';
import { EnvelopeRejected, type ApplyResult } from '../apply-errors';
import type { CarriedReceipt } from '../apply-failure';
import { checkReceipt, receiptExpectation, type EnrolledKeys } from '../receipt-check';
import { StepFailed } from '../transport/errors';

/** An agent's final answer to one desired request (core/twin.ts `answerTo`, anything but pending). */
export type FinalAnswer = Exclude<RequestAnswer, { state: 'pending' }>;

/**
 * How the receipt an agent's answer carries is checked as it arrives: against the request (the twin's desired
 * entry, or what the worker asked) and the device's enrolled key (its inventory `agentKey`, a 32-byte key).
 */
export interface AnswerReceiptCheck {
  request: Pick<DesiredEntry, 'profile' | 'revision' | 'envelopeDigest' | 'holder' | 'phase'>;
  /** Its enrolled key, or the keys it may sign with now (an identity key rotation's overlap: both). */
  key: EnrolledKeys;
  /** Where a receipt that fails the check is said (it is not passed on). */
  log: (line: string) => void;
}

/** An inventory `agentKey` pin as the key a receipt is checked with (undefined: none, or not a pin). */
export function enrolledAgentKey(pin: string | undefined): Uint8Array | undefined {
  return pin === undefined ? undefined : parseAgentKey(pin);
}

/**
 * The receipt to pass on with the answer, checked once here (device/receipt-check.ts): the text when the enrolled
 * key signed it for this request, else why not (`receiptProblem`) and a log line. An answer with no receipt (an agent
 * before receipts, an unsigned request) carries none and no problem.
 */
function carried(device: string, answer: FinalAnswer, check: AnswerReceiptCheck): CarriedReceipt {
  const text = answer.report.receipt;
  if (text === undefined) return {};
  const { request } = check;
  const expected = {
    ...receiptExpectation(device, 'agent', request.holder, {
      profile: request.profile,
      revision: request.revision,
      requested: request.envelopeDigest,
    }),
    // The report's final states are the receipt's results, name for name.
    results: [answer.state as ReceiptResult],
    phase: request.phase ?? null,
  };
  const verdict = checkReceipt(text, expected, check.key);
  // The request it answers rides with it (its nonce is derived from the activity's id), whoever completes the apply.
  if (verdict.ok) return { receipt: text, request: request.holder.activity };
  check.log(
    `${device}: the receipt of its answer to ${request.profile} r${request.revision} is not passed on: ${verdict.problem}`,
  );
  return { receiptProblem: verdict.problem };
}

/**
 * What an agent device's apply returns for its agent's final answer: the same results and errors as the SSH path
 * (a refusal is EnvelopeRejected, a failed step StepFailed), so the workflow handles them unchanged, with the agent's
 * receipt checked and passed on (ApplyResult.receipt; the error's `receipt`, which device/apply-failure.ts copies into
 * the failure's details). The worker's apply (./apply.ts) and a gateway that completes that apply from the report it
 * wrote (gateway/answers.ts) both answer through this, so the rollout reads the same whoever completes it.
 */
export function applyResultOf(
  device: string,
  target: { profile: string; revision: number },
  answer: FinalAnswer,
  check: AnswerReceiptCheck,
): ApplyResult {
  const { report } = answer;
  const ran = report.steps ?? [];
  const detail = report.detail?.slice(0, 400);
  const proof = carried(device, answer, check);
  switch (answer.state) {
    case 'refused':
      throw Object.assign(
        new EnvelopeRejected(
          report.reason ?? 'REFUSED',
          `${device}: the agent refused ${target.profile} r${target.revision}${detail ? `: ${detail}` : ''}`,
        ),
        proof,
      );
    case 'failed':
      throw Object.assign(
        new StepFailed(
          report.reason ?? 'apply',
          { code: 1, stdout: '', stderr: `agent: ${detail ?? 'failed'}` },
          device,
        ),
        proof,
      );
    case 'already-applied':
      return { device, outcome: 'already-applied', steps: ran, ...(detail ? { detail } : {}), ...proof };
    default:
      // 'claimed' is the apply of a non-provable revision: the workflow counts it claimed from the profile.
      return { device, outcome: 'applied', steps: ran, ...(detail ? { detail } : {}), ...proof };
  }
}
