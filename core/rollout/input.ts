import type { MembershipRef } from '../membership';
import type { Dependency } from '../dependencies';
import type { PayloadFile, Profile } from '../revision';
import type { FloorIntent } from '../floor';
import type { Envelope } from '../signing';
import type { SignedStatement } from '../approval';
import type { RolloutSpec } from '../spec';

/** The parts of a revision a device operation needs (no signatures, no secrets). */
export interface RevisionSteps {
  profile: string;
  revision: number;
  apply: string;
  verify: string;
  /** Payload files with `source` resolved to a path the worker can read. */
  payload: PayloadFile[];
  /**
   * The signed envelope of `revision` (public content). When present the worker verifies it against its
   * own pins before every apply and runs the verify/apply commands and payload digests inside it; the
   * strings above are then only what people read.
   */
  envelope?: Envelope;
  /**
   * Rollback through a target revision's explicit `rollback` command: that revision's envelope. The
   * command run as apply is the `rollback` inside it (verified too); verify and payload stay `envelope`'s.
   */
  rollbackOf?: Envelope;
  /**
   * The spec's `after` (apply steps only): profiles, by name and revision, the device must verify before
   * this apply starts there. References only: the worker runs each one's verify from its own signed
   * envelope of that revision, never a command carried here.
   */
  after?: Dependency[];
  /**
   * What this apply asks of the device's floor (core/floor.ts): raise it when the apply is confirmed, or
   * go below it as the compensation or revert of the rollout that raised it. Not signed content: the
   * floor rule itself (on the device, by the worker or agent) decides what it may do. Absent in
   * histories recorded before the floor moved into the apply.
   */
  floor?: FloorIntent;
}

/**
 * What a rollout workflow starts from: assembled once by intake (the CLI's `start` and `plan`, the
 * nightly canary) and carried in history. References only, never secrets.
 */
export interface RolloutInput {
  rolloutId: string;
  /**
   * What seeds the plan's random picks (the canary) when not the id itself: `start` gives each rollout an
   * id of its own but seeds it from `rollout:<profile>`, the id `wavegate plan` uses, so the
   * plan shown before a start is the plan the rollout makes. Absent in histories from before: the id seeds.
   */
  planSeed?: string;
  spec: RolloutSpec;
  /** Scope and the worker-side metrics source; device-side health commands are in the signed revision (`steps.envelope`). */
  profile: Profile;
  /** The target revision's device steps (commands and payload references, never secrets). */
  steps: RevisionSteps;
  /** The way back: `fromRevision`'s steps, with `apply` replaced by the explicit rollback command if any. */
  rollbackSteps: RevisionSteps;
  /** Whether the target revision's verify reads the fact back; if not, devices only reach `claimed`. */
  provable: boolean;
  risk: 'risky' | 'safe';
  /**
   * Without `membership`: the inventory file the worker reads at snapshot time (`--inventory-on-worker`,
   * and every rollout recorded before the membership entity). With it: where the CLI read the
   * inventory, for people only.
   */
  inventoryPath: string;
  /** The membership entity the CLI stored (core/membership.ts): the snapshot reads it through the client, whichever worker runs it. */
  membership?: MembershipRef;
  /** In-flight fraction per pool (default 5%, at least one device). */
  poolBudgets: Record<string, number>;
  startedBy: string;
  /**
   * The starter's signed statement (`wavegate start --key`, core/approval.ts): what the two-person rule takes
   * as the starter, verified by the worker against the profile's approvers.yaml. `startedBy` is only what the
   * CLI was told. Public (a signature, no secret).
   */
  startStatement?: SignedStatement;
  /**
   * Only these devices of the profile's scope (e.g. `wavegate converge`: the devices a completed rollout
   * left behind); absent: every device in scope.
   */
  onlyDevices?: string[];
  /** Phases with more devices than this run in child workflows over slices of this size (history bounds). */
  sliceSize?: number;
  /**
   * `slices` (core/rollout/sliced-plan.ts; the CLI sets it for large fleets): the parent holds no
   * per-device record of a sliced phase; the plan is made from the membership by an activity, each slice
   * loads its own devices, keeps their states and audit trail, and answers with counts. Needs `membership`.
   * Absent: every device's record in the parent.
   */
  records?: 'slices';
  /**
   * A canary run (nightly canary): only the first phase runs, with its gate and health gate; the gate's
   * outcome is the verdict, and the canary goes back to fromRevision unless `keep`.
   */
  canary?: { keep: boolean };
  /**
   * A revert (`wavegate revert`): this rollout undoes that completed one, from its toRevision back to its
   * fromRevision (so here `spec.toRevision < spec.fromRevision`, which a user's spec may never say). The
   * planner then takes devices at the reverted revision as candidates, and the floor ends at the target.
   */
  reverts?: RevertOf;
}

/** The completed rollout a revert undoes: its id and the run (a rollout id is re-used by later rollouts). */
export interface RevertOf {
  rolloutId: string;
  runId: string;
  /** When that run closed (epoch ms, Temporal's close time): a device's revert window runs from it. Absent in older reverts. */
  closedAt?: number;
}
