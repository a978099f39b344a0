import * as wf from '@temporalio/workflow';
import { decideApproval, decideStarter, verifyStatement, type SignedStatement, type Verified } from '../core/approval';
import type { ApprovalRequirement } from '../core/approval-requirement';
import type { AuditEventName } from '../core/audit';
import type { RolloutInput } from '../core/rollout/input';
import type { ControlRequest, RolloutModel } from '../core/rollout/model';
import type { RolloutStatus } from '../core/rollout/status';
import { verifyOperatorStatement } from './activity-proxies';

/** The rollout's audit writer as the controls and the approvals use it (workflows/rollout.ts makes it). */
export type RolloutAuditFn = (
  event: AuditEventName,
  fields?: { phase?: string | null; by?: string; reason?: string | null; evidence?: unknown },
) => Promise<unknown>;
/**
 * New executions of a spec with `approval` enforce the two-person rule (core/approval.ts). Only a spec with
 * the field asks it, and no history recorded before it has one.
 */
export const TWO_PERSON_APPROVAL = 'two-person-approval';

/** An approval as a signal or an update carries it: `by` is what the sender typed, `statement` what proves it. */
export type ApproveRequest = ControlRequest & { statement?: SignedStatement };

const NO_KEYS = new Map();

/**
 * The two-person rule's side of a rollout: the verified starter, and each waiting phase's approvals by
 * name. An approval counts only through a statement the worker verified against the profile's approvers.yaml
 * (the activity verifyOperatorStatement); what it counts for is decideApproval's. Refusals are recorded in
 * the status and the audit trail with why, and an update's refusal fails the update with it.
 */
export class TwoPersonApprovals {
  private starter: string | undefined;
  private readonly approvedBy = new Map<number, string[]>();
  private readonly usedNonces = new Set<string>();

  constructor(
    private readonly input: RolloutInput,
    private readonly requirement: ApprovalRequirement,
    private readonly model: RolloutModel,
    private readonly audit: RolloutAuditFn,
    private readonly onChange: (ack: boolean) => Promise<void>,
  ) {}

  /**
   * The starter, from the input's signed statement; with `notBy: starter` and no verified starter the
   * rollout fails here, before any device is touched. A nightly canary has no manual gate to wait at.
   */
  async verifyStarter(): Promise<void> {
    if (this.input.canary) return;
    const signed = this.input.startStatement;
    if (signed === undefined && this.requirement.notBy !== 'starter') return;
    // Judged at the run's start: the statement was signed for it, however late a worker picks it up.
    const startedAt = wf.workflowInfo().runStartTime.getTime();
    const verified = await this.verify(signed, { action: 'start', rolloutId: this.input.rolloutId }, startedAt);
    const decision = decideStarter(this.requirement, verified);
    if (!decision.ok) throw wf.ApplicationFailure.nonRetryable(decision.why, 'INVALID_INPUT');
    if (!decision.starter) {
      if (!verified.ok) this.model.warn(`the starter is not authenticated (${verified.why})`);
      return;
    }
    this.starter = decision.starter.name;
    await this.audit('rollout.starter', {
      phase: null,
      by: decision.starter.name,
      reason: null,
      evidence: { via: decision.starter.via, role: decision.starter.role, said: this.input.startedBy },
    });
  }

  /** An approve update: the new status, or the refusal thrown (the update fails with why). */
  async update(c: ApproveRequest): Promise<RolloutStatus> {
    const refused = await this.approve(c);
    if (refused) throw wf.ApplicationFailure.nonRetryable(refused, 'APPROVAL_REFUSED');
    return this.model.status();
  }

  /** An approve signal: refused or counted, recorded either way. */
  async signal(c: ApproveRequest = {}): Promise<void> {
    const problem = this.model.refusal('approve', c);
    if (problem) {
      this.model.recordControl('approve', { ...c, by: c.by ?? 'signal' }, false, now(), problem);
      return;
    }
    await this.approve(c);
  }

  /** Why the approval did not count, or undefined when it did. */
  private async approve(c: ApproveRequest): Promise<string | undefined> {
    const waiting = this.model.awaitingApproval;
    if (!waiting) return this.model.refusal('approve', c) ?? 'no phase is waiting for approval';
    const verified = await this.verify(c.statement, {
      action: 'approve',
      rolloutId: this.input.rolloutId,
      runId: wf.workflowInfo().runId,
      phase: waiting.name,
    });
    // The rollout may have moved on while the statement was checked (another approval, an abort).
    const moved = this.model.refusal('approve', c);
    const approvedBy = this.approvedBy.get(waiting.index) ?? [];
    const decision =
      moved !== null
        ? { accept: false as const, why: moved }
        : this.model.awaitingApproval?.index !== waiting.index
          ? { accept: false as const, why: `phase "${waiting.name}" is no longer waiting for approval` }
          : decideApproval(
              this.requirement,
              { starter: this.starter, approvedBy, usedNonces: this.usedNonces },
              verified,
              waiting.name,
            );
    const by = verified.ok ? verified.identity.name : 'unauthenticated';
    const via = verified.ok ? verified.identity.via : null;
    if (!decision.accept) {
      this.model.recordControl(
        'approve',
        { by, ...(c.reason ? { reason: c.reason } : {}) },
        false,
        now(),
        decision.why,
      );
      void this.audit('rollout.approval-refused', {
        phase: waiting.name,
        by,
        reason: decision.why,
        evidence: { via, said: typeof c.by === 'string' ? c.by.slice(0, 100) : null },
      });
      void this.onChange(false);
      return decision.why;
    }
    const { identity } = verified as Extract<Verified, { ok: true }>;
    this.usedNonces.add(identity.nonce);
    this.approvedBy.set(waiting.index, [...approvedBy, identity.name]);
    // The last approval needed is the model's approve: the phase goes on.
    if (decision.done) this.model.applyControl('approve', { by: identity.name, reason: c.reason });
    const note = `approval ${decision.count} of ${decision.required} (${identity.via})`;
    this.model.recordControl(
      'approve',
      { by: identity.name, ...(c.reason ? { reason: c.reason } : {}) },
      true,
      now(),
      note,
    );
    void this.audit('rollout.approved', {
      phase: waiting.name,
      by: identity.name,
      reason: c.reason ?? null,
      evidence: {
        approvals: decision.count,
        required: decision.required,
        via: identity.via,
        approvedBy: this.approvedBy.get(waiting.index),
      },
    });
    await this.onChange(false);
    return undefined;
  }

  /** No statement is no identity, without asking the worker; any other is the worker's to verify. */
  private verify(
    signed: SignedStatement | undefined,
    expect: Parameters<typeof verifyStatement>[2],
    at?: number,
  ): Promise<Verified> {
    if (signed === undefined || signed === null) return Promise.resolve(verifyStatement(undefined, NO_KEYS, expect, 0));
    return verifyOperatorStatement({ profile: this.input.spec.profile, signed, expect, ...(at ? { at } : {}) });
  }
}

/** The rule's keeper for a spec with `approval`; none for any other (its controls stay as they were). */
export function twoPersonApprovals(
  input: RolloutInput,
  model: RolloutModel,
  audit: RolloutAuditFn,
  onChange: (ack: boolean) => Promise<void>,
): TwoPersonApprovals | undefined {
  const requirement = input.spec.approval;
  if (!requirement || !wf.patched(TWO_PERSON_APPROVAL)) return undefined;
  return new TwoPersonApprovals(input, requirement, model, audit, onChange);
}

const now = () => new Date(Date.now()).toISOString();
