import * as wf from '@temporalio/workflow';
import type { AuditEventName } from '../core/audit';
import type { ControlName } from '../core/controls';
import type { ControlRequest, RolloutModel } from '../core/rollout/model';
import * as msg from './messages';

export type RolloutAuditFn = (event: AuditEventName, fields?: { phase?: string | null; by?: string; reason?: string | null; evidence?: unknown }) => Promise<unknown>;

/**
 * The operator's controls, wired as the samples' safe message handlers do: the model checks and carries
 * out each control; updates (CLI) are rejected by their validator at once, signals (Web UI's form) that
 * are not allowed now are recorded as refused and change nothing. `onChange` lets the story pass the new
 * state on (to a running slice, to the Web UI).
 */
export function wireControls(model: RolloutModel, audit: RolloutAuditFn, onChange: () => void, onAuditOverride: (c: { by: string; reason: string }) => void): void {
  const now = () => new Date(Date.now()).toISOString();
  const apply = (name: ControlName, c: ControlRequest) => {
    const intent = model.applyControl(name, c);
    if (intent) void audit(intent.event, { by: intent.by, reason: intent.reason, ...(intent.phase ? { phase: intent.phase } : {}), ...(intent.evidence ? { evidence: intent.evidence } : {}) });
    else onAuditOverride({ by: c.by ?? 'unknown', reason: c.reason! });
    model.recordControl(name, c, true, now());
    onChange();
    return model.status();
  };
  const onSignal = (name: ControlName) => (c: ControlRequest = {}) => {
    const signalled = { ...c, by: c.by ?? 'signal' };
    const problem = model.refusal(name, c);
    if (problem) model.recordControl(name, signalled, false, now(), problem);
    else apply(name, signalled);
  };
  const validator = (name: ControlName) => (c: ControlRequest) => {
    const problem = model.refusal(name, c ?? {});
    if (problem) throw new Error(problem);
  };
  wf.setHandler(msg.statusQuery, () => model.status());
  wf.setHandler(msg.pauseSignal, onSignal('pause'));
  wf.setHandler(msg.resumeSignal, onSignal('resume'));
  wf.setHandler(msg.abortSignal, onSignal('abort'));
  wf.setHandler(msg.approveSignal, onSignal('approve'));
  wf.setHandler(msg.pauseUpdate, (c) => apply('pause', c), { validator: validator('pause') });
  wf.setHandler(msg.resumeUpdate, (c) => apply('resume', c), { validator: validator('resume') });
  wf.setHandler(msg.abortUpdate, (c) => apply('abort', c), { validator: validator('abort') });
  wf.setHandler(msg.approveUpdate, (c) => apply('approve', c), { validator: validator('approve') });
  wf.setHandler(msg.overrideAuditSignal, onSignal('override-audit'));
  wf.setHandler(msg.overrideAuditUpdate, (c) => apply('override-audit', c), { validator: validator('override-audit') });
}
