import type { RolloutStatus } from './status';

/** The reason prefix of a device the plan left out on purpose (left-behind, already above the target). */
export const NOT_FOR_ME = 'not-for-me:';

export interface RolloutOutcome {
  /** 0: the rollout completed and every device it was for is at the target; 1: anything else. */
  code: 0 | 1;
  /** One line a person (or a CI log) can act on. */
  summary: string;
}

/**
 * What a finished (or stopped) rollout means for a pipeline: success only when the fleet is where the
 * rollout said it would be. A completed rollout with devices failed, skipped for being offline, or never
 * started is pending work, not a success; so is a rollout that applied nothing it was meant to. A canary
 * run succeeds on a `pass` verdict, or when there was nothing to test (as `schedule trigger` says).
 */
export function rolloutOutcome(s: RolloutStatus): RolloutOutcome {
  if (s.state !== 'completed') return { code: 1, summary: `rollout ${s.state}` };
  if (s.verdict !== undefined) {
    return s.verdict === 'pass' || s.verdict === 'nothing-to-test' ? { code: 0, summary: `canary verdict ${s.verdict}` } : { code: 1, summary: `canary verdict ${s.verdict}` };
  }
  const pending = s.devices.filter((d) => d.state !== 'applied' && d.state !== 'claimed' && !(d.state === 'skipped' && d.reason?.startsWith(NOT_FOR_ME)));
  const meant = s.devices.filter((d) => !(d.state === 'skipped' && d.reason?.startsWith(NOT_FOR_ME)));
  if (meant.length === 0) return { code: 1, summary: 'no device in scope needed this revision; nothing was applied' };
  if (pending.length > 0) {
    const byState = new Map<string, number>();
    for (const d of pending) byState.set(d.state, (byState.get(d.state) ?? 0) + 1);
    const parts = [...byState].map(([state, n]) => `${n} ${state}`).join(', ');
    return { code: 1, summary: `completed with pending work: ${parts} (of ${meant.length} devices the rollout was for)` };
  }
  return { code: 0, summary: `completed: ${meant.length} of ${meant.length} devices at the target` };
}

/**
 * What an accepted control did, in one line an operator can act on (the CLI prints it): not "now
 * running", but what happens next to the devices.
 */
export function describeControl(name: 'pause' | 'resume' | 'abort' | 'approve' | 'override-audit', s: RolloutStatus, control: { rollback?: boolean } = {}): string {
  const changed = s.changedDevices ?? 0;
  const devices = (n: number) => `${n} device${n === 1 ? '' : 's'}`;
  switch (name) {
    case 'pause':
      return `pause accepted: no new device starts${s.counts.applying ? ` (${devices(s.counts.applying)} in flight finish)` : ''}, and the rollout holds before its next step; resume with: wavegate resume ${s.rolloutId}`;
    case 'resume':
      return s.state === 'paused' ? `resume accepted: ${s.pausedReason ?? 'still held'}` : `resume accepted: the rollout goes on (phase ${s.phase})`;
    case 'approve':
      return `approve accepted: the manual gate is passed; the health gate of phase ${s.phase} runs next`;
    case 'abort':
      return control.rollback === false
        ? `abort accepted: no new device starts; the ${devices(changed)} this rollout changed stay as they are`
        : `abort accepted: no new device starts; rolling back the ${devices(changed)} this rollout changed`;
    case 'override-audit':
      return `override accepted: a new audit segment continues from record ${s.auditHead?.seq ?? 0}; the rollout goes on`;
  }
}
