import { lstatSync } from 'node:fs';
import { join } from 'node:path';
import { WavegateError } from '../core/errors';
import type { ProfileReport } from '../core/twin';
import { readText, writeFileAtomic } from '../intake/files';

/**
 * What the agent answered, per profile, kept in `<state>/report.json` (written whole, synced, then renamed):
 * after a restart it knows which requests it already answered for good, and answers them again from
 * here instead of running anything, with the receipt it signed for each (agent/receipts.ts): synced, so a
 * power cut after an answer left does not make the device answer, and sign, the same request twice. A request
 * with no final answer here is taken up again, and its apply unit reattaches on the device.
 */
export function reportFile(stateDir: string) {
  const path = join(stateDir, 'report.json');
  let profiles: Record<string, ProfileReport> = {};
  let regular = true;
  try {
    regular = lstatSync(path).isFile();
  } catch {
    /* none yet */
  }
  // Not a file (a FIFO would block the read, a directory would fail every answer): refused at start.
  if (!regular)
    throw new WavegateError('INVALID_INPUT', `--state-dir ${stateDir}: ${path} is not a regular file; move it away`, {
      field: '--state-dir',
      value: path,
    });
  try {
    const data = JSON.parse(readText(path)) as { profiles?: Record<string, ProfileReport> };
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
      writeFileAtomic(path, `${JSON.stringify({ profiles }, null, 2)}\n`);
    },
  };
}
