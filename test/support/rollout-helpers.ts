import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { WorkflowHandle } from '@temporalio/client';
import { parse } from 'yaml';
import { parseRevision } from '../../core/revision';
import type { Fleet } from '../../sim';
import { PROJECT_ROOT } from '../../intake/package-layout';
import type { RolloutStatus } from '../../contracts/rollout';

/** Poll the rollout's `status` query until `done` holds (or fail with the last status seen). */
export async function waitForStatus(
  handle: WorkflowHandle,
  done: (s: RolloutStatus) => boolean,
  timeoutMs = 60_000,
): Promise<RolloutStatus> {
  const deadline = Date.now() + timeoutMs;
  let last: RolloutStatus | undefined;
  for (;;) {
    try {
      last = await handle.query<RolloutStatus>('status');
      if (done(last)) return last;
    } catch (err) {
      if (Date.now() > deadline) throw err;
    }
    if (Date.now() > deadline)
      throw new Error(
        `status never matched; last: ${JSON.stringify(last && { state: last.state, phase: last.phase, phases: last.phases, counts: last.counts })}`,
      );
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** The revision marker a simulated device holds right now (null: none). */
export function markerOf(fleet: Fleet, id: string): number | null {
  const path = join(fleet.device(id).sandbox, '.wavegate/profiles/demo/revision');
  return existsSync(path) ? Number(readFileSync(path, 'utf8').trim()) : null;
}

/** Run demo revision `n`'s own verify command in the device's sandbox with a real shell: the fact, read back. */
export function verifiesAt(fleet: Fleet, id: string, n: number): boolean {
  const path = join(PROJECT_ROOT, 'profiles/demo/revisions', `${n}.yaml`);
  const revision = parseRevision(parse(readFileSync(path, 'utf8')), path);
  const sandbox = fleet.device(id).sandbox;
  try {
    execFileSync('/bin/sh', ['-c', revision.verify], {
      cwd: sandbox,
      env: { PATH: process.env.PATH, HOME: sandbox },
      stdio: 'ignore',
    });
    return true;
  } catch {
    return false;
  }
}

export const APPLY_COMMAND = /install -m 0644/;
export const VERIFY_R2 = /grep -qx 'wavegate demo revision 2/;
