import type { Plan } from '../../core/planner';
import { canaryToProbe, planRollout } from '../../core/rollout/plan';
import type { RolloutInput } from '../../core/rollout/input';
import type { RolloutModel } from '../../core/rollout/model';
import { probeDevices, snapshotFleet } from '../activity-proxies';
import { MAX_CANARY_PROBE_ROUNDS, type PhaseRecords } from './types';

/** Devices per snapshot activity: a 10,000-device fleet is not one payload. */
const SNAPSHOT_PAGE = 1_000;

/**
 * Inline records: every device of every phase is named in the rollout's model (and so in its history):
 * the snapshot's pages, the plan, each batch's devices and their per-device audit records. No phase runs
 * in slices that keep its records (a large phase still runs in slice children, which answer each
 * device's state: workflows/batches.ts).
 */
export class InlinePhaseRecords implements PhaseRecords {
  private made: Plan | undefined;

  constructor(
    private readonly input: RolloutInput,
    private readonly model: RolloutModel,
  ) {}

  /** The membership in scope, page by page, fixed for the rollout. */
  async snapshot(): Promise<void> {
    const { spec, profile } = this.input;
    const source = this.input.membership
      ? { membership: this.input.membership }
      : { inventoryPath: this.input.inventoryPath };
    for (let offset = 0; ; offset += SNAPSHOT_PAGE) {
      const page = await snapshotFleet.executeWithOptions(
        { summary: `snapshot ${spec.profile} fleet from #${offset}` },
        [
          {
            ...source,
            profile: spec.profile,
            scope: profile.scope,
            offset,
            limit: SNAPSHOT_PAGE,
            ...(this.input.onlyDevices ? { only: this.input.onlyDevices } : {}),
            probe: false,
          },
        ],
      );
      this.model.addSnapshot(page.devices);
      if (offset + SNAPSHOT_PAGE >= page.total) break;
    }
  }

  /**
   * The plan from the snapshot. After a membership-only snapshot the canary must still be devices that
   * need the change: its devices are probed (only those, a handful), what was learned replaces their
   * snapshot entries, and the plan is made again, until every canary device has been probed (one already
   * at the target leaves the phases; an unreachable one goes last).
   */
  async plan(): Promise<Plan> {
    const { input, model } = this;
    let plan = planRollout(input, model.snapshotDevices());
    const probed = new Set<string>();
    for (let round = 0; round < MAX_CANARY_PROBE_ROUNDS; round++) {
      const ids = canaryToProbe(plan, probed);
      if (ids.length === 0) break;
      const found = await probeDevices.executeWithOptions(
        { summary: `probe ${ids.length} canary candidate(s) of ${input.spec.profile}` },
        [{ profile: input.spec.profile, devices: ids.map((id) => model.snapshotOf(id)!) }],
      );
      for (const id of ids) probed.add(id);
      model.updateSnapshot(found);
      plan = planRollout(input, model.snapshotDevices());
    }
    this.made = plan;
    return plan;
  }

  adopt(): void {
    this.model.adoptPlan(this.made!);
  }

  /** The settled devices' names are the whole record. */
  recordPlan(named: Promise<void>): Promise<void> {
    return named;
  }

  applyInSlices(): undefined {
    return undefined;
  }

  /** Every unstarted device was named and skipped by the model. */
  skipUnstarted(): void {}

  /** The changed devices are all named in the model's `toUndo`. */
  slicesToUndo(): undefined {
    return undefined;
  }
}
