import * as wf from '@temporalio/workflow';
import type { ControlName } from '../core/controls';
import type { ControlRequest, RolloutModel } from '../core/rollout/model';
import * as msg from '../contracts/rollout';
import { SLICE_CONTROL_ACK } from './slice';
import type { RolloutAuditFn, TwoPersonApprovals } from './approvals';

/**
 * The operator's controls, wired as the samples' safe message handlers do: the model checks and carries
 * out each control; updates (CLI) are rejected by their validator at once, signals (Web UI's form) that
 * are not allowed now are recorded as refused and change nothing. `onChange` lets the story pass the new
 * state on (to a running slice, to the Web UI).
 */
export function wireControls(
  model: RolloutModel,
  audit: RolloutAuditFn,
  onChange: (ack: boolean) => Promise<void>,
  onAuditOverride: (c: { by: string; reason: string }) => void,
  /** A spec with `approval`: approvals count through the two-person rule (workflows/approvals.ts). */
  twoPerson?: TwoPersonApprovals,
): void {
  const now = () => new Date(Date.now()).toISOString();
  /** Carry out a control; `told` resolves once every running slice has the new state (SLICE_CONTROL_ACK). */
  const carryOut = (name: ControlName, c: ControlRequest, ack = false) => {
    const intent = model.applyControl(name, c);
    if (intent)
      void audit(intent.event, {
        by: intent.by,
        reason: intent.reason,
        ...(intent.phase ? { phase: intent.phase } : {}),
        ...(intent.evidence ? { evidence: intent.evidence } : {}),
      });
    else onAuditOverride({ by: c.by ?? 'unknown', reason: c.reason! });
    model.recordControl(name, c, true, now());
    const told = onChange(ack);
    return { status: model.status(), told };
  };
  const apply = (name: ControlName, c: ControlRequest) => carryOut(name, c).status;
  /**
   * An update (the CLI) answers once the running slices have the new state in their histories, so when
   * `wavegate pause` returns no slice starts another device.
   */
  const applyUpdate = async (name: ControlName, c: ControlRequest) => {
    // Each live slice answers once it holds the new state (from its next task on).
    wf.deprecatePatch(SLICE_CONTROL_ACK);
    const { status, told } = carryOut(name, c, true);
    await told;
    return status;
  };
  const onSignal =
    (name: ControlName) =>
    (c: ControlRequest = {}) => {
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
  wf.setHandler(msg.approveSignal, twoPerson ? (c) => twoPerson.signal(c) : onSignal('approve'));
  wf.setHandler(msg.pauseUpdate, (c) => applyUpdate('pause', c), { validator: validator('pause') });
  wf.setHandler(msg.resumeUpdate, (c) => applyUpdate('resume', c), { validator: validator('resume') });
  wf.setHandler(msg.abortUpdate, (c) => applyUpdate('abort', c), { validator: validator('abort') });
  wf.setHandler(msg.approveUpdate, (c) => (twoPerson ? twoPerson.update(c) : applyUpdate('approve', c)), {
    validator: validator('approve'),
  });
  wf.setHandler(msg.overrideAuditSignal, onSignal('override-audit'));
  wf.setHandler(msg.overrideAuditUpdate, (c) => apply('override-audit', c), { validator: validator('override-audit') });
}
