import type { z } from 'zod';
import { formatDurationMs, parseDurationMs } from './duration';
import { ApprovalRequirement } from './approval-requirement';
import { afterProblems, Dependency, MAX_DEPENDENCIES } from './dependencies';
import { DEFAULT_REVERT_WINDOW_MS } from './floor';
import { Webhooks } from './events';
import { parseHealthCheck } from './health';
import { Identifier, MAX_PHASE_DEVICES, PoolName, type Inventory } from './inventory';
import { ownValue } from './own-keys';
import { PROFILE_NAME, PROFILE_NAME_RULE } from './profile-name';
import { formatPath, invalidFields, parseWith, PRINTABLE, PRINTABLE_RULE, type FieldProblem } from './validation';
import { lazySchema, zod } from './lazy-schema';

/**
 * The rollout spec (docs/formats.md). Accepts the phased form verbatim (`canary: 1 device`, `bulk: 25%`,
 * `bulk: remainder`, `gateMs`, `healthGate`, `rollback.on`) plus options with defaults.
 */
const DURATION_FORM = 'a duration such as 600000 (ms), "90s", "10m" or "1h"';

/**
 * A duration within [min, max] milliseconds: every wait and timeout has a sane range (a 100-year gate
 * timer or a 0 s apply timeout is a mistake, never a setting).
 */
export function boundedDuration(min: number, max: number) {
  const range = `between ${formatDurationMs(min)} and ${formatDurationMs(max)}`;
  return zod()
    .union([zod().number(), zod().string()], { error: `must be ${DURATION_FORM}` })
    .transform((value, ctx) => {
      const ms = parseDurationMs(value);
      if (ms === undefined) {
        ctx.addIssue({ code: 'custom', message: `must be ${DURATION_FORM}, ${range}` });
        return zod().NEVER;
      }
      // Rounding would run something other than what was written (`1.5ms`, 90000.5): refused instead.
      if (fractionalMs(value)) {
        ctx.addIssue({
          code: 'custom',
          message: `must be a whole number of milliseconds (no fraction of a millisecond), ${range}`,
        });
        return zod().NEVER;
      }
      if (ms < min || ms > max) {
        ctx.addIssue({ code: 'custom', message: `must be ${range}` });
        return zod().NEVER;
      }
      return ms;
    });
}

const DURATION_PART = /(\d+)(?:\.(\d+))?(ms|s|m|h|d)/g;
const UNIT_MS: Record<string, bigint> = { ms: 1n, s: 1_000n, m: 60_000n, h: 3_600_000n, d: 86_400_000n };

/**
 * Whether a duration parseDurationMs accepted is not a whole number of milliseconds: a number with a
 * fraction, or text whose parts add up to one (`1.5ms`, `0.0001s`). Exact (decimal digits, no floating
 * point: `1.1s` is 1100 ms, a whole number, though 1.1 * 1000 is not).
 */
export function fractionalMs(value: number | string): boolean {
  if (typeof value === 'number') return !Number.isInteger(value);
  const text = value.trim();
  if (/^\d+$/.test(text)) return false;
  let digits = 0;
  const parts: Array<{ fraction: string; unit: bigint }> = [];
  for (const m of text.matchAll(DURATION_PART)) {
    const fraction = m[2] ?? '';
    parts.push({ fraction, unit: UNIT_MS[m[3]!]! });
    digits = Math.max(digits, fraction.length);
  }
  if (digits === 0) return false;
  if (digits > 64) return true; // no unit has 64 decimal places of milliseconds
  const scale = 10n ** BigInt(digits);
  let numerator = 0n;
  for (const p of parts) numerator += BigInt(p.fraction.padEnd(digits, '0') || '0') * p.unit;
  return numerator % scale !== 0n;
}

