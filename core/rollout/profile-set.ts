import type { z } from 'zod';
import type { Dependency } from '../dependencies';
import { DEFAULT_REVERT_WINDOW_MS, type FloorIntent } from '../floor';
import { lazySchema, zod } from '../lazy-schema';
import { PROFILE_NAME, PROFILE_NAME_RULE } from '../profile-name';
import { profileLockId } from '../rollout-id';
import type { DeviceState } from '../rollout-state';
import { formatPath, invalidFields, parseWith, type FieldProblem } from '../validation';
import type { DeviceOutcome } from './device-outcome';
import type { RevertOf } from './input';

/**
 * Several profiles as one rollout (docs/architecture.md, "Several profiles as one rollout"): the spec's
 * main profile (`profile`, `fromRevision`, `toRevision`) and the profiles of its `also`, applied on each
 * device in that order and undone in the reverse one. Pure: the field's schema and its checks, the order of
 * applies, what a device does next after each answer (apply the next profile, undo one, or end, and how),
 * the rollout's compensation passes, each profile's floor intent, the locks held and the words shown.
 * The main profile is the set's first member: its lock starts the rollout, its scope is the rollout's.
 */

/** At most this many profiles beside the main one: each is one more apply (and on a failure, one more undo) per device. */
export const MAX_ALSO_PROFILES = 4;

/** One profile of the set beside the main one, with its way there and back, as the main one gives them. */
export const AlsoProfile = lazySchema(() =>
  zod()
    .object({
      profile: zod().string().regex(PROFILE_NAME, PROFILE_NAME_RULE),
      fromRevision: zod().number().int().nonnegative(),
      toRevision: zod().number().int().positive(),
    })
    .strict(),
);

export const AlsoProfiles = lazySchema(() =>
  zod()
    .array(AlsoProfile)
    .min(1, 'name at least one profile, or leave "also" out')
    .max(MAX_ALSO_PROFILES, `at most ${MAX_ALSO_PROFILES} profiles beside the main one`),
);

/** A profile of the set: the main one or one of `also`. */
export type SetMember = z.output<typeof AlsoProfile>;

/** The parts of a spec the set is made of. */
export interface ProfileSetSpec {
  profile: string;
  fromRevision: number;
  toRevision: number;
  also?: readonly SetMember[];
  after?: readonly Dependency[];
}

/** A problem of `also` that needs no other file: its path under `rollout`, the value there and why. */
export interface AlsoProblem {
  path: Array<string | number>;
  value: unknown;
  message: string;
}

/**
 * Problems of a parsed `also` beside the spec's own fields: a profile named twice (the main one included),
 * a way that does not go up (as `toRevision` must be above `fromRevision` for the main one), a profile
 * both rolled out here and waited for in `after`.
 */
export function alsoProblems(spec: ProfileSetSpec): AlsoProblem[] {
  const problems: AlsoProblem[] = [];
  const first = new Map<string, number>();
  (spec.also ?? []).forEach((m, i) => {
    const at = (field: string) => ['also', i, field];
    if (m.profile === spec.profile)
      problems.push({
        path: at('profile'),
        value: m.profile,
        message: "is the rollout's own profile (rollout.profile); name each profile once",
      });
    else if (first.has(m.profile))
      problems.push({
        path: at('profile'),
        value: m.profile,
        message: `named twice (also[${first.get(m.profile)}] too); name each profile once`,
      });
    else first.set(m.profile, i);
    if (m.toRevision <= m.fromRevision)
      problems.push({
        path: at('toRevision'),
        value: m.toRevision,
        message: `must be above fromRevision (${m.fromRevision})`,
      });
    const waited = (spec.after ?? []).findIndex((d) => d.profile === m.profile);
    if (waited >= 0)
      problems.push({
        path: at('profile'),
        value: m.profile,
        message: `is waited for in after[${waited}] too: a profile is either rolled out with this one or waited for, not both`,
      });
  });
  return problems;
}

/**
 * `also` as a spec gives it (`raw`, unparsed) beside the spec's parsed fields: its members, or INVALID_INPUT
 * naming `source`, each field's path (`rollout.also[1].toRevision`), the value and the rule (exit 2).
 */
export function parseAlso(raw: unknown, spec: Omit<ProfileSetSpec, 'also'>, source: string): SetMember[] {
  const also = parseWith(
    zod().object({ rollout: zod().object({ also: AlsoProfiles }) }),
    { rollout: { also: raw } },
    source,
  ).rollout.also;
  const problems: FieldProblem[] = alsoProblems({ ...spec, also }).map((p) => ({
    path: formatPath(['rollout', ...p.path]),
    value: p.value,
    message: p.message,
  }));
  if (problems.length) invalidFields(source, problems);
  return also;
}

