import * as wf from '@temporalio/workflow';
import type { PlannedPhase } from '../../core/planner';
import type { PlanShape } from '../../core/rollout/sliced-plan';
import type { SliceUnit } from '../../core/rollout/sliced-records';
import type { DeviceSnapshot } from '../../core/rollout-state';
import type { SlicedPlanSource } from '../../activities/sliced-records';
import { planSlices, probeDevices } from '../activity-proxies';
import { DEFAULT_SLICE, type BatchResult, type SliceRun } from '../batches';
import type { SliceCounts, SliceSource } from '../slice';
import { MAX_CANARY_PROBE_ROUNDS, type PhaseRecords, type PhaseRecordsContext, type SlicesToUndo } from './types';

/**
 * An input with `records: 'slices'` (and a membership) keeps no per-device record of a sliced phase in
 * the rollout (core/rollout/sliced-plan.ts): the plan's shape from an activity, slices that load their
 * own devices and keep their records, one linking audit record per slice. Only such inputs ask.
 */
export const SLICED_RECORDS = 'sliced-records';

/** The slices of a phase (or of the compensation) of sliced records: what each loads, and which apply slice a rollback undoes. */
interface RecordKeepingSlices {
  /** The phase's index (-1: the compensation). */
  phase: number;
  mode: 'apply' | 'rollback';
  count: number;
  size(k: number): number;
  source(k: number): SliceSource;
  /** A rollback slice: the apply slice it undoes. */
  undoes?(k: number): string;
}

/**
 * Sliced records (docs/architecture.md "Sliced records"): the rollout holds counts of its sliced phases,
 * the slices their devices. Phases of at most one slice (a canary) are named in the plan's shape and run
 * as inline records do (RolloutStages.applyPhase).
 */
export class SlicedPhaseRecords implements PhaseRecords {
  /** The sliced plan's shape and what a slice needs to load its devices from the same plan. */
  private shape: PlanShape | undefined;
  private probed: DeviceSnapshot[] = [];

  constructor(private readonly ctx: PhaseRecordsContext) {}

  /** No page of the snapshot comes here: the plan's activity reads the membership. */
  async snapshot(): Promise<void> {
    wf.patched(SLICED_RECORDS);
  }

  /**
   * An async function returning the shape's promise, as the stage's `plan` was when it branched here:
   * the same turns before the story goes on.
   */
  async plan(): Promise<PlanShape> {
    return this.planShape();
  }

  /**
   * The plan's shape from the activity (the membership read on the worker), the canary's devices probed
   * and the plan made again until every canary device was probed, as inline records plan.
   */
  private async planShape(): Promise<PlanShape> {
    const { input } = this.ctx;
    let shape = await planSlices.executeWithOptions({ summary: `plan ${input.spec.profile} (sliced records)` }, [
      this.planSource(),
    ]);
    for (let round = 0; round < MAX_CANARY_PROBE_ROUNDS && shape.toProbe.length > 0; round++) {
      const found = await probeDevices.executeWithOptions(
        { summary: `probe ${shape.toProbe.length} canary candidate(s) of ${input.spec.profile}` },
        [{ profile: input.spec.profile, devices: shape.toProbe }],
      );
      const byId = new Map(found.map((d) => [d.id, d]));
      this.probed = [...this.probed.filter((d) => !byId.has(d.id)), ...found];
      shape = await planSlices.executeWithOptions({ summary: `plan ${input.spec.profile} again (probed)` }, [
        this.planSource(),
      ]);
    }
    this.shape = shape;
    return shape;
  }

  private planSource(): SlicedPlanSource {
    const { input } = this.ctx;
    return {
      membership: input.membership!,
      scope: input.profile.scope,
      ...(input.onlyDevices ? { only: input.onlyDevices } : {}),
      plan: {
        rolloutId: input.rolloutId,
        ...(input.planSeed !== undefined ? { planSeed: input.planSeed } : {}),
        spec: input.spec,
        poolBudgets: input.poolBudgets,
        risk: input.risk,
        ...(input.reverts ? { reverts: input.reverts } : {}),
        sliceSize: input.sliceSize ?? DEFAULT_SLICE,
        probed: this.probed,
      },
    };
  }

