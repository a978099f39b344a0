import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { ProfileReport } from '../core/twin';

/**
 * What the agent answered, per profile, kept in `<state>/report.json` (written whole, then renamed):
 * after a restart it knows which requests it already answered for good, and answers them again from
 * here instead of running anything. A request with no final answer here is taken up again, and its
 * apply unit reattaches on the device.
 */
export function reportFile(stateDir: string) {
  const path = join(stateDir, 'report.json');
  let profiles: Record<string, ProfileReport> = {};
  try {
    const data = JSON.parse(readFileSync(path, 'utf8')) as { profiles?: Record<string, ProfileReport> };
    if (data && typeof data.profiles === 'object' && data.profiles !== null) profiles = data.profiles;
  } catch {
    /* none yet, or unreadable: start with no answers (re-applying is verify-first and reattaches) */
  }
  return {
    get profiles(): Record<string, ProfileReport> {
      return profiles;
    },
    set(profile: string, report: ProfileReport): void {
      profiles = { ...profiles, [profile]: report };
      writeFileSync(`${path}.new`, `${JSON.stringify({ profiles }, null, 2)}\n`, { mode: 0o600 });
      renameSync(`${path}.new`, path);
    },
  };
}