/** Bounds of the spec's durations (docs/formats.md, "Durations"). */
export const DURATION_BOUNDS = {
  /** The wait after a phase: none, up to a 30-day soak. */
  gate: { min: 0, max: 30 * 86_400_000 },
  /** One device's apply or rollback command. */
  applyTimeout: { min: 1_000, max: 86_400_000 },
  /** One health-gate check. */
  healthTimeout: { min: 1_000, max: 3_600_000 },
  /** How long after completion a revert to fromRevision stays allowed on the devices (0: never). */
  revertWindow: { min: 0, max: 30 * 86_400_000 },
  /** progressDeadline and phaseDeadline, in active time (core/rollout/deadline.ts). */
  deadline: { min: 60_000, max: 30 * 86_400_000 },
  /**
   * The watch after promotion (`watch.for`): at most a week, the way back a device keeps for the rollout that
   * changed it when the revision signs none (core/floor.ts DEVICE_WAY_BACK_MS), and never past `revertWindow`.
   */
  watch: { min: 10_000, max: 7 * 86_400_000 },
  /** The wait between two checks of the watch (`watch.every`); never more than `watch.for`. */
  watchEvery: { min: 5_000, max: 86_400_000 },
} as const;

const GateDuration = lazySchema(() => boundedDuration(DURATION_BOUNDS.gate.min, DURATION_BOUNDS.gate.max));
const Gate = lazySchema(() =>
  zod().union([zod().literal('manual'), GateDuration], { error: `must be "manual" or ${DURATION_FORM}` }),
);
const DeadlineDuration = lazySchema(() => boundedDuration(DURATION_BOUNDS.deadline.min, DURATION_BOUNDS.deadline.max));

/** Text fields a person writes: bounded, so a 60 MB name is refused rather than carried through history. */
export const MAX_NAME_LENGTH = 128;

/**
 * A phase size: `1 device`, `5 devices` (or a bare number), `25%` (of the snapshot in scope),
 * `up to 50%` (cumulative: the phase brings the total planned to 50% of the snapshot) or `remainder`.
 */
export type PhaseSize =
  | { kind: 'count'; count: number }
  | { kind: 'percent'; percent: number }
  | { kind: 'cumulative'; percent: number }
  | { kind: 'remainder' };

const PHASE_SIZE_FORM = 'must be "<n> device(s)", "<p>%" or "up to <p>%" with p in (0, 100], or "remainder"';
const PhaseSizeText = lazySchema(() =>
  zod()
    .union(
      [
        zod().number().int().positive().max(MAX_PHASE_DEVICES, `must be at most ${MAX_PHASE_DEVICES} devices`),
        zod().string().max(MAX_NAME_LENGTH),
      ],
      { error: PHASE_SIZE_FORM },
    )
    .transform((value, ctx): PhaseSize => {
      if (typeof value === 'number') return { kind: 'count', count: value };
      const text = value.trim();
      const count = /^(\d+)\s*(devices?)?$/.exec(text);
      if (count && Number(count[1]) > 0 && Number(count[1]) <= MAX_PHASE_DEVICES)
        return { kind: 'count', count: Number(count[1]) };
      const pct = /^(\d+(?:\.\d+)?)\s*%$/.exec(text);
      if (pct && Number(pct[1]) > 0 && Number(pct[1]) <= 100) return { kind: 'percent', percent: Number(pct[1]) };
      const cumulative = /^(?:up\s+)?to\s+(\d+(?:\.\d+)?)\s*%$/.exec(text);
      if (cumulative && Number(cumulative[1]) > 0 && Number(cumulative[1]) <= 100)
        return { kind: 'cumulative', percent: Number(cumulative[1]) };
      if (text === 'remainder' || text === 'rest') return { kind: 'remainder' };
      ctx.addIssue({ code: 'custom', message: PHASE_SIZE_FORM });
      return zod().NEVER;
    }),
);

/** One health-gate check, validated by the same parser the probes use (core/health.ts). */
export const HealthCheck = lazySchema(() =>
  zod()
    .string()
    .superRefine((text, ctx) => {
      const parsed = parseHealthCheck(text);
      if (!parsed.ok) ctx.addIssue({ code: 'custom', message: parsed.message });
    }),
);

