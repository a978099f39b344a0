import { DURATIONS_KEPT, type PhaseTiming } from '../eta';
import type { Plan } from '../planner';
import type { DeviceState } from '../rollout-state';
import type { PhaseStage } from './status';

/** States an apply ends in: the device's apply time is from its `applying` to one of these. */
const APPLY_ENDS = new Set<DeviceState>(['applied', 'claimed', 'failed', 'skipped', 'not-for-me']);
const GATE_STAGES = new Set<PhaseStage>(['gate', 'awaiting-approval']);
const END_STAGES = new Set<PhaseStage>(['passed', 'failed', 'stopped']);

/**
 * Each phase's timing as the workflow's clock saw it (core/eta.ts PhaseTiming): when its devices started and
 * ended, when its gate began and it ended. The rollout model tells it every device and stage change; it reads
 * the time from the clock the workflow gives it (its own deterministic Date.now), so it writes nothing to the
 * history and every history replays as before. Without a clock (a model in a unit test, a slice) it keeps nothing.
 * Bounded: per phase the last DURATIONS_KEPT durations and the devices running now.
 */
export class PhaseTimings {
  private clock: (() => number) | undefined;
  private readonly phases = new Map<number, PhaseTiming>();
  /** When each device applying now started (ms), with its phase. */
  private readonly running = new Map<string, { phase: number; since: number }>();
  /** Apply slices of sliced records running now, by workflow id: their phase. */
  private readonly slices = new Map<string, number>();

  useClock(now: () => number): void {
    this.clock = now;
  }

  /** The phases' in-flight limits: each pool's limit, at most the phase's devices in that pool. */
  plan(plan: Pick<Plan, 'phases' | 'pools'>, poolOf: (id: string) => string | undefined, sizes: number[]): void {
    const limit = new Map(plan.pools.map((p) => [p.pool, p.maxInFlight]));
    plan.phases.forEach((phase, i) => {
      let inFlight = 0;
      if (phase.devices.length) {
        const perPool = new Map<string, number>();
        for (const id of phase.devices) {
          const pool = poolOf(id) ?? '';
          perPool.set(pool, (perPool.get(pool) ?? 0) + 1);
        }
        for (const [pool, n] of perPool) inFlight += Math.min(n, limit.get(pool) ?? 1);
      } else {
        // A sliced phase names no devices: its pools' limits, at most its size.
        for (const l of limit.values()) inFlight += l;
        inFlight = Math.min(inFlight, sizes[i] ?? inFlight);
      }
      this.phases.set(phase.index, { inFlight: Math.max(1, inFlight), finished: 0, durationsMs: [], runningSince: [] });
    });
  }

  device(id: string, phase: number, next: DeviceState): void {
    const now = this.clock?.();
    const t = this.phases.get(phase);
    if (now === undefined || !t) return;
    const run = this.running.get(id);
    if (next === 'applying') {
      if (!run) this.running.set(id, { phase, since: now });
      t.startedAt ??= iso(now);
      return;
    }
    if (!APPLY_ENDS.has(next)) {
      // Waiting for a dependency, or put back: no apply time to keep.
      if (run) this.running.delete(id);
      return;
    }
    if (run) {
      this.running.delete(id);
      t.durationsMs.push(now - run.since);
      if (t.durationsMs.length > DURATIONS_KEPT) t.durationsMs.shift();
      t.finished += 1;
    } else if (next !== 'not-for-me' && next !== 'skipped') {
      // Ended without its start being seen (its apply ran in a slice): counted, its time unknown.
      t.startedAt ??= iso(now);
      t.finished += 1;
    }
  }

  /**
   * Sliced records: a slice runs a phase's devices and keeps their records; the rollout learns only how many it
   * started when it ends. They count as finished then, their times unknown (the estimate uses the throughput).
   */
  sliceStarted(workflowId: string, phase: number, mode: 'apply' | 'rollback'): void {
    const now = this.clock?.();
    const t = this.phases.get(phase);
    if (now === undefined || !t || mode !== 'apply') return;
    this.slices.set(workflowId, phase);
    t.startedAt ??= iso(now);
  }
  sliceEnded(workflowId: string, started: number): void {
    const phase = this.slices.get(workflowId);
    if (phase === undefined) return;
    this.slices.delete(workflowId);
    this.phases.get(phase)!.finished += started;
  }

  stage(index: number, stage: PhaseStage): void {
    const now = this.clock?.();
    const t = this.phases.get(index);
    if (now === undefined || !t) return;
    if (stage === 'applying') t.startedAt ??= iso(now);
    if (GATE_STAGES.has(stage)) t.gateStartedAt ??= iso(now);
    if (END_STAGES.has(stage)) t.endedAt ??= iso(now);
  }

  /** A phase's timing for the status, with the devices applying now. */
  of(index: number): PhaseTiming | undefined {
    const t = this.phases.get(index);
    if (!t || !this.clock) return undefined;
    const runningSince: string[] = [];
    for (const r of this.running.values()) if (r.phase === index) runningSince.push(iso(r.since));
    return { ...t, durationsMs: [...t.durationsMs], runningSince };
  }
}

function iso(ms: number): string {
  return new Date(ms).toISOString();
}
