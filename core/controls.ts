import type { SignedStatement } from './approval';
import type { RolloutState } from './rollout-state';

/**
 * Operator controls and which rollout states accept them (docs/architecture.md, "Controls"). The same check validates updates
 * (rejected at once, naming the current state) and filters signals (ignored, and recorded as such).
 */
export interface ControlBase {
  /** Who sent it: a user name, `web-ui`, `schedule`... recorded in the audit trail. */
  by?: string;
  reason?: string;
}
export interface PauseControl extends ControlBase {}
export interface ResumeControl extends ControlBase {}
export interface AbortControl extends ControlBase {
  /** Put back every device this rollout changed (default true). */
  rollback?: boolean;
}
export interface ApproveControl extends ControlBase {
  /** The phase index (0-based) or name being approved; default: the one waiting. */
  phase?: number | string;
  /** The approver's signed statement (core/approval.ts): under the two-person rule the only proof of who approves. */
  statement?: SignedStatement;
}

/** Carry on past an audit trail that cannot be made whole: an explicit, recorded decision with a reason. */
export interface AuditOverrideControl extends ControlBase {
  reason: string;
}

export type ControlName = 'pause' | 'resume' | 'abort' | 'approve' | 'override-audit';

export interface ControlContext {
  state: RolloutState;
  /** The phase waiting for a manual approval, if any. */
  awaitingApproval?: { index: number; name: string };
  /** An abort was already accepted and is being carried out. */
  aborting: boolean;
  /** Why the audit trail holds the rollout (a write failed and the trail is not whole), if it does. */
  auditHold?: string;
}

const FINAL: ReadonlySet<RolloutState> = new Set(['completed', 'rolled-back', 'aborted', 'cancelled', 'failed']);

export function isFinalState(state: RolloutState): boolean {
  return FINAL.has(state);
}

/** Null when the control is allowed now, else a message naming the current state. */
export function checkControl(
  name: ControlName,
  ctx: ControlContext,
  control: ControlBase & { phase?: number | string } = {},
): string | null {
  if (isFinalState(ctx.state)) return `rollout is ${ctx.state}; ${name} is no longer possible`;
  // An override is the one control that also helps an abort's compensation past a broken trail.
  if (name === 'override-audit') {
    if (!ctx.auditHold) return 'the audit trail is whole; there is nothing to override';
    if (!control.reason?.trim()) return 'override-audit needs a reason (it is recorded in the new audit segment)';
    return null;
  }
  if (ctx.aborting) return `rollout is being aborted; ${name} is no longer possible`;
  switch (name) {
    case 'pause':
      return ctx.state === 'running' ? null : `rollout is ${ctx.state}; only a running rollout can be paused`;
    case 'resume':
      return ctx.state === 'paused' ? null : `rollout is ${ctx.state}; only a paused rollout can be resumed`;
    case 'abort':
      return null;
    case 'approve': {
      const waiting = ctx.awaitingApproval;
      if (!waiting) return `rollout is ${ctx.state} and no phase is waiting for approval`;
      if (control.phase !== undefined && control.phase !== waiting.index && control.phase !== waiting.name) {
        return `phase ${JSON.stringify(control.phase)} is not the one waiting; phase ${waiting.index} "${waiting.name}" is`;
      }
      return null;
    }
  }
}
