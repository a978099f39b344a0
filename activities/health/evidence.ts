import { meetsThreshold, scrubCredentials, type GateOutcome, type ThresholdOp } from '../../core/health';
import type { Unread, Verdict } from './types';

/** The evidence helpers every provider shares: how a verdict is worded, listed, bounded and scrubbed. */

const EVIDENCE_LIMIT = 600;

/** What a GET says when the check's deadline cut it off: each caller words it with the check's timeout. */
export const NO_ANSWER = `no answer within the check's timeout`;

/** A GET's error as evidence: the deadline named with the check's timeout, anything else as it was said. */
export function getError(error: string, timeoutMs: number): string {
  return error === NO_ANSWER ? `no answer within ${timeoutMs} ms` : error;
}

export function judged(value: number, op: ThresholdOp, threshold: number, detail: string): Verdict {
  const outcome: GateOutcome = meetsThreshold(value, op, threshold) ? 'pass' : 'fail';
  return { outcome, evidence: `${detail} is ${outcome === 'pass' ? '' : 'not '}${op} ${threshold}` };
}

export const NO_CHANGED_DEVICES: Verdict = { outcome: 'pass', evidence: 'no changed devices to check' };

export function withoutDevicePrefix(device: string, message: string): string {
  return message.startsWith(`${device}: `) ? message.slice(device.length + 2) : message;
}

/** Unread for a reason the check's timeout did not set (an agent's stale report, an answer that is none): its evidence names its own bound. */
export function beyondTimeout(a: Unread): boolean {
  return a.kind === 'no-report' || a.kind === 'unanswered';
}

export function unreadBeyondTimeout(unread: readonly Unread[], total: number): string[] {
  const beyond = unread.filter(beyondTimeout);
  return beyond.length
    ? [`could not read ${beyond.length} of ${total} devices: ${list(beyond.map((a) => `${a.device} (${a.reason})`))}`]
    : [];
}

export function list(items: readonly string[]): string {
  return items.length > 5 ? `${items.slice(0, 5).join(', ')} and ${items.length - 5} more` : items.join(', ');
}

/** Evidence as recorded: bounded, then scrubbed of credentials (urls' userinfo and query values, secret-named values). */
export function clip(text: string): string {
  const bounded = text.length > EVIDENCE_LIMIT ? `${text.slice(0, EVIDENCE_LIMIT - 3)}...` : text;
  return scrubCredentials(bounded);
}
