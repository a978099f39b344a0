import * as wf from '@temporalio/workflow';
import { WavegatePhase, WavegateProfile, WavegateRevision, WavegateState } from '../contracts/search-attributes';
import { canaryRolloutId, rolloutsBlockingCanary, skippedReason } from '../core/exclusion';
import type { CanaryVerdict, RolloutStatus } from '../core/rollout/status';
import {
  appendAudit,
  fleetRevision,
  freezeCovering,
  newestRevisionAbove,
  prepareCanary,
  runningOfProfile,
} from './activity-proxies';
import { freezeLine } from '../core/freeze';
import { auditEvent } from './audit-trail';
import { searchAttributesOf } from './progress';
import { rolloutWorkflow } from './rollout';

/**
 * The nightly canary, started by a Temporal Schedule: take the newest registered revision
 * above the fleet's, run only its canary phase (gate and health gate) as a child rollout in canary mode,
 * and record the verdict — as a search attribute on itself, in its own audit trail, and as its result.
 * The child puts the canary back on the fleet's revision unless `keep`. Nothing newer registered:
 * `nothing-to-test`, and no device is touched.
 */
export interface NightlyCanaryInput {
  profile: string;
  /** The inventory and profiles directory as the worker sees them. */
  inventoryPath: string;
  profilesDir: string;
  /** A spec whose first phase is the canary (revisions are filled in); default: one device, 5 min gate. */
  specPath?: string;
  /** Leave the canary on the new revision after a verdict. */
  keep: boolean;
  /** Who made the schedule (recorded as the rollout's starter). */
  createdBy: string;
}

/** `skipped`: a rollout of the profile was running, so the canary did not run (core/exclusion.ts). */
export type NightlyVerdict = CanaryVerdict | 'skipped';

/** A nightly canary checks that no rollout of its profile runs before it reads anything. */
export const CANARY_ROLLOUT_EXCLUSION = 'canary-rollout-exclusion';

/**
 * A nightly canary in scope of a freeze in force (core/freeze.ts) is skipped, naming the freeze, before its rollout
 * starts. Checked here, by an activity reading the freeze entity, rather than by the freeze pausing the schedules:
 * a paused schedule still runs on `schedule trigger` and on a backfill, a schedule created during the freeze would
 * not be paused, and a lift would have to tell the schedules it paused from those an operator paused. Here the
 * check is made at the moment the canary would change a device, whoever started it.
 */
export const CANARY_FREEZE = 'canary-freeze';

export interface NightlyCanaryResult {
  verdict: NightlyVerdict;
  /** Why, in one line. */
  reason: string;
  fleetRevision: number | null;
  revision: number | null;
  /** The child rollout's id (absent when nothing was tested). */
  rolloutId?: string;
  kept: boolean;
}

