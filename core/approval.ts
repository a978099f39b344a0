import { fromBase64, toBase64, utf8Decode, utf8Encode } from './bytes';
import { canonicalize } from './canonical';
import type { ApprovalRequirement } from './approval-requirement';
import { WavegateError } from './errors';
import { lazySchema, zod } from './lazy-schema';
import { ed25519, Kid, keyId, MAX_CLOCK_SKEW_MS, type KeyPair } from './signing';
import { parseWith } from './validation';

/**
 * The two-person rule (docs/formats.md "Approvals"): a spec's `approval: { required: N, notBy: starter }`
 * lets a phase waiting at a manual gate go on only after N approvals by distinct authenticated people, none
 * of them the rollout's starter when `notBy: starter`. Who a person is comes only from a statement signed
 * by a key pinned in the profile's `approvers.yaml` (the worker's, beside trust.yaml): an operator's own key
 * (`wavegate approve --key`) or a board's key vouching for the operator signed in to it. The `by` of a
 * signal or an update is whatever the sender typed and never counts. Pure: the clock is passed in.
 */

/** A board's roles (docs/cli.md "wavegate board"): a viewer reads, an operator also controls, an approver also approves. */
export const ROLES = ['viewer', 'operator', 'approver'] as const;
export type Role = (typeof ROLES)[number];

/** The file name, in `<profiles root>/<profile>/`, of the keys whose statements name people. */
export const APPROVERS_FILE = 'approvers.yaml';
/** The largest approvers.yaml read: a few hundred keys, never a stray large file. */
export const MAX_APPROVERS_BYTES = 256 * 1024;

const NAME = /^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$/;
const NAME_RULE = 'letters, digits, ".", "_", "@", "-", at most 64, starting with a letter or digit';

const ApproverKey = lazySchema(() =>
  zod()
    .object({
      name: zod().string().regex(NAME, NAME_RULE),
      kid: Kid,
      publicKey: zod().string().min(1),
      /** approver, operator (may start, not approve), or board (vouches for the operator signed in to it). */
      role: zod().enum(['approver', 'operator', 'board']).default('approver'),
    })
    .strict(),
);
const ApproversInput = lazySchema(() =>
  zod()
    .object({ keys: zod().array(ApproverKey).min(1, 'an approvers file needs at least one key').max(1000) })
    .strict(),
);

export interface PinnedApprover {
  name: string;
  role: 'approver' | 'operator' | 'board';
  publicKey: Uint8Array;
}
/** kid → the pinned key. */
export type Approvers = ReadonlyMap<string, PinnedApprover>;

/** An approvers.yaml document: each key 32 bytes, matching its kid, pinned once. */
export function parseApprovers(data: unknown, source: string): Approvers {
  const input = parseWith(ApproversInput, data, source);
  const keys = new Map<string, PinnedApprover>();
  const problems: string[] = [];
  input.keys.forEach((k, i) => {
    const raw = fromBase64(k.publicKey);
    if (raw?.length !== 32) problems.push(`  keys[${i}].publicKey: must be a base64 raw 32-byte Ed25519 public key`);
    else if (keyId(raw) !== k.kid) problems.push(`  keys[${i}].kid: does not match its publicKey (got "${k.kid}")`);
    else if (keys.has(k.kid)) problems.push(`  keys[${i}].kid: pinned twice (got "${k.kid}")`);
    else keys.set(k.kid, { name: k.name, role: k.role, publicKey: raw });
  });
  if (problems.length)
    throw new WavegateError('INVALID_INPUT', `${source}: invalid\n${problems.join('\n')}`, { source });
  return keys;
}

/** What a person signs: to start this rollout, or to approve this phase of this run of it. */
export interface OperatorStatement {
  type: 'wavegate.operator-statement';
  action: 'start' | 'approve';
  rolloutId: string;
  /** approve: the run (a rollout id is re-used by later rollouts) and the phase's name. */
  runId?: string;
  phase?: string;
  /** Random, once per statement: the same statement sent twice is refused the second time. */
  nonce: string;
  /** When it was signed (ISO-8601): a statement is good for STATEMENT_TTL_MS. */
  at: string;
  /** Only in a board's statement: who signed in to the board, and their role there. */
  operator?: string;
  role?: Role;
  reason?: string;
}

