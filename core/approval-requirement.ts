import type { z } from 'zod';
import { lazySchema, zod } from './lazy-schema';

/**
 * The spec's `approval` field (the two-person rule, core/approval.ts), apart from the rule itself: the spec reads
 * it, and the rule's statements reach core/signing.ts, which reads the spec's durations (a cycle otherwise).
 */

/** The most approvals a spec may ask for: more people than any change board seats. */
export const MAX_APPROVALS = 10;

export const ApprovalRequirement = lazySchema(() =>
  zod()
    .object({
      required: zod()
        .number()
        .int()
        .min(1, 'must be at least 1')
        .max(MAX_APPROVALS, `must be at most ${MAX_APPROVALS}`),
      notBy: zod().literal('starter').optional(),
    })
    .strict(),
);
export type ApprovalRequirement = z.infer<typeof ApprovalRequirement>;
