import { countDevices, DEVICE_STATES, stepState, type Counts, type DeviceState } from '../rollout-state';
import type { PlanShape } from './sliced-plan';

/** A slice of a sliced-records rollout as its parent knows it: where its records are, and its counts once it ended. */
export interface SliceUnit {
  /** The slice's workflow id: its `sliceRecords` query and its own audit trail. */
  workflowId: string;
  phase: number;
  mode: 'apply' | 'rollback';
  /** How many devices it runs. */
  devices: number;
  /** A rollback slice: the apply slice whose started devices it puts back. */
  undoes?: string;
  /** Once it ended: its devices by state (an apply slice's change with its rollback's), and how many it started. */
  counts?: Counts;
  required?: Counts;
  started?: number;
}

/** What a slice of sliced records answers (workflows/slice.ts SliceCounts), as the parent records it. */
export interface SliceReport {
  counts: Counts;
  required: Counts;
  started: number;
  /** A rollback slice: the states its devices had in the apply slice, which its own counts replace. */
  replaced?: { counts: Counts; required: Counts };
}

export function emptyCounts(): Counts {
  return countDevices([]);
}

function add(into: Counts, counts: Counts, sign: 1 | -1 = 1): void {
  for (const s of DEVICE_STATES) into[s] += sign * counts[s];
  into.total += sign * counts.total;
}

/**
 * What the model knows of the phases whose devices it does not hold by name: the pure half of the
 * rollout's PhaseRecords strategy (workflows/phase-records/), chosen once when the plan is adopted. With
 * inline records no phase is sliced (NO_SLICED_PHASES: every device is named in the model); with sliced
 * records a sliced phase is counts per slice (SlicedRecords). The model asks it instead of asking which
 * kind of records the rollout keeps.
 */
export interface SlicedPhases {
  /** How many devices in scope are reached through their agent (convergence reads the slices only then). */
  readonly agents: number;
  /** Whether a phase runs in slices that keep its devices' records (its devices never in the parent). */
  isSliced(phase: number): boolean;
  started(unit: Omit<SliceUnit, 'counts' | 'required' | 'started'>): void;
  ended(workflowId: string, report: SliceReport): void;
  /** The sliced phases' devices and the plan-settled ones the model does not name, by state. */
  counts(): Counts;
  /** Devices of sliced phases this rollout started changing. */
  changedDevices(): number;
  /** Apply slices that started devices, last started first: what compensation puts back, in that order. */
  toUndo(): SliceUnit[];
  /** Every apply slice that ended (the health gate's and convergence's devices are read from them). */
  appliedSlices(): string[];
  /** Whether a sliced phase has a slice that started a device. */
  phaseStarted(phase: number): boolean;
  /** The devices of sliced phases that no slice ran are not-started from now on; returns how many, by phase. */
  closeUnstarted(reason: string, exceptPhase?: number): Array<{ phase: number; devices: number }>;
  /** The sliced devices a deadline waits for (see SlicedRecords.unconfirmed). */
  unconfirmed(
    passedPhases: ReadonlySet<number>,
    phase?: number,
  ): { count: number; byState: Partial<Record<DeviceState, number>> };
  /** What the status shows of them: the slices (sliced records), or nothing (inline). */
  inStatus(): { slices?: SliceUnit[] };
}

/** Inline records: no phase is sliced, every device is named in the model. */
export const NO_SLICED_PHASES: SlicedPhases = {
  agents: 0,
  isSliced: () => false,
  started: () => {
    throw new Error('a slice that keeps its records started in a rollout that keeps its records inline');
  },
  ended: () => {
    throw new Error('a slice that keeps its records ended in a rollout that keeps its records inline');
  },
  counts: emptyCounts,
  changedDevices: () => 0,
  toUndo: () => [],
  appliedSlices: () => [],
  phaseStarted: () => false,
  closeUnstarted: () => [],
  unconfirmed: () => ({ count: 0, byState: {} }),
  inStatus: () => ({}),
};

/**
 * The parent's records of a sliced-records rollout (core/rollout/sliced-plan.ts): counts per phase and
 * per slice, never a device. A phase's devices are pending until the slice that runs them ends (as a
 * sliced phase always learned them), and never-started ones are counted not-started at the end. Pure:
 * the model holds one and each change goes through one method.
 */
export class SlicedRecords implements SlicedPhases {
  private readonly units: SliceUnit[] = [];
  private readonly byId = new Map<string, SliceUnit>();
  private readonly sizes = new Map<number, number>();
  /** Phases whose unstarted devices were recorded not-started (with why). */
  private readonly closed = new Map<number, string>();

  constructor(private readonly shape: Pick<PlanShape, 'phases' | 'alreadyApplied' | 'notForMe' | 'agents'>) {
    for (const p of shape.phases) if (p.slices > 0) this.sizes.set(p.index, p.size);
  }

  /** How many devices in scope are reached through their agent (convergence reads the slices only then). */
  get agents(): number {
    return this.shape.agents;
  }

  /** Whether a phase runs in slices (its devices never in the parent). */
  isSliced(phase: number): boolean {
    return this.sizes.has(phase);
  }

  started(unit: Omit<SliceUnit, 'counts' | 'required' | 'started'>): void {
    const known: SliceUnit = { ...unit };
    this.units.push(known);
    this.byId.set(unit.workflowId, known);
  }