/** The set's members in the spec's order: the main profile first, then `also` as declared. */
export function setMembers(spec: ProfileSetSpec): SetMember[] {
  const { profile, fromRevision, toRevision } = spec;
  return [{ profile, fromRevision, toRevision }, ...(spec.also ?? [])];
}

/** Whether the spec names more than its main profile (every branch of the wiring asks this first). */
export function isProfileSet(spec: Pick<ProfileSetSpec, 'also'>): boolean {
  return (spec.also?.length ?? 0) > 0;
}

/**
 * Where a member's field is in the spec (`rollout.toRevision` for the main one, `rollout.also[0].toRevision`
 * for the next): intake checks each member's revisions, signatures and payload with the main one's checks
 * and names the field this gives, so an `also` profile is refused at plan exactly as the main one would be.
 */
export function memberField(index: number, field: 'profile' | 'fromRevision' | 'toRevision'): string {
  return index === 0 ? `rollout.${field}` : `rollout.also[${index - 1}].${field}`;
}

/**
 * The revert of a completed set: each member from its toRevision back to its fromRevision. Its devices
 * then apply the members in the reverse order (applyOrder with `reverts`): the last profile put on is the
 * first taken off, as a compensation does.
 */
export function revertMembers(members: readonly SetMember[]): SetMember[] {
  return members.map((m) => ({ profile: m.profile, fromRevision: m.toRevision, toRevision: m.fromRevision }));
}

/** The members' indices in the order each device applies them: declared, or for a revert the reverse. */
export function applyOrder(memberCount: number, reverts: boolean): number[] {
  const order = Array.from({ length: memberCount }, (_, i) => i);
  return reverts ? order.reverse() : order;
}

/**
 * What one member's apply (or undo) came to on a device, as core/rollout/device-outcome.ts `deviceOutcome`
 * says it: the state, its reason, and whether something may have run there (`touched`).
 */
export interface MemberOutcome {
  state: DeviceState;
  reason?: string;
  touched: boolean;
}

/** A device's way through the set so far: the answers of its applies in apply order, then of its undos in theirs. */
export interface SetProgress {
  applies: readonly MemberOutcome[];
  undos: readonly MemberOutcome[];
}

/** How a device's set ended: its state and why, and the members it was left changed at (for compensation and revert). */
export interface SetEnd {
  kind: 'end';
  state: DeviceState;
  reason?: string;
  /**
   * The members (indices) this rollout changed on the device and left there: what the rollout's compensation
   * or revert must undo, last first. None after a failure whose undo went through.
   */
  changed: number[];
}

/** What a device does next: apply a member, undo a member (this run's compensation of it), or end. */
export type SetStep = { kind: 'apply'; member: number } | { kind: 'undo'; member: number } | SetEnd;

const OK: ReadonlySet<DeviceState> = new Set(['applied', 'claimed']);

function label(m: SetMember, to: number): string {
  return `${m.profile} r${to}`;
}

/**
 * The next step of one device through the set, from the answers so far. In order, each member is applied
 * once the one before it is in place (applied or claimed; found in place counts, with nothing to undo).
 *
 * The first member's answer is the single-profile case: anything but in place ends the device with that
 * answer's own state (failed, skipped offline, waiting for `after`, not-for-me ahead), and a failed one is
 * the rollout's to compensate, as today. A later member's answer that is not in place, whatever it is
 * (failed, offline, ahead), is a failure of the set: the device's members are undone in the reverse order
 * (the failed member itself first when something of it may have run, then each earlier one it changed, never
 * one found in place), and only then does the device end `failed`, saying which member failed and what was
 * put back. An undo that fails stops the undoing (an earlier profile is never taken from under a later one
 * still there) and ends the device `rollback-failed`, naming what it may still hold: reported, never silent.
 */
