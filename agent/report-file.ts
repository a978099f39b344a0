import { lstatSync } from 'node:fs';
import { join } from 'node:path';
import { WavegateError } from '../core/errors';
import type { HeldVersions } from '../core/held-trust';
import type { ProfileReport } from '../core/twin';
import { readText, writeFileAtomic } from '../intake/files';

/**
 * What the agent answered, per profile, kept in `<state>/report.json` (written whole, synced, then renamed):
 * after a restart it knows which requests it already answered for good, and answers them again from
 * here instead of running anything, with the receipt it signed for each (agent/receipts.ts): synced, so a
 * power cut after an answer left does not make the device answer, and sign, the same request twice. A request
 * with no final answer here is taken up again, and its apply unit reattaches on the device. It keeps the trust
 * versions the agent holds per profile too (`trust`, written after `<state>/trust/<profile>.json`): a trust file
 * found below them at the next start was rolled back (agent/trust-store.ts).
 */
export function reportFile(stateDir: string) {
  const path = join(stateDir, 'report.json');
  let profiles: Record<string, ProfileReport> = {};
  let trust: Record<string, HeldVersions> = {};
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
    const data = JSON.parse(readText(path)) as {
      profiles?: Record<string, ProfileReport>;
      trust?: Record<string, HeldVersions>;
    };
    if (data && typeof data.profiles === 'object' && data.profiles !== null) profiles = data.profiles;
    if (data && typeof data.trust === 'object' && data.trust !== null) trust = data.trust;
  } catch {
    /* none yet, or unreadable: start with no answers (re-applying is verify-first and reattaches) */
  }
  const write = () =>
    writeFileAtomic(
      path,
      `${JSON.stringify({ profiles, ...(Object.keys(trust).length ? { trust } : {}) }, null, 2)}\n`,
    );
  return {
    get profiles(): Record<string, ProfileReport> {
      return profiles;
    },
    /** The trust versions held per profile, as last written. */
    get trust(): Record<string, HeldVersions> {
      return trust;
    },
    set(profile: string, report: ProfileReport): void {
      profiles = { ...profiles, [profile]: report };
      write();
    },
    setTrust(profile: string, versions: HeldVersions): void {
      trust = { ...trust, [profile]: versions };
      write();
    },
  };
}