  /** A slice ended: an apply slice's counts are its phase's; a rollback's replace its apply slice's states for the devices it ran. */
  ended(workflowId: string, report: SliceReport): void {
    const unit = this.byId.get(workflowId);
    if (!unit) return;
    unit.counts = report.counts;
    unit.required = report.required;
    unit.started = report.started;
    const undone = unit.undoes ? this.byId.get(unit.undoes) : undefined;
    if (undone?.counts && undone.required && report.replaced) {
      add(undone.counts, report.replaced.counts, -1);
      add(undone.counts, report.counts);
      add(undone.required, report.replaced.required, -1);
      add(undone.required, report.required);
    }
  }

  /** The sliced phases' devices and the plan-settled ones, by state. */
  counts(): Counts {
    const counts = emptyCounts();
    counts.applied += this.shape.alreadyApplied;
    counts['not-for-me'] += this.shape.notForMe;
    counts.total += this.shape.alreadyApplied + this.shape.notForMe;
    for (const [phase, size] of this.sizes) {
      let reported = 0;
      for (const u of this.units)
        if (u.phase === phase && u.mode === 'apply' && u.counts) {
          add(counts, u.counts);
          reported += u.devices;
        }
      const unreported = size - reported;
      counts[this.closed.has(phase) ? 'not-started' : 'pending'] += unreported;
      counts.total += unreported;
    }
    return counts;
  }

  /** Devices of sliced phases this rollout started changing. */
  changedDevices(): number {
    let n = 0;
    for (const u of this.units) if (u.mode === 'apply') n += u.started ?? 0;
    return n;
  }

  /** Apply slices that started devices, last started first: what compensation puts back, in that order. */
  toUndo(): SliceUnit[] {
    return this.units.filter((u) => u.mode === 'apply' && (u.started ?? 0) > 0).reverse();
  }

  /** Every apply slice that ended (the health gate's and convergence's devices are read from them). */
  appliedSlices(): string[] {
    return this.units.filter((u) => u.mode === 'apply' && u.counts).map((u) => u.workflowId);
  }

  /** Whether a sliced phase has a slice that started a device. */
  phaseStarted(phase: number): boolean {
    return this.units.some((u) => u.phase === phase && u.mode === 'apply' && (u.started ?? 0) > 0);
  }

  /** The devices of sliced phases that no slice ran are not-started from now on; returns how many, by phase. */
  closeUnstarted(reason: string, exceptPhase?: number): Array<{ phase: number; devices: number }> {
    const closed: Array<{ phase: number; devices: number }> = [];
    for (const [phase, size] of this.sizes) {
      if (phase === exceptPhase || this.closed.has(phase)) continue;
      let ran = 0;
      for (const u of this.units) if (u.phase === phase && u.mode === 'apply') ran += u.devices;
      this.closed.set(phase, reason);
      if (size > ran) closed.push({ phase, devices: size - ran });
    }
    return closed;
  }

  /**
   * The sliced devices a deadline waits for (core/rollout/deadline.ts unconfirmedDevices): required ones of
   * the phase (or all phases) not confirmed in a passed phase; pending ones count as unconfirmed.
   */
  unconfirmed(
    passedPhases: ReadonlySet<number>,
    phase?: number,
  ): { count: number; byState: Partial<Record<DeviceState, number>> } {
    let count = 0;
    const byState: Partial<Record<DeviceState, number>> = {};
    const note = (state: DeviceState, n: number) => {
      if (n <= 0 || stepState(state) === 'skipped') return;
      count += n;
      byState[state] = (byState[state] ?? 0) + n;
    };
    for (const [p, size] of this.sizes) {
      if (phase !== undefined && p !== phase) continue;
      let reported = 0;
      for (const u of this.units) {
        if (u.phase !== p || u.mode !== 'apply' || !u.required || !u.counts) continue;
        reported += u.devices;
        for (const s of DEVICE_STATES) {
          if ((s === 'applied' || s === 'claimed') && passedPhases.has(p)) continue;
          note(s, u.required[s]);
        }
      }
      // Best-effort devices of unreported slices count too: which ones they are is in the slices.
      note(this.closed.has(p) ? 'not-started' : 'pending', size - reported);
    }
    return { count, byState };
  }

  /** The slices, in start order, for the status (where each one's device records are). */
  inStatus(): { slices: SliceUnit[] } {
    return { slices: this.units.map((u) => ({ ...u })) };
  }
}

/**
 * A phase's devices by state as a status tells them: from its devices' records, or for a sliced phase of
 * sliced records (the status names none of its devices) from its apply slices' counts (a slice still
 * running counts none yet). What `watch` and the board draw a phase's progress from.
 */
export function phaseCounts(
  status: { devices: ReadonlyArray<{ state: DeviceState; phase: number }>; slices?: readonly SliceUnit[] },
  index: number,
): Counts {
  const members = status.devices.filter((d) => d.phase === index);
  const units = (status.slices ?? []).filter((u) => u.phase === index && u.mode === 'apply');
  if (members.length > 0 || units.length === 0) return countDevices(members);
  const counts = emptyCounts();
  for (const u of units) if (u.counts) add(counts, u.counts);
  return counts;
}