export function nextSetStep(members: readonly SetMember[], order: readonly number[], progress: SetProgress): SetStep {
  const { applies, undos } = progress;
  const failedAt = applies.findIndex((a) => !OK.has(a.state));
  if (failedAt < 0) {
    if (applies.length < order.length) return { kind: 'apply', member: order[applies.length]! };
    const state: DeviceState = applies.every((a) => a.state === 'applied') ? 'applied' : 'claimed';
    const changed = order.filter((_, pos) => applies[pos]!.touched);
    return { kind: 'end', state, ...(changed.length ? {} : { reason: applies[0]!.reason }), changed };
  }
  const first = applies[failedAt]!;
  if (failedAt === 0) return { kind: 'end', state: first.state, reason: first.reason, changed: [] };
  const toUndo = undoPlan(order, applies, failedAt);
  const failedMember = members[order[failedAt]!]!;
  const failure = `${label(failedMember, failedMember.toRevision)} failed: ${first.reason ?? first.state}`;
  const undone = toUndo.slice(0, undos.length).map((i) => members[i]!);
  const brokenAt = undos.findIndex((u) => u.state !== 'rolled-back');
  if (brokenAt >= 0) {
    const broken = members[toUndo[brokenAt]!]!;
    const still = toUndo.slice(brokenAt).map((i) => members[i]!);
    return {
      kind: 'end',
      state: 'rollback-failed',
      reason: `${failure}; putting ${broken.profile} back to r${broken.fromRevision} failed: ${undos[brokenAt]!.reason ?? 'rollback-failed'}; the device may still hold ${still.map((m) => label(m, m.toRevision)).join(', ')}`,
      // What compensation may still try to put back: the member that failed to undo and every earlier one left.
      changed: toUndo.slice(brokenAt).reverse(),
    };
  }
  if (undos.length < toUndo.length) return { kind: 'undo', member: toUndo[undos.length]! };
  const back = undone.filter((m) => m !== failedMember);
  return {
    kind: 'end',
    state: 'failed',
    reason: `${failure}; ${back.length ? `put back ${back.map((m) => `${m.profile} r${m.fromRevision}`).join(', ')}` : 'nothing else was changed'}: the device holds none of this rollout's profiles`,
    changed: [],
  };
}

/**
 * The members a device undoes after a failure at apply position `failedAt` (> 0), in the order it undoes
 * them: the failed one when something of it may have run, then each earlier one it changed, last first.
 */
export function undoPlan(order: readonly number[], applies: readonly MemberOutcome[], failedAt: number): number[] {
  const plan: number[] = [];
  for (let pos = failedAt; pos >= 0; pos--) if (applies[pos]!.touched) plan.push(order[pos]!);
  return plan;
}

/** One pass of a rollout's compensation: one member put back on the devices that hold it. */
export interface CompensationPass {
  member: number;
  devices: string[];
}

/**
 * A rollout's compensation (or a watch's revert) over a set: one pass per member, the last applied first,
 * each over the devices left changed at it (`changed`: device id → SetEnd.changed; in the order given, the
 * last changed first). Passes run one after another; a device whose undo fails in one pass is taken out of
 * the later ones (compensationDevices), so no earlier profile is removed from under a later one still there.
 */
export function compensationPasses(
  order: readonly number[],
  changed: ReadonlyMap<string, readonly number[]>,
): CompensationPass[] {
  return [...order]
    .reverse()
    .map((member) => ({ member, devices: [...changed].filter(([, ms]) => ms.includes(member)).map(([id]) => id) }))
    .filter((p) => p.devices.length > 0);
}

/** A pass's devices without those whose undo failed in an earlier pass (they keep the member, reported). */
export function compensationDevices(pass: CompensationPass, undoFailed: ReadonlySet<string>): string[] {
  return pass.devices.filter((id) => !undoFailed.has(id));
}

/** Who a floor intent is for: this rollout and run, its revert window, and the rollout it reverts if any. */
export interface FloorContext {
  rollout: string;
  run: string;
  revertWindowMs?: number;
  reverts?: RevertOf;
}

/**
 * What a member's apply or undo asks of that profile's floor on the device (each profile keeps its own,
 * `~/.wavegate/profiles/<profile>/floor`): the same intent the single-profile rollout gives its steps
 * (workflows/batches.ts `stepsFor`), with the member's own revisions. An apply raises the member's floor to
 * its target with its fromRevision as the way back; an undo is this run's compensation of it; a revert's
 * apply goes below the floor of the run it reverts, and raises its own with no way back.
 */
export function memberFloor(mode: 'apply' | 'rollback', member: SetMember, ctx: FloorContext): FloorIntent {
  const { rollout, run, reverts } = ctx;
  if (mode === 'rollback') return { rollout, run, below: { kind: 'compensation', rollout, run } };
  if (reverts)
    return {
      rollout,
      run,
      raise: { from: member.toRevision, windowMs: 0 },
      ...(reverts.closedAt !== undefined
        ? { below: { kind: 'revert', rollout: reverts.rolloutId, run: reverts.runId, closedAt: reverts.closedAt } }
        : {}),
    };
  return {
    rollout,
    run,
    raise: { from: member.fromRevision, windowMs: ctx.revertWindowMs ?? DEFAULT_REVERT_WINDOW_MS },
  };
}