const Phase = lazySchema(() =>
  zod()
    .object({
      canary: PhaseSizeText.optional(),
      bulk: PhaseSizeText.optional(),
      name: zod().string().min(1).max(MAX_NAME_LENGTH).regex(PRINTABLE, PRINTABLE_RULE).optional(),
      gateMs: zod()
        .number()
        .int()
        .min(DURATION_BOUNDS.gate.min)
        .max(DURATION_BOUNDS.gate.max, `must be at most ${DURATION_BOUNDS.gate.max} (30 days)`)
        .optional(),
      gate: Gate.optional(),
      healthGate: zod().array(HealthCheck).default([]),
      /** This phase's deadline in active time, overriding the spec's `phaseDeadline`. */
      phaseDeadline: DeadlineDuration.optional(),
    })
    .strict()
    .superRefine((phase, ctx) => {
      if ((phase.canary === undefined) === (phase.bulk === undefined)) {
        ctx.addIssue({ code: 'custom', message: 'a phase needs exactly one of "canary" or "bulk"' });
      }
      if (phase.gate !== undefined && phase.gateMs !== undefined) {
        ctx.addIssue({ code: 'custom', path: ['gate'], message: 'give either "gate" or "gateMs", not both' });
      }
    }),
);

/** An IANA time zone the runtime knows (Intl is deterministic and available in workflows). */
function isTimeZone(zone: string): boolean {
  try {
    new Intl.DateTimeFormat('en-US', { timeZone: zone });
    return true;
  } catch {
    return false;
  }
}

const Window = lazySchema(() =>
  zod()
    .object({
      days: zod()
        .array(zod().enum(['mon', 'tue', 'wed', 'thu', 'fri', 'sat', 'sun']))
        .min(1)
        .max(7, 'at most the 7 days of the week')
        .refine((days) => new Set(days).size === days.length, 'each day at most once'),
      start: zod()
        .string()
        .regex(/^([01]\d|2[0-3]):[0-5]\d$/, 'must be HH:MM'),
      end: zod()
        .string()
        .regex(/^([01]\d|2[0-3]):[0-5]\d$/, 'must be HH:MM'),
      timezone: zod()
        .string()
        .max(MAX_NAME_LENGTH)
        .default('UTC')
        .refine(isTimeZone, { message: 'must be an IANA time zone such as "UTC" or "Europe/Berlin"' }),
    })
    .strict(),
);

const Fraction = lazySchema(() => zod().number().min(0, 'must be between 0 and 1').max(1, 'must be between 0 and 1'));
const BudgetFraction = lazySchema(() =>
  zod()
    .union([Fraction, zod().string().max(MAX_NAME_LENGTH)], {
      error: 'must be a fraction 0-1 or a percentage like "5%"',
    })
    .transform((value, ctx) => {
      if (typeof value === 'number') return value;
      const pct = /^(\d+(?:\.\d+)?)%$/.exec(value.trim());
      if (pct && Number(pct[1]) <= 100) return Number(pct[1]) / 100;
      ctx.addIssue({ code: 'custom', message: 'must be a fraction 0-1 or a percentage like "5%"' });
      return zod().NEVER;
    }),
);

/** Cumulative percentages (the seed's `waves: [1, 10, 50, 100]`): 1-10 increasing numbers ending at 100. */
const Waves = lazySchema(() =>
  zod()
    .array(zod().number().gt(0, 'must be above 0').max(100, 'must be at most 100'))
    .min(1)
    .max(10, 'at most 10 waves'),
);

/**
 * Deadline settings that could never mean what they say, each with the field it is at: an `onDeadline`
 * with no deadline to act on, and a phase deadline longer than the whole rollout's (the progress
 * deadline always passes first, so the phase's would never fire). Pure; the spec's validation reports them (core/rollout/deadline.ts runs the deadlines).
 */
export function deadlineProblems(spec: {
  progressDeadline?: number;
  phaseDeadline?: number;
  onDeadline?: string;
  phases?: ReadonlyArray<{ phaseDeadline?: number }>;
}): Array<{ path: Array<string | number>; message: string }> {
  const problems: Array<{ path: Array<string | number>; message: string }> = [];
  const phases = spec.phases ?? [];
  const anyDeadline =
    spec.progressDeadline !== undefined ||
    spec.phaseDeadline !== undefined ||
    phases.some((p) => p.phaseDeadline !== undefined);
  if (spec.onDeadline !== undefined && !anyDeadline) {
    problems.push({
      path: ['onDeadline'],
      message: `says what a passed deadline does, but no deadline is set: add progressDeadline or phaseDeadline (of the spec or of a phase), or remove onDeadline`,
    });
  }
  const progress = spec.progressDeadline;
  if (progress !== undefined) {
    const longer = (ms: number) =>
      `is ${formatDurationMs(ms)}, longer than the progressDeadline of ${formatDurationMs(progress)}: the whole rollout's deadline passes first, so this one never would; make it at most ${formatDurationMs(progress)}`;
    if (spec.phaseDeadline !== undefined && spec.phaseDeadline > progress)
      problems.push({ path: ['phaseDeadline'], message: longer(spec.phaseDeadline) });
    phases.forEach((phase, i) => {
      if (phase.phaseDeadline !== undefined && phase.phaseDeadline > progress)
        problems.push({ path: ['phases', i, 'phaseDeadline'], message: longer(phase.phaseDeadline) });
    });
  }
  return problems;
}

