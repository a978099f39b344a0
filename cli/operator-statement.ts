import { randomBytes } from 'node:crypto';
import { signStatement, type OperatorStatement, type Role, type SignedStatement } from '../core/approval';
import type { Client } from '@temporalio/client';
import { WavegateError } from '../core/errors';
import type { RolloutInput } from '../core/rollout/input';
import type { KeyPair } from '../core/signing';
import { queryStatus } from './client';

/**
 * The statements a person signs for the two-person rule (core/approval.ts, docs/formats.md "Approvals"):
 * to start a rollout (`wavegate start --identity-key`) or to approve its waiting phase (`wavegate approve
 * --key`, or the board with its `--approval-key` for the operator signed in). Signed here, verified by the
 * worker against the profile's approvers.yaml; the key never leaves this process.
 */
export function startStatement(
  pair: KeyPair,
  rolloutId: string,
  by?: { operator: string; role: Role },
): SignedStatement {
  return signStatement({ ...base('start', rolloutId), ...(by ?? {}) }, pair);
}

export function approvalStatement(
  pair: KeyPair,
  at: { rolloutId: string; runId: string; phase: string; reason?: string },
  by?: { operator: string; role: Role },
): SignedStatement {
  return signStatement(
    {
      ...base('approve', at.rolloutId),
      runId: at.runId,
      phase: at.phase,
      ...(at.reason ? { reason: at.reason.slice(0, 1000) } : {}),
      ...(by ?? {}),
    },
    pair,
  );
}

/**
 * approval.notBy: starter needs a starter the worker can authenticate: refused here (exit 2, nothing started)
 * rather than by the worker once the rollout started (it would fail before touching a device).
 */
export function checkStarterKey(input: RolloutInput, identity: KeyPair | undefined): void {
  if (input.spec.approval?.notBy === 'starter' && !identity)
    throw new WavegateError(
      'INVALID_INPUT',
      "approval.notBy: starter: the starter must be authenticated: sign the start with --identity-key <key file> (your key, pinned in the profile's approvers.yaml)",
      { field: '--identity-key' },
    );
}

function base(action: OperatorStatement['action'], rolloutId: string): OperatorStatement {
  return {
    type: 'wavegate.operator-statement',
    action,
    rolloutId,
    nonce: randomBytes(16).toString('hex'),
    at: new Date().toISOString(),
  };
}

/**
 * An approval of the phase `id` waits at now, signed: the run and the phase are read from the rollout, so a
 * statement approves that phase of that run and nothing later. INVALID_STATE when no phase waits.
 */
export async function signedApproval(
  client: Client,
  id: string,
  pair: KeyPair,
  reason: string | undefined,
  by?: { operator: string; role: Role },
): Promise<SignedStatement> {
  const runId = (await client.workflow.getHandle(id).describe()).runId;
  const status = await queryStatus(client, id, runId);
  const waiting = status.phases.find((p) => p.stage === 'awaiting-approval');
  if (!waiting)
    throw new WavegateError('INVALID_STATE', `${id}: rollout is ${status.state} and no phase is waiting for approval`);
  return approvalStatement(pair, { rolloutId: id, runId, phase: waiting.name, ...(reason ? { reason } : {}) }, by);
}
