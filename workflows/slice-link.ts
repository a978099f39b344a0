import * as wf from '@temporalio/workflow';
import {
  emptyRelease,
  isEmptyRelease,
  mergeRelease,
  SharedBudget,
  type BudgetRelease,
} from '../core/rollout/shared-budget';
import { sliceActiveSignal, sliceHandoffSignal, sliceReleaseSignal, sliceSuccessorSignal } from '../contracts/rollout';

/** Where a slice stands in its phase's chain (SliceInput.link). */
export interface SliceLinkInput {
  index: number;
  /** The first slice of the phase: it holds the budget from the start. */
  holding: boolean;
  /** The phase's last slice: nobody to hand the budget to. */
  last: boolean;
}

/**
 * A slice's end of the chain that shares a phase's pool budgets (core/rollout/shared-budget.ts): it
 * waits for its predecessor's handoff, tells the parent once it holds the budget (the parent then
 * starts the slice after it), and once every device of its own has started, hands the slots in use to
 * its successor and from then on passes on every slot freed, its own and those its predecessor frees.
 * Messages to the successor go one at a time and merged, so they arrive in order and a slice sends at
 * most one per workflow task.
 */
export class SliceLink {
  readonly budget: SharedBudget;
  private successor: string | null | undefined;
  private ready = false;
  private handedOff = false;
  private sending = false;
  private pending: BudgetRelease = emptyRelease();
  private readonly own = { succeeded: 0, failed: 0 };

  constructor(link: SliceLinkInput, limits: Record<string, number>) {
    this.budget = new SharedBudget(limits, link.holding);
    // The first slice needs no word to the parent: it starts the second slice at once.
    if (link.last) this.successor = null;
    wf.setHandler(sliceHandoffSignal, (h) => {
      this.budget.receiveHandoff(h);
      this.tellParentActive();
    });
    wf.setHandler(sliceReleaseSignal, (r) => {
      this.budget.receiveRelease(r);
      if (this.handedOff) this.forward(r);
    });
    wf.setHandler(sliceSuccessorSignal, (s) => {
      this.successor = s.workflowId;
      this.maybeHandOff();
    });
  }

  /** Every device of this slice has started: the budget may go on. */
  queueEmpty(): void {
    this.ready = true;
    this.maybeHandOff();
  }

  /** One of this slice's devices ended. */
  ended(pool: string, counted: 'succeeded' | 'failed' | undefined): void {
    if (counted) this.own[counted] += 1;
    if (this.handedOff)
      this.forward({
        pools: { [pool]: 1 },
        tally: { succeeded: counted === 'succeeded' ? 1 : 0, failed: counted === 'failed' ? 1 : 0 },
      });
  }

  /**
   * The slice may end: its successor is known (once it drained), every slot of its predecessor has been
   * heard freed (and passed on), and nothing is left to send. A stopped slice does not wait for slots.
   */
  async settled(stopped: () => boolean): Promise<void> {
    await wf.condition(() => stopped() || !this.ready || this.successor !== undefined);
    await wf.condition(() => stopped() || !this.budget.holds || this.budget.outstanding() <= 0);
    await wf.condition(() => !this.sending && (stopped() || !this.handedOff || isEmptyRelease(this.pending)));
  }

  private tellParentActive(): void {
    const parent = wf.workflowInfo().parent;
    if (parent)
      void wf
        .getExternalWorkflowHandle(parent.workflowId, parent.runId)
        .signal(sliceActiveSignal, { workflowId: wf.workflowInfo().workflowId })
        .catch(() => {});
  }

  private maybeHandOff(): void {
    if (this.handedOff || !this.ready || !this.successor) return;
    this.handedOff = true;
    const handoff = this.budget.handoff(this.own);
    void this.send(() => wf.getExternalWorkflowHandle(this.successor!).signal(sliceHandoffSignal, handoff));
  }

  private forward(r: BudgetRelease): void {
    if (!this.successor) return;
    mergeRelease(this.pending, r);
    if (!this.sending) void this.send();
  }

  /** One message at a time: the given one (the handoff) first, then the merged releases until none are left. */
  private async send(first?: () => Promise<void>): Promise<void> {
    this.sending = true;
    try {
      if (first) await first().catch(() => {});
      while (!isEmptyRelease(this.pending)) {
        const release = this.pending;
        this.pending = emptyRelease();
        // A successor already closed (stopped) needs no more slots: nothing to do about a failed send.
        await wf
          .getExternalWorkflowHandle(this.successor!)
          .signal(sliceReleaseSignal, release)
          .catch(() => {});
      }
    } finally {
      this.sending = false;
    }
  }
}