const Watch = lazySchema(() =>
  zod()
    .object({
      for: boundedDuration(DURATION_BOUNDS.watch.min, DURATION_BOUNDS.watch.max),
      healthGate: zod().array(HealthCheck).min(1, 'a watch needs at least one check'),
      onFail: zod().enum(['revert', 'alert']),
      every: boundedDuration(DURATION_BOUNDS.watchEvery.min, DURATION_BOUNDS.watchEvery.max).optional(),
    })
    .strict(),
);

/**
 * Watch settings that could never mean what they say, each with its field: checks further apart than the
 * whole watch, and a watch that reverts after the revert window (or with none: `revertWindow: 0`) has
 * closed. Pure; the spec's validation reports them (core/rollout/watch.ts runs the watch).
 */
export function watchProblems(spec: {
  revertWindow?: number;
  watch?: { for: number; every?: number; onFail: string };
}): Array<{ path: Array<string | number>; message: string }> {
  const { watch } = spec;
  if (!watch) return [];
  const problems: Array<{ path: Array<string | number>; message: string }> = [];
  if (watch.every !== undefined && watch.every > watch.for)
    problems.push({
      path: ['watch', 'every'],
      message: `is ${formatDurationMs(watch.every)}, longer than the watch itself (for: ${formatDurationMs(watch.for)}): no check would run; make it at most ${formatDurationMs(watch.for)}`,
    });
  const window = spec.revertWindow ?? DEFAULT_REVERT_WINDOW_MS;
  if (watch.onFail === 'revert' && watch.for > window)
    problems.push({
      path: ['watch', 'for'],
      message:
        window === 0
          ? `is ${formatDurationMs(watch.for)}, but revertWindow is 0: a failed watch puts devices back only while the revert window is open; set a revertWindow of at least ${formatDurationMs(watch.for)}, or onFail: alert`
          : `is ${formatDurationMs(watch.for)}, longer than the revertWindow of ${formatDurationMs(window)}: a failed watch puts devices back only while the revert window is open; make it at most ${formatDurationMs(window)}, raise revertWindow, or use onFail: alert`,
    });
  return problems;
}

