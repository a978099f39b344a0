import { archivedAuditRuns, createAuditActivities, readAuditSegments } from '../audit';
import type { AuditStore } from './types';

/** Today's store behind the interface: one JSONL file per rollout under `auditDir` (activities/audit.ts). */
export function createFileAuditStore(deps: {
  auditDir: string;
  macKey?: Uint8Array;
  log?: (line: string) => void;
}): AuditStore {
  const activities = createAuditActivities(deps);
  return {
    location: deps.auditDir,
    append: (event) => activities.appendAudit(event),
    health: (input) => activities.auditHealth(input),
    segments: async (rolloutId, runId) => readAuditSegments(deps.auditDir, rolloutId, runId),
    earlierRuns: async (rolloutId) => archivedAuditRuns(deps.auditDir, rolloutId),
    close: async () => {},
  };
}
