import type { AuditEventName } from '../../core/audit';
import type { PlannedPhase } from '../../core/planner';
import type { RolloutInput } from '../../core/rollout/input';
import type { RolloutModel } from '../../core/rollout/model';
import type { AuditFields } from '../audit-trail';
import type { BatchResult, DeviceBatches } from '../batches';

/** At most this many rounds of probing the canary's candidates (each probes at least one more device). */
export const MAX_CANARY_PROBE_ROUNDS = 8;

/** What a rollout's records are kept with: its input, its model, its device batches and its audit trail. */
export interface PhaseRecordsContext {
  input: RolloutInput;
  model: RolloutModel;
  batches: DeviceBatches;
  /** One audit record (RolloutStages.audit). */
  audit(event: AuditEventName, fields?: Partial<Omit<AuditFields, 'counts'>>): Promise<unknown>;
}

/**
 * Where a rollout keeps its phases' device records, chosen once at its start (index.ts `phaseRecordsFor`):
 * inline, every device by name in the rollout's own model and history (inline.ts); or sliced records, a
 * phase larger than a slice only as counts in the rollout, its devices loaded, run and recorded by its
 * slices (sliced.ts, core/rollout/sliced-plan.ts). RolloutStages asks this instead of asking which kind
 * it is, and the model asks its pure half (core/rollout/sliced-records.ts `SlicedPhases`).
 *
 * Each method issues exactly the commands, and takes exactly the promise turns, that its stage did
 * when the two kinds were branches in it: coroutines resumed in one activation emit their commands in
 * the order those turns give, so a turn more or less could reorder a recorded history's commands.
 */
export interface PhaseRecords {
  /** The membership in scope, page by page into the model (inline), or left to the plan's activity (sliced). */
  snapshot(): Promise<void>;
  /**
   * The plan, deterministic from the rollout id and the membership, its canary's devices probed (only
   * those) and the plan made again until every canary device was probed. The model adopts it at `adopt`.
   */
  plan(): Promise<{ readonly phases: readonly PlannedPhase[] }>;
  /** The model adopts the plan `plan` made: every device named, or a sliced plan's shape. */
  adopt(): void;
  /**
   * The plan's records once the settled devices' names are recorded (`named`): with sliced records, what
   * the plan settled by count (the plan's digest names each one); inline, nothing more.
   */
  recordPlan(named: Promise<void>): Promise<void>;
  /**
   * A phase whose devices run in slices that load them and keep their records: those slices, started.
   * Undefined for a phase of named devices (every phase inline; with sliced records, one of at most a slice).
   */
  applyInSlices(phase: PlannedPhase): Promise<BatchResult> | undefined;
  /** After the named pending devices were skipped: the devices no slice ran, by count (sliced records). */
  skipUnstarted(reason: string, exceptPhase?: number): void;
  /**
   * What compensation puts back of the apply slices that started devices (sliced records; undefined when
   * there is none, and always inline): how many devices, and the rollback slices that do it, last first.
   */
  slicesToUndo(): SlicesToUndo | undefined;
}

/** The rollback of the apply slices that started devices (sliced records): each one read what its apply slice started. */
export interface SlicesToUndo {
  /** How many devices the apply slices started. */
  devices: number;
  /** The rollback slices, started. */
  run(): Promise<BatchResult>;
}