/**
 * The locks a set's rollout holds while it runs: the main profile's first (it starts the rollout as its
 * child, workflows/profile-lock.ts), then the others' in name order, so two starts of sets that overlap
 * find their conflict on the same lock and name the same holder.
 */
export function setLockIds(members: readonly SetMember[]): string[] {
  const [main, ...rest] = members;
  return [main!, ...[...rest].sort((a, b) => (a.profile < b.profile ? -1 : a.profile > b.profile ? 1 : 0))].map((m) =>
    profileLockId(m.profile),
  );
}

/** The set as status, plan and the audit's `rollout.started` name it: `pkg r2 → r3, then motd r6 → r7`. */
export function setLabel(members: readonly SetMember[], order: readonly number[]): string {
  return order
    .map((i) => members[i]!)
    .map((m) => `${m.profile} r${m.fromRevision} → r${m.toRevision}`)
    .join(', then ');
}

/** At most this many devices named in a scope problem (the count says how many more). */
const SHOWN_DEVICES = 5;

/**
 * Problems of `also` against the inventory: the rollout's devices are the main profile's scope, so an `also`
 * profile whose scope leaves one of them out is refused (that device would get the main profile without
 * it). `alsoScopes[i]`: the ids in scope of `also[i]`'s profile.
 */
export function alsoScopeProblems(
  spec: ProfileSetSpec,
  mainScope: readonly string[],
  alsoScopes: ReadonlyArray<ReadonlySet<string>>,
): FieldProblem[] {
  const problems: FieldProblem[] = [];
  (spec.also ?? []).forEach((m, i) => {
    const inScope = alsoScopes[i] ?? new Set<string>();
    const out = mainScope.filter((id) => !inScope.has(id));
    if (!out.length) return;
    const shown = out.slice(0, SHOWN_DEVICES).join(', ');
    const more = out.length > SHOWN_DEVICES ? ` and ${out.length - SHOWN_DEVICES} more` : '';
    problems.push({
      path: `rollout.also[${i}].profile`,
      value: m.profile,
      message: `its scope leaves out ${out.length} device(s) of profile "${spec.profile}"'s scope (${shown}${more}): they would get ${spec.profile} without ${m.profile}; widen its scope or narrow the main one's`,
    });
  });
  return problems;
}

/**
 * What the device runner settles a device with once its set ended (workflows/device-runner.ts: its slot is
 * held from the first member's apply to here, and it counts once for the failure gate). An end decided by the
 * first member's answer is that answer's own outcome (waiting and its retry, skipped offline, not-for-me ahead,
 * failed): the single-profile case. Otherwise: the set's state and reason; in compensation only while the
 * rollout left something on it (`changed`: every member in place, or an undo that failed); counted
 * succeeded when every member is in place, failed when not.
 */
export function setOutcome(
  first: DeviceOutcome,
  end: SetEnd,
  applies: number,
  device: { bestEffort: boolean },
): DeviceOutcome {
  if (applies <= 1 && !OK.has(end.state)) return first;
  const ok = OK.has(end.state);
  return {
    state: end.state,
    ...(end.reason !== undefined ? { reason: end.reason } : {}),
    touched: end.changed.length > 0,
    ...(device.bestEffort ? {} : { counted: ok ? ('succeeded' as const) : ('failed' as const) }),
    readsGate: !device.bestEffort,
  };
}

/**
 * A device's busy reason while one member runs: `applying motd r7 (2 of 2)` (its place in the apply order,
 * a revert's reversed), `putting back pkg r2`.
 */
export function memberBusyReason(
  step: { kind: 'apply' | 'undo'; member: number },
  members: readonly SetMember[],
  order: readonly number[],
): string {
  const m = members[step.member]!;
  return step.kind === 'apply'
    ? `applying ${m.profile} r${m.toRevision} (${order.indexOf(step.member) + 1} of ${order.length})`
    : `putting back ${m.profile} r${m.fromRevision}`;
}

/**
 * The members a device may hold changes of when the rollout is cancelled under it mid-set, for compensation:
 * while applying, every member whose apply was started, the one in flight included (something of it may have
 * run), less those found in place; while undoing after a failure, those not yet put back, the undo in flight
 * included.
 */
export function changedSoFar(order: readonly number[], progress: SetProgress): number[] {
  const { applies, undos } = progress;
  const failedAt = applies.findIndex((a) => !OK.has(a.state));
  if (failedAt > 0) return undoPlan(order, applies, failedAt).slice(undos.length).reverse();
  if (failedAt === 0) return applies[0]!.touched ? [order[0]!] : [];
  return order.filter((_, pos) => pos === applies.length || (pos < applies.length && applies[pos]!.touched));
}
