import * as wf from '@temporalio/workflow';
import { isFinalState } from '../core/controls';
import {
  Deadline,
  deadlineAction,
  deadlineReason,
  hasDeadlines,
  phaseDeadlineOf,
  phaseInProgress,
} from '../core/rollout/deadline';
import type { RolloutInput } from '../core/rollout/input';
import type { RolloutModel } from '../core/rollout/model';
import { DEFAULT_SLICE } from './batches';
import type { RolloutStages } from './rollout-stages';

/** New executions whose spec sets a deadline run the deadline watcher (docs/architecture.md, patches). */
export const ROLLOUT_DEADLINES = 'rollout-deadlines';

/**
 * What the story needs from the watcher. The watcher only records what a passed deadline asks for on
 * the model (a pause, an abort, a rollback); the story ends the rollout, through its one end().
 */
export interface DeadlineWatch {
  /** The phases are over: no deadline fires after this. */
  stop(): void;
}

/**
 * Starts the watcher when the spec sets a deadline (never for a nightly canary run).
 */
export function watchDeadlines(
  input: RolloutInput,
  model: RolloutModel,
  stages: RolloutStages,
): DeadlineWatch | undefined {
  if (input.canary || !hasDeadlines(input.spec)) return undefined;
  wf.deprecatePatch(ROLLOUT_DEADLINES);
  return new DeadlineWatcher(input, model, stages);
}

/**
 * A background loop beside the story: it samples the active clocks whenever the rollout's state changes
 * (pause, resume, a phase starting or ending) and otherwise sleeps the least active time left. While
 * paused it waits for the resume with no timer at all, so a pause of any length never fires anything.
 * A passed deadline changes the model the way a control does (pause, abort, or a rollback requested on
 * the model), so the gate timer, the approval wait and the device batches react to it exactly as they
 * react to an operator, and the story ends the rollout as it ends any other.
 */
class DeadlineWatcher implements DeadlineWatch {
  private ended = false;
  private readonly progress: Deadline | undefined;
  /** One deadline per phase, created at the phase's first device start; each passes at most once. */
  private readonly phases = new Map<number, Deadline>();
  private readonly sliceSize: number;

  constructor(
    private readonly input: RolloutInput,
    private readonly model: RolloutModel,
    private readonly stages: RolloutStages,
  ) {
    const { progressDeadline } = input.spec;
    this.sliceSize = input.sliceSize ?? DEFAULT_SLICE;
    if (progressDeadline !== undefined)
      this.progress = new Deadline('progressDeadline', progressDeadline, Date.now(), this.active());
    void this.run().catch((err) => {
      // A cancel ends the watcher with the workflow's root scope; anything else only costs the deadlines.
      if (!wf.isCancellation(err)) model.warn(`deadlines stopped: ${String(err)}`.slice(0, 300));
    });
  }

  stop(): void {
    this.ended = true;
  }

  /** Past the phases: stopped by the story, aborting, compensating, or finished. */
  private over(): boolean {
    const m = this.model;
    return this.ended || m.stopped || m.phaseName === 'rollback' || m.phaseName === 'done' || isFinalState(m.state);
  }

  /** Active time: running, not paused (by anyone) and not held by the audit trail. */
  private active(): boolean {
    return !this.over() && this.model.state === 'running' && !this.model.paused;
  }

  /**
   * The phase whose deadline runs now: the latest one whose first device started and whose health gate
   * has not ended. A phase run in slices learns its first start only when a slice ends, so it counts
   * from the moment it starts applying (its size is the model's, whichever records keep its devices).
   */
  private livePhase(): number | undefined {
    const planned = this.model.plan?.phases ?? [];
    for (let i = planned.length - 1; i >= 0; i--) {
      const phase = this.model.phase(i);
      if (!phaseInProgress(phase.stage)) continue;
      if (this.model.phaseStarted(i) || phase.devices > this.sliceSize) return i;
    }
    return undefined;
  }

  /** What the loop waits on: any change here means a new sample. */
  private key(): string {
    return `${this.active()}|${this.livePhase() ?? '-'}|${this.over()}`;
  }

  private async run(): Promise<void> {
    for (;;) {
      const now = Date.now();
      const active = this.active();
      const live = this.livePhase();
      this.progress?.sample(now, active);
      for (const [index, deadline] of this.phases) deadline.sample(now, active && index === live);
      if (live !== undefined && !this.phases.has(live)) {
        const limit = phaseDeadlineOf(this.input.spec, this.model.plan!.phases[live]!);
        if (limit !== undefined) this.phases.set(live, new Deadline('phaseDeadline', limit, now, active, live));
      }
      if (this.over()) return;

      const running = [this.progress, live === undefined ? undefined : this.phases.get(live)].filter(
        (d): d is Deadline => d !== undefined && !d.fired,
      );
      const due = running.find((d) => d.due(now));
      if (due && active) {
        this.pass(due, now);
        continue;
      }
      const key = this.key();
      if (!active || running.length === 0) await wf.condition(() => this.key() !== key);
      else
        await wf.condition(() => this.key() !== key, Math.min(...running.map((d) => d.remaining(now))), {
          summary: 'progress deadline',
        });
    }
  }

  /** A deadline passed: record it (audit and status), then carry out `onDeadline`. */
  private pass(deadline: Deadline, now: number): void {
    deadline.fired = true;
    const { model, stages } = this;
    const action = deadlineAction(this.input.spec);
    const phaseIndex = deadline.phase ?? this.livePhase();
    // A progress deadline between two phases (or waiting for a window) names the phase the story is at.
    const phase = phaseIndex !== undefined ? model.phase(phaseIndex).name : model.plan ? model.phaseName : null;
    const passedPhases = new Set(
      (model.plan?.phases ?? []).map((p) => p.index).filter((i) => model.phase(i).stage === 'passed'),
    );
    const unconfirmed = model.unconfirmed(passedPhases, deadline.phase);
    const reason = deadlineReason(deadline.kind, deadline.limitMs, phase, unconfirmed.count);
    const at = new Date(now).toISOString();
    model.recordDeadline(
      {
        kind: deadline.kind,
        phase,
        limitMs: deadline.limitMs,
        at,
        unconfirmed: unconfirmed.ids,
        unconfirmedCount: unconfirmed.count,
        action,
      },
      reason,
    );
    void stages.audit('deadline.passed', {
      phase,
      by: 'wavegate',
      reason,
      evidence: {
        kind: deadline.kind,
        limitMs: deadline.limitMs,
        activeMs: deadline.elapsed(now),
        action,
        unconfirmed: unconfirmed.ids,
        unconfirmedCount: unconfirmed.count,
        byState: unconfirmed.byState,
      },
    });
    switch (action) {
      case 'pause':
        model.pauseFor('deadline', reason);
        void stages.audit('rollout.paused', { by: 'wavegate', reason });
        break;
      case 'abort': {
        // As `wavegate abort --no-rollback` by wavegate: no new device starts, changed devices stay at toRevision.
        const control = { by: 'wavegate', reason, rollback: false };
        const intent = model.applyControl('abort', control)!;
        model.recordControl('abort', control, true, at);
        void stages.audit(intent.event, { by: intent.by, reason: intent.reason, evidence: intent.evidence });
        break;
      }
      case 'rollback':
        // Stops the story the way an abort does; the story then ends it rolled back (core/rollout/ending.ts).
        model.requestDeadlineRollback(deadline.kind, reason);
        break;
    }
    stages.controlsChanged();
  }
}
