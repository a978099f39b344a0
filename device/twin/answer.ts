import type { RequestAnswer } from '../../core/twin';
import { EnvelopeRejected, type ApplyResult } from '../apply-errors';
import { StepFailed } from '../transport/errors';

/** An agent's final answer to one desired request (core/twin.ts `answerTo`, anything but pending). */
export type FinalAnswer = Exclude<RequestAnswer, { state: 'pending' }>;

/**
 * What an agent device's apply returns for its agent's final answer: the same results and errors as the SSH path
 * (a refusal is EnvelopeRejected, a failed step StepFailed), so the workflow handles them unchanged. The worker's
 * apply (./apply.ts) and a gateway that completes that apply from the report it wrote (gateway/answers.ts) both
 * answer through this, so the rollout reads the same whoever completes it.
 */
export function applyResultOf(
  device: string,
  target: { profile: string; revision: number },
  answer: FinalAnswer,
): ApplyResult {
  const { report } = answer;
  const ran = report.steps ?? [];
  const detail = report.detail?.slice(0, 400);
  switch (answer.state) {
    case 'refused':
      throw new EnvelopeRejected(
        report.reason ?? 'REFUSED',
        `${device}: the agent refused ${target.profile} r${target.revision}${detail ? `: ${detail}` : ''}`,
      );
    case 'failed':
      throw new StepFailed(
        report.reason ?? 'apply',
        { code: 1, stdout: '', stderr: `agent: ${detail ?? 'failed'}` },
        device,
      );
    case 'already-applied':
      return { device, outcome: 'already-applied', steps: ran, ...(detail ? { detail } : {}) };
    default:
      // 'claimed' is the apply of a non-provable revision: the workflow counts it claimed from the profile.
      return { device, outcome: 'applied', steps: ran, ...(detail ? { detail } : {}) };
  }
}
