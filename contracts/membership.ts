import * as wf from '@temporalio/workflow';
import type { MembershipPage, MembershipPlan, MembershipProgress } from '../core/membership';

/**
 * The messages of a membership entity `membership:<digest>` (workflows/membership.ts; state and checks
 * in core/membership.ts), for the workflow and its client (clients/membership.ts) alike.
 */
export const MEMBERSHIP_WORKFLOW = 'membershipWorkflow';
export type MembershipWorkflow = (plan: MembershipPlan) => Promise<void>;

/** The failure type of a refused page, seal or plan. */
export const MEMBERSHIP_REFUSED = 'MembershipRefused';

export const storePageUpdate = wf.defineUpdate<MembershipProgress, [MembershipPage]>('storePage');
export const sealUpdate = wf.defineUpdate<MembershipProgress, []>('seal');
export const progressQuery = wf.defineQuery<MembershipProgress>('progress');
export const pageQuery = wf.defineQuery<MembershipPage | null, [number]>('page');