const Statement = lazySchema(() =>
  zod()
    .object({
      type: zod().literal('wavegate.operator-statement'),
      action: zod().enum(['start', 'approve']),
      rolloutId: zod().string().min(1).max(256),
      runId: zod().string().min(1).max(128).optional(),
      phase: zod().string().min(1).max(128).optional(),
      nonce: zod()
        .string()
        .regex(/^[0-9a-f]{32,64}$/),
      at: zod().iso.datetime(),
      operator: zod().string().regex(NAME, NAME_RULE).optional(),
      role: zod().enum(ROLES).optional(),
      reason: zod().string().max(1000).optional(),
    })
    .strict(),
);

/** A signed statement as it travels (public: it enters the workflow's history and the audit). */
export interface SignedStatement {
  /** base64 of the canonical JSON of an OperatorStatement: exactly the bytes signed. */
  body: string;
  kid: string;
  sig: string;
}

/** How long a signed statement is good for: an approval is signed while the phase waits, not kept for later. */
export const STATEMENT_TTL_MS = 15 * 60_000;

export function signStatement(statement: OperatorStatement, pair: KeyPair): SignedStatement {
  const bytes = utf8Encode(canonicalize(statement));
  return { body: toBase64(bytes), kid: pair.kid, sig: toBase64(ed25519().sign(bytes, pair.secretKey)) };
}

/** Who a verified statement names. `via` says how: `key <name>` or `board <name>`. */
export interface Identity {
  name: string;
  role: Role;
  via: string;
  nonce: string;
}

export type Verified = { ok: true; identity: Identity } | { ok: false; why: string };

/** What a statement must say to count here. */
export interface StatementExpectation {
  action: 'start' | 'approve';
  rolloutId: string;
  runId?: string;
  phase?: string;
}

/**
 * The identity a signed statement proves, or why it proves none: an unpinned key, a bad signature, another
 * rollout, run, phase or action, a statement too old or from the future, a board statement without its
 * operator. Never throws for a bad statement.
 */
export function verifyStatement(
  signed: unknown,
  approvers: Approvers,
  expect: StatementExpectation,
  now: number,
): Verified {
  const no = (why: string): Verified => ({ ok: false, why: `not authenticated: ${why}` });
  if (signed === undefined || signed === null)
    return no(
      `no signed statement came with it (sign with ${expect.action === 'start' ? 'wavegate start --identity-key' : 'wavegate approve --key, or from a board started with --approval-key'})`,
    );
  const s = signed as Partial<SignedStatement>;
  if (typeof s.body !== 'string' || typeof s.kid !== 'string' || typeof s.sig !== 'string' || s.body.length > 8192)
    return no('the signed statement is malformed (body, kid, sig)');
  const pinned = approvers.get(s.kid);
  if (!pinned) return no(`key ${s.kid.slice(0, 80)} is not pinned in this profile's ${APPROVERS_FILE}`);
  const bytes = fromBase64(s.body);
  const sig = fromBase64(s.sig);
  let good = false;
  try {
    good = !!bytes && sig?.length === 64 && ed25519().verify(sig, bytes, pinned.publicKey);
  } catch {
    good = false;
  }
  if (!good) return no(`the signature by ${pinned.name}'s key does not verify`);
  let statement: OperatorStatement;
  try {
    statement = parseWith(Statement, JSON.parse(utf8Decode(bytes!) ?? ''), 'statement') as OperatorStatement;
  } catch {
    return no(`the statement signed by ${pinned.name}'s key is not an operator statement`);
  }
  const wrong = mismatch(statement, expect);
  if (wrong) return no(`${pinned.name}'s statement ${wrong}`);
  const at = Date.parse(statement.at);
  if (at > now + MAX_CLOCK_SKEW_MS) return no(`${pinned.name}'s statement is dated in the future (${statement.at})`);
  if (now - at > STATEMENT_TTL_MS)
    return no(`${pinned.name}'s statement was signed at ${statement.at}, more than 15 minutes ago; sign a new one`);
  if (pinned.role === 'board') {
    if (!statement.operator || !statement.role)
      return no(`board ${pinned.name}'s statement names no operator signed in to it`);
    return {
      ok: true,
      identity: { name: statement.operator, role: statement.role, via: `board ${pinned.name}`, nonce: statement.nonce },
    };
  }
  if (statement.operator !== undefined && statement.operator !== pinned.name)
    return no(`${pinned.name}'s key signed a statement naming ${statement.operator}: a key speaks for its own name`);
  return {
    ok: true,
    identity: { name: pinned.name, role: pinned.role, via: `key ${pinned.name}`, nonce: statement.nonce },
  };
}