export const RolloutBody = lazySchema(() =>
  zod()
    .object({
      profile: zod().string().regex(PROFILE_NAME, PROFILE_NAME_RULE),
      fromRevision: zod().number().int().nonnegative(),
      toRevision: zod().number().int().positive(),
      strategy: zod().enum(['phased']).default('phased'),
      phases: zod().array(Phase).min(1, 'at least one phase is needed').optional(),
      waves: Waves.optional(),
      rollback: zod()
        .object({ on: zod().enum(['healthGate-fail', 'failure-gate', 'both', 'never']).default('healthGate-fail') })
        .strict()
        .default({ on: 'healthGate-fail' }),
      gate: Gate.default(600_000),
      maxFailureRatio: Fraction.default(0.05),
      minSample: zod()
        .number()
        .int()
        .positive()
        .max(MAX_PHASE_DEVICES, `must be at most ${MAX_PHASE_DEVICES}`)
        .default(3),
      applyTimeout: boundedDuration(DURATION_BOUNDS.applyTimeout.min, DURATION_BOUNDS.applyTimeout.max).default(
        900_000,
      ),
      offline: zod().enum(['skip', 'wait', 'fail']).default('skip'),
      disruptionBudget: zod().record(PoolName, BudgetFraction).default({}),
      onInconclusive: zod().enum(['pause', 'fail']).default('pause'),
      /** Each health-gate check must answer within this; one that cannot is inconclusive. */
      healthTimeout: boundedDuration(DURATION_BOUNDS.healthTimeout.min, DURATION_BOUNDS.healthTimeout.max).default(
        60_000,
      ),
      /** After completion, each changed device's floor allows going back to fromRevision this long (core/floor.ts). */
      revertWindow: boundedDuration(DURATION_BOUNDS.revertWindow.min, DURATION_BOUNDS.revertWindow.max).default(
        86_400_000,
      ),
      window: Window.optional(),
      canaryClass: Identifier.optional(),
      concurrent: zod().boolean().default(false),
      transport: zod().enum(['ssh', 'agent']).default('ssh'),
      /** The whole rollout's deadline in active time (paused time never counts; core/rollout/deadline.ts). */
      progressDeadline: DeadlineDuration.optional(),
      /** Every phase's deadline in active time, from its first device start to the end of its health gate. */
      phaseDeadline: DeadlineDuration.optional(),
      /** What a passed deadline does: pause (default), abort (stop, no rollback) or rollback. */
      onDeadline: zod().enum(['pause', 'abort', 'rollback']).optional(),
      /** Where every transition is delivered, signed, as JSON (core/events.ts); secrets by reference only. */
      webhooks: Webhooks.optional(),
      /**
       * Count a device applied only with its own receipt, verified by the worker as it arrived (core/receipt.ts): an
       * answer without one is failed, NO_RECEIPT (core/rollout/device-outcome.ts). Absent: receipts are kept when sent.
       */
      requireReceipts: zod().boolean().optional(),
      /** Profiles each device must verify (at these revisions) before this rollout starts on it (core/dependencies.ts). */
      after: zod().array(Dependency).max(MAX_DEPENDENCIES, `at most ${MAX_DEPENDENCIES} profiles`).optional(),
      /** After the last phase, keep checking the changed devices (core/rollout/watch.ts); the rollout is `watching` meanwhile. */
      watch: Watch.optional(),
      /** The two-person rule at manual gates (core/approval.ts): N distinct authenticated approvers, not the starter. */
      approval: ApprovalRequirement.optional(),
    })
    .strict()
    .superRefine((spec, ctx) => {
      if (spec.toRevision <= spec.fromRevision) {
        ctx.addIssue({
          code: 'custom',
          path: ['toRevision'],
          message: `must be above fromRevision (${spec.fromRevision})`,
        });
      }
      if ((spec.phases === undefined) === (spec.waves === undefined)) {
        ctx.addIssue({
          code: 'custom',
          path: ['phases'],
          message: 'give exactly one of "phases" or "waves" (cumulative percentages)',
        });
      }
      if (spec.waves) {
        spec.waves.forEach((w, i) => {
          if (i > 0 && w <= spec.waves![i - 1]!)
            ctx.addIssue({
              code: 'custom',
              path: ['waves', i],
              message: `must be above the previous wave (${spec.waves![i - 1]})`,
            });
        });
        if (spec.waves[spec.waves.length - 1] !== 100) {
          ctx.addIssue({
            code: 'custom',
            path: ['waves', spec.waves.length - 1],
            message: 'the last wave must be 100',
          });
        }
      }
      checkPhaseSizes(spec.phases ?? [], ctx);
      for (const p of deadlineProblems(spec)) ctx.addIssue({ code: 'custom', path: p.path, message: p.message });
      for (const p of watchProblems(spec)) ctx.addIssue({ code: 'custom', path: p.path, message: p.message });
      if (spec.approval && spec.gate !== 'manual' && !(spec.phases ?? []).some((p) => p.gate === 'manual'))
        ctx.addIssue({
          code: 'custom',
          path: ['approval'],
          message:
            'applies at manual gates, and no gate is manual: set gate: manual (of the spec or of a phase), or remove approval',
        });
      for (const p of afterProblems(spec.profile, spec.after ?? []))
        ctx.addIssue({ code: 'custom', path: ['after', p.index, 'profile'], message: p.message });
    })
    .transform(({ waves, phases, ...rest }) => ({ ...rest, phases: phases ?? wavesToPhases(waves ?? [100]) })),
);

type PhaseOut = z.output<typeof Phase>;

function sizeOf(phase: PhaseOut): PhaseSize | undefined {
  return phase.canary ?? phase.bulk;
}