  adopt(): void {
    this.ctx.model.adoptShape(this.shape!);
  }

  /** The devices the plan settled, by count: the plan (its digest) names each one. */
  recordPlan(named: Promise<void>): Promise<void> {
    const shape = this.shape!;
    return named
      .then(() =>
        this.ctx.audit('devices.outcome', {
          evidence: {
            mode: 'plan',
            plan: shape.digest,
            alreadyApplied: shape.alreadyApplied,
            notForMe: shape.notForMe,
            sliced: shape.phases
              .filter((p) => p.slices > 0)
              .map((p) => ({ phase: p.name, devices: p.size, slices: p.slices })),
          },
        }),
      )
      .then(() => undefined);
  }

  /**
   * A sliced phase: its slices load their devices from the adopted plan and keep their records; each
   * one's end links its trail into the rollout's (linkSlice). A device the snapshot found offline under
   * `offline: fail` is counted failed by its slice, not by the phase's failure gate.
   */
  applyInSlices(phase: PlannedPhase): Promise<BatchResult> | undefined {
    const { model, input, batches } = this.ctx;
    if (!model.sliced.isSliced(phase.index)) return undefined;
    const size = model.phase(phase.index).devices;
    const sliceSize = input.sliceSize ?? DEFAULT_SLICE;
    const digest = this.shape!.digest;
    return batches.runSlices(
      this.recordKeeping({
        phase: phase.index,
        mode: 'apply',
        count: Math.ceil(size / sliceSize),
        size: (k) => Math.min(sliceSize, size - k * sliceSize),
        source: (k) => ({ plan: { ...this.planSource(), digest, phase: phase.index, slice: k } }),
      }),
      'apply',
      phase.name,
      phase.index,
    );
  }

  /** The sliced phases' devices no slice ran, by count (the plan names them). */
  skipUnstarted(reason: string, exceptPhase?: number): void {
    const { model, audit } = this.ctx;
    const unstarted = model.closeUnstartedSlices(reason, exceptPhase);
    if (unstarted.length)
      void audit('devices.skipped', {
        reason,
        evidence: { phases: unstarted.map((u) => ({ phase: model.phase(u.phase).name, devices: u.devices })) },
      });
  }

  /**
   * The apply slices that started devices, last first; each is put back by a rollback slice that reads
   * what it started. The sliced phases come after the inline ones (a canary): they are put back first.
   */
  slicesToUndo(): SlicesToUndo | undefined {
    const slices: SliceUnit[] = this.ctx.model.sliced.toUndo();
    if (slices.length === 0) return undefined;
    return {
      devices: slices.reduce((n, u) => n + (u.started ?? 0), 0),
      run: () =>
        this.ctx.batches.runSlices(
          this.recordKeeping({
            phase: -1,
            mode: 'rollback',
            count: slices.length,
            size: (k) => slices[k]!.started ?? 0,
            source: (k) => ({ undo: { workflowId: slices[k]!.workflowId } }),
            undoes: (k) => slices[k]!.workflowId,
          }),
          'rollback',
          'rollback',
        ),
    };
  }

  /** Slices that load their own devices: the model counts each from its start, and its end is linked into the trail. */
  private recordKeeping(slices: RecordKeepingSlices): SliceRun {
    const { model } = this.ctx;
    return {
      count: slices.count,
      size: slices.size,
      input: (k) => ({ source: slices.source(k) }),
      started: (k, workflowId) => {
        const undoes = slices.undoes?.(k);
        model.sliceStarted({
          workflowId,
          phase: slices.phase,
          mode: slices.mode,
          devices: slices.size(k),
          ...(undoes ? { undoes } : {}),
        });
      },
      ended: (workflowId, result) => {
        model.sliceEnded(workflowId, result.records!);
        this.linkSlice(slices.mode, result.records!);
      },
    };
  }

  /** A slice ended: its own trail, linked into the rollout's by its head. */
  private linkSlice(mode: 'apply' | 'rollback', records: SliceCounts): void {
    void this.ctx.audit('devices.outcome', {
      evidence: {
        mode,
        trail: records.trail.id,
        head: records.trail.head,
        devices: records.counts.total,
        counts: records.counts,
      },
    });
  }
}
