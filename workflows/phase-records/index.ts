import { InlinePhaseRecords } from './inline';
import { SlicedPhaseRecords } from './sliced';
import type { PhaseRecords, PhaseRecordsContext } from './types';

export type { PhaseRecords, PhaseRecordsContext, SlicesToUndo } from './types';
export { SLICED_RECORDS } from './sliced';

/**
 * The rollout's records, chosen once from its input: sliced records for an input that says
 * `records: 'slices'` and names a membership (the plan's activity reads the membership), inline otherwise.
 */
export function phaseRecordsFor(ctx: PhaseRecordsContext): PhaseRecords {
  const { input } = ctx;
  return input.records === 'slices' && input.membership !== undefined
    ? new SlicedPhaseRecords(ctx)
    : new InlinePhaseRecords(input, ctx.model);
}
