import { RECEIPT_COMMAND, RECEIPT_COMMAND_RULE } from '../../core/inventory';
import { activityWarning } from './activity-log';
import type { ReceiptClaim, ReceiptResult } from '../../core/receipt';
import { sshEd25519Key } from '../../core/receipt';
import { receiptReason } from '../../core/agent-receipt';
import type { DeviceTarget } from '../../core/rollout-state';
import { envelopeDigestOf } from '../../core/twin';
import { EnvelopeRejected } from '../apply-errors';
import { checkReceipt, receiptExpectation } from '../receipt-check';
import type { ApplyHolder, ApplyOptions, ApplyResult, RevisionSteps } from '../steps';
import { StepFailed, type DeviceSession } from '../transport';

/**
 * An SSH device's receipt of its apply (docs/formats.md section 12, "Receipts on an SSH device"): once the apply unit
 * has answered, the same session runs the device's signer (device/receipt-signer/wavegate-sign-receipt, reached
 * through one sudoers rule: its key is root's, never the login's) with the claim on its standard input, and the
 * worker checks what it prints once, against the key the inventory enrols (device/receipt-check.ts). One more
 * command per device; a device without `receipts` in the inventory runs nothing new.
 */

/** What an enrolled device runs when the inventory names no `receipts.command` (wavegate-receipt-setup's default). */
export const DEFAULT_RECEIPT_COMMAND = 'sudo -n /usr/local/sbin/wavegate-sign-receipt';

/** The signer takes a lock and signs: a few tens of ms; a lock held by a dead signer is broken after 2 s. */
const SIGNER_TIMEOUT_MS = 15_000;

/** What the signer may say of itself in a problem: a signer's error is short, and its output is not ours to keep. */
const SAID_MAX = 200;

/** Asks the device for its receipt of the unit's answer (its ApplyResult, or what it threw): ../steps.ts ApplyOptions.receipt. */
export type ReceiptAsk = NonNullable<ApplyOptions['receipt']>;

/**
 * The receipt request of an apply on an enrolled device: undefined for a device without `receipts`, and for a
 * revision without an envelope (nothing signed to name as `requested`).
 */
export function sshReceiptAsk(
  target: DeviceTarget,
  steps: RevisionSteps,
  holder: ApplyHolder,
  phase: number | null,
  timeoutMs: number,
): ReceiptAsk | undefined {
  const enrolled = target.receipts;
  const requested = envelopeDigestOf(steps.envelope);
  if (!enrolled || !requested) return undefined;
  const expected = {
    ...receiptExpectation(target.id, 'ssh', holder, { profile: steps.profile, revision: steps.revision, requested }),
    phase,
  };
  const key = sshEd25519Key(enrolled.key);
  const notPassedOn = (receiptProblem: string) => {
    activityWarning(
      `${target.id}: the receipt of its answer to ${steps.profile} r${steps.revision} is not passed on: ${receiptProblem}`,
    );
    return { receiptProblem };
  };
  const command = enrolled.command ?? DEFAULT_RECEIPT_COMMAND;
  return async (session, answer) => {
    // Checked where it runs, whoever built the target: an inventory is no signed content (core/inventory.ts).
    if (!RECEIPT_COMMAND.test(command))
      return notPassedOn(`signer: command not of the allowed form (${RECEIPT_COMMAND_RULE})`);
    const said = claimOf(answer, requested);
    if (!said) return undefined;
    const claim: ReceiptClaim = { ...expected, ...said };
    let res: Awaited<ReturnType<DeviceSession['exec']>>;
    try {
      res = await session.exec(command, {
        timeoutMs: Math.min(timeoutMs, SIGNER_TIMEOUT_MS),
        stdin: Buffer.from(claimText(claim)),
      });
    } catch (err) {
      return notPassedOn(`signer: no answer (${cut((err as Error).message)})`);
    }
    if (res.code !== 0) return notPassedOn(`signer: exit ${res.code}${lastWords(res.stderr || res.stdout)}`);
    const checked = checkReceipt(res.stdout, { ...expected, results: [claim.result] }, key);
    return checked.ok ? { receipt: res.stdout } : notPassedOn(`receipt: ${checked.problem}`);
  };
}

/**
 * What the device says happened, in a receipt's words; undefined for an answer that is not the apply unit's
 * (an unreachable device, a lock held by another unit, unmet dependencies, a device ahead: nothing ran there).
 */
export function claimOf(
  answer: unknown,
  requested: string,
): Pick<ReceiptClaim, 'result' | 'reason' | 'observed'> | undefined {
  const of = (result: ReceiptResult, reason: string | null, verified: boolean) => ({
    result,
    reason,
    observed: verified ? requested : null,
  });
  if (answer instanceof StepFailed) return of('failed', receiptReason(answer.step), false);
  // The device's own floor said no (its floor file, read by the unit); the other rejections are the worker's own.
  if (answer instanceof EnvelopeRejected)
    return answer.reason === 'BELOW_FLOOR' ? of('refused', answer.reason, false) : undefined;
  const result = answer as Partial<ApplyResult>;
  if (result.outcome === 'applied' || result.outcome === 'already-applied') return of(result.outcome, null, true);
  return undefined;
}

/** The signer's input: the claim's ten lines, in the receipt's order (docs/formats.md section 12). */
export function claimText(c: ReceiptClaim): string {
  const none = (v: string | number | null) => (v === null ? '-' : String(v));
  return [
    `device ${c.device}`,
    `rollout ${c.rollout}`,
    `phase ${none(c.phase)}`,
    `nonce ${c.nonce}`,
    `profile ${c.profile}`,
    `revision ${c.revision}`,
    `requested ${c.requested}`,
    `observed ${none(c.observed)}`,
    `result ${c.result}`,
    `reason ${none(c.reason)}`,
    '',
  ].join('\n');
}

function lastWords(text: string): string {
  const line = text.trim().split('\n').pop()?.trim() ?? '';
  return line ? `: ${JSON.stringify(cut(line))}` : '';
}

const cut = (text: string) => Buffer.from(text).subarray(0, SAID_MAX).toString();