export async function nightlyCanaryWorkflow(input: NightlyCanaryInput): Promise<NightlyCanaryResult> {
  const info = wf.workflowInfo();
  let state = 'running';
  let phase = 'baseline';
  let revision: number | null = null;
  let verdict: NightlyVerdict | undefined;
  const publish = () =>
    wf.upsertSearchAttributes(searchAttributesOf({ profile: input.profile, state, phase, revision, verdict }));
  publish();

  const finish = async (result: Omit<NightlyCanaryResult, 'kept'>): Promise<NightlyCanaryResult> => {
    verdict = result.verdict;
    state = 'completed';
    phase = 'done';
    publish();
    wf.setCurrentDetails(
      `**nightly canary of ${input.profile}**: verdict **${result.verdict}** — ${result.reason}${result.rolloutId ? ` (rollout \`${result.rolloutId}\`)` : ''}`,
    );
    await appendAudit.executeWithOptions({ summary: `audit canary.verdict ${result.verdict}` }, [
      auditEvent(info.workflowId, 1, 'canary.verdict', {
        phase: null,
        by: 'schedule',
        reason: result.verdict,
        counts: null,
        evidence: { ...result, kept: input.keep },
      }),
    ]);
    return { ...result, kept: input.keep && result.rolloutId !== undefined };
  };

  // Never while a rollout of the profile runs: the canary would race it for the same devices.
  wf.deprecatePatch(CANARY_ROLLOUT_EXCLUSION);
  const running = await runningOfProfile.executeWithOptions({ summary: `rollouts of ${input.profile} running?` }, [
    { profile: input.profile },
  ]);
  const blocking = rolloutsBlockingCanary(input.profile, running);
  if (blocking.length)
    return finish({ verdict: 'skipped', reason: skippedReason(blocking), fleetRevision: null, revision: null });
  const target = { profile: input.profile, inventoryPath: input.inventoryPath, profilesDir: input.profilesDir };
  const base = await fleetRevision.executeWithOptions({ summary: `read ${input.profile} fleet revision` }, [target]);
  if (base.revision === null) {
    return finish({
      verdict: 'nothing-to-test',
      reason: `no device of the ${input.profile} fleet has a revision marker: no baseline to go back to`,
      fleetRevision: null,
      revision: null,
    });
  }
  phase = 'registry';
  const newest = await newestRevisionAbove.executeWithOptions(
    { summary: `newest ${input.profile} revision above r${base.revision}` },
    [{ profile: input.profile, above: base.revision }],
  );
  if (!newest) {
    return finish({
      verdict: 'nothing-to-test',
      reason: `nothing registered above the fleet's r${base.revision}`,
      fleetRevision: base.revision,
      revision: null,
    });
  }
  revision = newest.revision;
  phase = 'canary';
  publish();
  const rolloutId = canaryRolloutId(input.profile, info.workflowId);
  const rolloutInput = await prepareCanary.executeWithOptions(
    { summary: `prepare canary r${base.revision} → r${newest.revision}` },
    [
      {
        ...target,
        ...(input.specPath ? { specPath: input.specPath } : {}),
        fromRevision: base.revision,
        toRevision: newest.revision,
        keep: input.keep,
        rolloutId,
        startedBy: `nightly canary (${input.createdBy})`,
      },
    ],
  );
  if (wf.patched(CANARY_FREEZE)) {
    // The pools are those of the canary's inventory, as for a start (core/freeze.ts scopeCovers).
    const frozen = await freezeCovering
      .executeWithOptions({ summary: `${input.profile} frozen?` }, [
        { profile: input.profile, pools: Object.keys(rolloutInput.poolBudgets) },
      ])
      .then(
        (window) => (window ? freezeLine(window) : null),
        // Not knowing whether a freeze holds is not a licence to change devices during one.
        (err: unknown) => `the freeze could not be read (${(err as Error).message})`,
      );
    if (frozen)
      return finish({
        verdict: 'skipped',
        reason: `nightly canary of ${input.profile} refused: ${frozen}`.slice(0, 500),
        fleetRevision: base.revision,
        revision: newest.revision,
      });
  }
  let status: RolloutStatus;
  try {
    status = await wf.executeChild(rolloutWorkflow, {
      workflowId: rolloutId,
      args: [rolloutInput],
      typedSearchAttributes: [
        { key: WavegateProfile, value: input.profile },
        { key: WavegateState, value: 'running' },
        { key: WavegatePhase, value: 'snapshot' },
        { key: WavegateRevision, value: newest.revision },
      ],
      staticSummary: `canary of ${input.profile} r${base.revision} → r${newest.revision}${input.keep ? ' (kept)' : ''}`,
    });
  } catch (err) {
    if (wf.isCancellation(err)) throw err;
    return finish({
      verdict: 'inconclusive',
      reason: `the canary rollout did not finish: ${(err as Error).message}`,
      fleetRevision: base.revision,
      revision: newest.revision,
      rolloutId,
    });
  }
  const childVerdict = status.verdict ?? 'inconclusive';
  const evidence = status.phases[0]?.evidence?.join('; ');
  return finish({
    verdict: childVerdict,
    reason:
      `r${newest.revision} on ${status.phases[0]?.devices ?? 0} canary device(s)${evidence ? `: ${evidence}` : ''}`.slice(
        0,
        500,
      ),
    fleetRevision: base.revision,
    revision: newest.revision,
    rolloutId,
  });
}
