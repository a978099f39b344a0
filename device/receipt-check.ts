import {
  parseReceipt,
  receiptNonce,
  receiptSignatureValid,
  type Receipt,
  type ReceiptKeyKind,
  type ReceiptResult,
} from '../core/receipt';

/**
 * The worker's one check of a device's receipt as it arrives with the device's answer (docs/formats.md,
 * "Receipts"): is it the enrolled key's word about THIS request? A receipt that passes travels on as proof
 * (ApplyResult.receipt, a failure's details[0].receipt); one that fails is dropped and its problem said
 * (ApplyResult.receiptProblem), and the answer stands as the control plane's claim. The offline verifier
 * checks the same things again from the trail (and what only a chain shows: counters, prev).
 */

/** The request, as the worker (or the gateway completing it) sent it: a receipt must name exactly this. */
export interface ReceiptExpectation {
  device: string;
  /** The kind of key the device is enrolled with (an agent's identity key, an SSH device's receipt key). */
  keyKind: ReceiptKeyKind;
  rollout: string;
  /** receiptNonce() of the request (receiptExpectation computes it). */
  nonce: string;
  profile: string;
  revision: number;
  /** The requested revision's envelope digest (core/twin.ts envelopeDigestOf). */
  requested: string;
  /** The results the answer it came with may carry (an agent's `refused` answer: only `refused`); absent: any. */
  results?: readonly ReceiptResult[];
  /** The request's phase (null: none); absent: not checked. */
  phase?: number | null;
}

/** The key (or keys) a receipt may be signed with. */
export type EnrolledKeys = Uint8Array | readonly Uint8Array[] | null | undefined;

export type ReceiptCheck = { ok: true; receipt: Receipt } | { ok: false; problem: string };

/** The expectation of a request made by `holder` (the apply lock's holder: rollout, run, activity) of `device`. */
export function receiptExpectation(
  device: string,
  keyKind: ReceiptKeyKind,
  holder: { rollout: string; run: string; activity: string },
  asked: { profile: string; revision: number; requested: string },
): ReceiptExpectation {
  return {
    device,
    keyKind,
    rollout: holder.rollout,
    nonce: receiptNonce({ rollout: holder.rollout, run: holder.run, activity: holder.activity, device }),
    profile: asked.profile,
    revision: asked.revision,
    requested: asked.requested,
  };
}

/** A value in a problem: a digest or a long id by its first 16 characters. */
const shown = (v: unknown) =>
  typeof v === 'string' ? JSON.stringify(v.length > 40 ? `${v.slice(0, 16)}…` : v) : String(v);

/**
 * The receipt in `text` when it is the enrolled key's receipt of the expected request; else the problem, short,
 * naming the check that failed (unreadable, key, signature, device, rollout, nonce, profile, revision, requested,
 * result, phase). `enrolledKey`: the 32-byte public key the inventory enrols, or the keys a device may sign with
 * now (an agent during its identity key rotation's overlap: either one); null, undefined or none: none known.
 */
export function checkReceipt(text: unknown, expected: ReceiptExpectation, enrolledKey: EnrolledKeys): ReceiptCheck {
  const fail = (problem: string): ReceiptCheck => ({ ok: false, problem });
  const parsed = parseReceipt(text);
  if (!parsed.ok) return fail(`unreadable: ${parsed.problem.slice(0, 160)}`);
  const { receipt } = parsed;
  const f = receipt.fields;
  if (f.keyKind !== expected.keyKind)
    return fail(`key: a receipt of an ${f.keyKind} key, the device is enrolled with an ${expected.keyKind} key`);
  const keys = enrolledKey ? (enrolledKey instanceof Uint8Array ? [enrolledKey] : enrolledKey) : [];
  if (keys.length === 0)
    return fail(`key: no ${expected.keyKind} key enrolled for ${expected.device} to check it with`);
  // During an identity key rotation's overlap either key is the device's (core/agent-rotation.ts acceptedKeys).
  if (!keys.some((key) => receiptSignatureValid(receipt, key))) return fail('signature: not made by the enrolled key');
  const fields = ['device', 'rollout', 'nonce', 'profile', 'revision', 'requested'] as const;
  for (const field of fields) {
    if (f[field] !== expected[field])
      return fail(`${field}: the receipt names ${shown(f[field])}, the request ${shown(expected[field])}`);
  }
  if (expected.results && !expected.results.includes(f.result))
    return fail(`result: the receipt says ${f.result}, the answer ${expected.results.join(' or ')}`);
  if (expected.phase !== undefined && f.phase !== expected.phase)
    return fail(`phase: the receipt names ${shown(f.phase)}, the request ${shown(expected.phase)}`);
  return { ok: true, receipt };
}
