import * as wf from '@temporalio/workflow';
import { MembershipState, planProblem, type MembershipPlan } from '../core/membership';
import { MEMBERSHIP_REFUSED, pageQuery, progressQuery, sealUpdate, storePageUpdate } from '../contracts/membership';

/** An upload not sealed within this time is abandoned: the entity fails, and a new start of the same id may begin again. */
export const UPLOAD_WINDOW = '1 hour';

/**
 * One inventory's membership as a durable entity `membership:<digest>` (core/membership.ts holds the
 * state and every check): written by the CLI one page per update, then sealed; read by the snapshot
 * through the `page` query on whichever worker runs it. A refused page or seal is rejected by the
 * validator and leaves no trace in history, and a sealed membership refuses every write, so its
 * history is bounded by its pages (at most MAX_MEMBERSHIP_PAGES updates of at most 1 MB each) and it
 * never needs to continue as new: its state could not be carried in one continue-as-new payload anyway.
 */
export async function membershipWorkflow(plan: MembershipPlan): Promise<void> {
  const problem = planProblem(plan);
  if (problem) throw wf.ApplicationFailure.nonRetryable(`membership: ${problem}`, MEMBERSHIP_REFUSED);
  const state = new MembershipState(plan);
  const refuse = (why: string | null) => {
    if (why) throw wf.ApplicationFailure.create({ type: MEMBERSHIP_REFUSED, message: why, nonRetryable: true });
  };

  wf.setHandler(storePageUpdate, (page) => state.addPage(page), {
    validator: (page) => refuse(state.pageProblem(page)),
    description: 'Store the next page of devices (in order, checked against its digest and the limits)',
  });
  wf.setHandler(sealUpdate, () => state.seal(), {
    validator: () => refuse(state.sealProblem()),
    description: 'Seal the membership: every page stored and the whole matches the digest it was started with',
  });
  wf.setHandler(progressQuery, () => state.progress(), {
    description: 'Pages stored and whether the membership is sealed',
  });
  wf.setHandler(pageQuery, (index) => state.page(index), {
    description: 'A page of a sealed membership (null: none, or not sealed yet)',
  });

  if (!(await wf.condition(() => state.isSealed(), UPLOAD_WINDOW))) {
    throw wf.ApplicationFailure.nonRetryable(
      `membership ${plan.digest.slice(0, 12)}…: not sealed within ${UPLOAD_WINDOW} (${state.progress().pagesStored} of ${plan.pages} pages)`,
      MEMBERSHIP_REFUSED,
    );
  }
  // Sealed: it only answers queries from now on, for as long as rollouts may name it.
  await wf.condition(() => false);
}