function mismatch(s: OperatorStatement, expect: StatementExpectation): string | undefined {
  if (s.action !== expect.action) return `is to ${s.action}, not to ${expect.action}`;
  if (s.rolloutId !== expect.rolloutId) return `is for rollout ${JSON.stringify(s.rolloutId)}, not this one`;
  if (expect.runId !== undefined && s.runId !== expect.runId)
    return `is for run ${JSON.stringify(s.runId ?? null)}, not this run (${expect.runId})`;
  if (expect.phase !== undefined && s.phase !== expect.phase)
    return `approves phase ${JSON.stringify(s.phase ?? null)}, not the one waiting ("${expect.phase}")`;
  return undefined;
}

/** The approvals a waiting phase has so far, and who started the rollout (if authenticated). */
export interface ApprovalState {
  /** The verified starter's name; undefined when not authenticated. */
  starter?: string;
  /** Names whose approval of the waiting phase counted, in order. */
  approvedBy: readonly string[];
  /** Nonces of every statement already used in this run. */
  usedNonces: ReadonlySet<string>;
}

export type ApprovalDecision =
  | { accept: true; count: number; required: number; done: boolean }
  | { accept: false; why: string };

/**
 * Whether one approval counts toward the waiting phase: refused (with why) when it proves no identity, its
 * statement was used already, the person is not an approver, started this rollout (`notBy: starter`), or
 * already approved this phase.
 */
export function decideApproval(
  requirement: ApprovalRequirement,
  state: ApprovalState,
  verified: Verified,
  phase: string,
): ApprovalDecision {
  if (!verified.ok) return { accept: false, why: verified.why };
  const { name, role, nonce } = verified.identity;
  if (state.usedNonces.has(nonce))
    return { accept: false, why: `this signed statement of ${name}'s was already used; sign a new one` };
  if (role !== 'approver')
    return { accept: false, why: `${name} is ${role === 'operator' ? 'an operator' : 'a viewer'}, not an approver` };
  if (requirement.notBy === 'starter' && state.starter === name)
    return { accept: false, why: `${name} started this rollout, and approval.notBy: starter` };
  const count = state.approvedBy.length;
  if (state.approvedBy.includes(name))
    return {
      accept: false,
      why: `${name} already approved phase "${phase}" (${count} of ${requirement.required}); the same person twice counts once`,
    };
  return { accept: true, count: count + 1, required: requirement.required, done: count + 1 >= requirement.required };
}

/**
 * The starter as the two-person rule takes it: a verified statement to start, by an operator or an approver.
 * With `notBy: starter` and no such statement the rollout does not start: an unknown starter could approve
 * their own change with their own key, which is what the rule exists to stop.
 */
export function decideStarter(
  requirement: ApprovalRequirement,
  verified: Verified,
): { ok: true; starter?: Identity } | { ok: false; why: string } {
  if (verified.ok && verified.identity.role !== 'viewer') return { ok: true, starter: verified.identity };
  if (requirement.notBy !== 'starter') return { ok: true };
  const why = verified.ok ? `${verified.identity.name} is a viewer, who starts nothing` : verified.why;
  return {
    ok: false,
    why: `approval.notBy: starter needs an authenticated starter (wavegate start --identity-key <key file>): ${why}`,
  };
}
