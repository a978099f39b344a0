import { z } from 'zod';
import { parseDurationMs } from './duration';
import { parseWith } from './validation';

/**
 * The rollout spec (DESIGN §2). Accepts the phased form verbatim (`canary: 1 device`, `bulk: 25%`,
 * `bulk: remainder`, `gateMs`, `healthGate`, `rollback.on`) plus options with defaults.
 */
const Duration = z.union([z.number(), z.string()]).transform((value, ctx) => {
  const ms = parseDurationMs(value);
  if (ms === undefined) {
    ctx.addIssue({ code: 'custom', message: 'must be a duration such as 600000 (ms), "90s", "10m" or "1h"' });
    return z.NEVER;
  }
  return ms;
});

const Gate = z.union([z.literal('manual'), Duration]);

/** A phase size: `1 device`, `5 devices`, `25%`, `remainder` (or a bare number of devices). */
export type PhaseSize = { kind: 'count'; count: number } | { kind: 'percent'; percent: number } | { kind: 'remainder' };

const PhaseSizeText = z.union([z.number().int().positive(), z.string()]).transform((value, ctx): PhaseSize => {
  if (typeof value === 'number') return { kind: 'count', count: value };
  const text = value.trim();
  const count = /^(\d+)\s*(devices?)?$/.exec(text);
  if (count && Number(count[1]) > 0) return { kind: 'count', count: Number(count[1]) };
  const pct = /^(\d+(?:\.\d+)?)\s*%$/.exec(text);
  if (pct && Number(pct[1]) > 0 && Number(pct[1]) <= 100) return { kind: 'percent', percent: Number(pct[1]) };
  if (text === 'remainder' || text === 'rest') return { kind: 'remainder' };
  ctx.addIssue({ code: 'custom', message: 'must be "<n> device(s)", "<p>%" (0-100] or "remainder"' });
  return z.NEVER;
});

export const HealthCheck = z.string().min(1);

const Phase = z
  .object({
    canary: PhaseSizeText.optional(),
    bulk: PhaseSizeText.optional(),
    name: z.string().min(1).optional(),
    gateMs: z.number().int().nonnegative().optional(),
    gate: Gate.optional(),
    healthGate: z.array(HealthCheck).default([]),
  })
  .strict()
  .superRefine((phase, ctx) => {
    if ((phase.canary === undefined) === (phase.bulk === undefined)) {
      ctx.addIssue({ code: 'custom', message: 'a phase needs exactly one of "canary" or "bulk"' });
    }
  });

const Window = z
  .object({
    days: z.array(z.enum(['mon', 'tue', 'wed', 'thu', 'fri', 'sat', 'sun'])).min(1),
    start: z.string().regex(/^([01]\d|2[0-3]):[0-5]\d$/, 'must be HH:MM'),
    end: z.string().regex(/^([01]\d|2[0-3]):[0-5]\d$/, 'must be HH:MM'),
    timezone: z.string().default('UTC'),
  })
  .strict();

const Fraction = z.number().min(0, 'must be between 0 and 1').max(1, 'must be between 0 and 1');

export const RolloutBody = z
  .object({
    profile: z.string().regex(/^[a-z0-9][a-z0-9-]{0,62}$/, 'must be lowercase letters, digits and "-"'),
    fromRevision: z.number().int().nonnegative(),
    toRevision: z.number().int().positive(),
    strategy: z.enum(['phased']).default('phased'),
    phases: z.array(Phase).min(1, 'at least one phase is needed'),
    rollback: z
      .object({ on: z.enum(['healthGate-fail', 'failure-gate', 'both', 'never']).default('healthGate-fail') })
      .strict()
      .default({ on: 'healthGate-fail' }),
    gate: Gate.default(600_000),
    maxFailureRatio: Fraction.default(0.05),
    minSample: z.number().int().positive().default(3),
    applyTimeout: Duration.default(900_000),
    offline: z.enum(['skip', 'wait', 'fail']).default('skip'),
    disruptionBudget: z.record(z.string(), Fraction).default({}),
    onInconclusive: z.enum(['pause', 'fail']).default('pause'),
    window: Window.optional(),
    canaryClass: z.string().min(1).optional(),
    concurrent: z.boolean().default(false),
    transport: z.enum(['ssh', 'agent']).default('ssh'),
  })
  .strict()
  .superRefine((spec, ctx) => {
    if (spec.toRevision <= spec.fromRevision) {
      ctx.addIssue({ code: 'custom', path: ['toRevision'], message: `must be above fromRevision (${spec.fromRevision})` });
    }
  });

export const RolloutSpec = z.object({ rollout: RolloutBody }).strict();
export type RolloutSpec = z.output<typeof RolloutBody>;
export type PhaseSpec = RolloutSpec['phases'][number];

export function parseRolloutSpec(data: unknown, source: string): RolloutSpec {
  return parseWith(RolloutSpec, data, source).rollout;
}
