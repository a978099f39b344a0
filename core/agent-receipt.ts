import { sha256 } from '@noble/hashes/sha2.js';
import { bytesToHex } from '@noble/hashes/utils.js';
import { utf8Encode } from './bytes';
import { receiptNonce, type ReceiptClaim, type ReceiptResult } from './receipt';
import { FINAL_REPORT_STATES, type DesiredEntry, type ProfileReport } from './twin';

/**
 * What an agent says in its receipt of one desired entry (docs/formats.md, "Receipts"): the request as the twin
 * carried it (the holder's nonce, the phase, the envelope digest) and the apply unit's answer (agent/apply-entry.ts).
 * Pure: the agent adds its counter, prev and clock and signs (agent/receipts.ts).
 */

/** Results whose verify of the requested revision passed on the device: their receipt observed it. */
const IN_PLACE: readonly ReceiptResult[] = ['applied', 'already-applied', 'claimed'];

/** The receipt's reason rule (core/receipt.ts): 1-24 of A-Za-z0-9_-. */
const REASON_MAX = 24;

/**
 * A refusal code or a failed step as a receipt's reason: upper case, any run of other characters one `_` (the
 * step `payload digest check` is PAYLOAD_DIGEST_CHECK); longer than the rule allows, its first 15 characters and 8
 * hex of the whole code's SHA-256 (two long codes stay apart); none at all, UNSPECIFIED.
 */
export function receiptReason(code: string | undefined): string {
  const text = (code ?? '')
    .toUpperCase()
    .replace(/[^A-Z0-9_-]+/g, '_')
    .replace(/^_+|_+$/g, '');
  if (!text) return 'UNSPECIFIED';
  if (text.length <= REASON_MAX) return text;
  return `${text.slice(0, 15)}-${bytesToHex(sha256(utf8Encode(code ?? ''))).slice(0, 8)}`;
}

/**
 * The claim of the agent of `device` answering `entry` with `report`; null when there is no receipt to make: an
 * unsigned request (nothing to name it by) or an answer that is not final (`applying`, `idle`).
 */
export function agentReceiptClaim(device: string, entry: DesiredEntry, report: ProfileReport): ReceiptClaim | null {
  if (!entry.envelopeDigest || !FINAL_REPORT_STATES.includes(report.state)) return null;
  // The final report states are the receipt's results, name for name.
  const result = report.state as ReceiptResult;
  const inPlace = IN_PLACE.includes(result);
  const { holder } = entry;
  return {
    device,
    rollout: holder.rollout,
    phase: entry.phase ?? null,
    nonce: receiptNonce({ rollout: holder.rollout, run: holder.run, activity: holder.activity, device }),
    profile: entry.profile,
    revision: entry.revision,
    requested: entry.envelopeDigest,
    observed: inPlace ? entry.envelopeDigest : null,
    result,
    reason: inPlace ? null : receiptReason(report.reason),
  };
}