/** Cross-phase rules: canary first, remainder last, percentages that add up, cumulative ones increasing. */
function checkPhaseSizes(phases: PhaseOut[], ctx: z.RefinementCtx): void {
  let percentSum = 0;
  let lastCumulative = 0;
  phases.forEach((phase, i) => {
    const size = sizeOf(phase);
    const key = phase.canary !== undefined ? 'canary' : 'bulk';
    if (!size) return;
    if (phase.canary !== undefined && i > 0) {
      ctx.addIssue({
        code: 'custom',
        path: ['phases', i, 'canary'],
        message: 'only the first phase can be a canary phase; use "bulk"',
      });
    }
    if (size.kind === 'remainder' && i !== phases.length - 1) {
      ctx.addIssue({ code: 'custom', path: ['phases', i, key], message: '"remainder" must be the last phase' });
    }
    if (size.kind === 'percent') {
      percentSum += size.percent;
      if (percentSum > 100 + 1e-9) {
        ctx.addIssue({
          code: 'custom',
          path: ['phases', i, key],
          message: `phase percentages add up to ${percentSum}%, above 100%`,
        });
      }
    }
    if (size.kind === 'cumulative') {
      if (size.percent <= lastCumulative) {
        ctx.addIssue({
          code: 'custom',
          path: ['phases', i, key],
          message: `a cumulative size must be above the previous one (up to ${lastCumulative}%)`,
        });
      }
      lastCumulative = size.percent;
    }
  });
}

function wavesToPhases(waves: number[]): PhaseOut[] {
  return waves.map((percent, i) => {
    const size: PhaseSize = { kind: 'cumulative', percent };
    return i === 0 ? { canary: size, healthGate: [] } : { bulk: size, healthGate: [] };
  });
}

export const RolloutSpec = lazySchema(() => zod().object({ rollout: RolloutBody }).strict());
export type RolloutSpec = z.output<typeof RolloutBody>;
export type PhaseSpec = RolloutSpec['phases'][number];

export function parseRolloutSpec(data: unknown, source: string): RolloutSpec {
  return parseWith(RolloutSpec, data, source).rollout;
}

/** The gate after a phase: its own `gate`/`gateMs`, else the spec's `gate`. */
export function phaseGate(spec: Pick<RolloutSpec, 'gate'>, phase: PhaseSpec): number | 'manual' {
  return phase.gate ?? phase.gateMs ?? spec.gate;
}

/** The size of a phase (exactly one of canary/bulk is set after validation). */
export function phaseSize(phase: PhaseSpec): PhaseSize {
  return (phase.canary ?? phase.bulk)!;
}

/**
 * Checks that need the inventory: `canaryClass` must be a class present among the devices in scope,
 * and every pool named in `disruptionBudget` must exist. Throws INVALID_INPUT naming `source`.
 */
export function checkSpecAgainstInventory(
  spec: RolloutSpec,
  inventory: Inventory,
  source: string,
  inScope?: readonly string[],
): void {
  const ids = inScope ? new Set(inScope) : undefined;
  const devices = ids ? inventory.devices.filter((d) => ids.has(d.id)) : inventory.devices;
  const problems: FieldProblem[] = [];
  if (spec.canaryClass !== undefined) {
    const classes = [...new Set(devices.map((d) => d.class))].sort();
    if (!classes.includes(spec.canaryClass)) {
      problems.push({
        path: 'rollout.canaryClass',
        value: spec.canaryClass,
        message: `no device in scope has this class; allowed: ${classes.map((c) => JSON.stringify(c)).join(', ') || '(none)'}`,
      });
    }
  }
  const pools = Object.keys(inventory.pools).sort();
  for (const pool of Object.keys(spec.disruptionBudget)) {
    if (!ownValue(inventory.pools, pool)) {
      problems.push({
        path: formatPath(['rollout', 'disruptionBudget', pool]),
        value: pool,
        message: `no such pool in the inventory; allowed: ${pools.map((p) => JSON.stringify(p)).join(', ')}`,
      });
    }
  }
  // Each device's transport comes from the inventory (`transport: agent` devices are applied through
  // their twin); a rollout-wide `transport: agent` would override that, and no such override exists.
  if (spec.transport === 'agent') {
    problems.push({
      path: 'rollout.transport',
      value: spec.transport,
      message: 'the agent transport is not available in this version; allowed: "ssh"',
    });
  }
  if (problems.length) invalidFields(source, problems);
}
