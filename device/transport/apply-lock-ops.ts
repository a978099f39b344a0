import { claimScript, launchScript, parseClaim, parseRecord, readScript, releaseScript } from './apply-lock';
import { StepFailed, TransportError } from './errors';
import type { DeviceSession, ExecOptions, ExecResult } from './types';

/** The apply lock's operations of a DeviceSession, the same over any session that can run a shell command. */
export type ApplyLockOps = Pick<DeviceSession, 'claimApplyLock' | 'readApplyLock' | 'launchApply' | 'releaseApplyLock'>;

/**
 * The apply lock on `device` through its session's own `exec` (docs/formats.md "The apply lock"): the
 * scripts and their answers are apply-lock.ts's; the SSH session and the agent's local session run them alike.
 */
export function applyLockOps(
  device: string,
  exec: (command: string, opts?: ExecOptions) => Promise<ExecResult>,
): ApplyLockOps {
  return {
    async claimApplyLock(profile, claim, { timeoutMs }) {
      for (let tries = 0; tries < 3; tries++) {
        const res = await exec(claimScript(profile, claim, Date.now()), { timeoutMs });
        if (res.code !== 0) throw new StepFailed('take apply lock', res, device);
        const answer = parseClaim(res.stdout);
        if (answer !== 'retry') return answer;
      }
      throw new TransportError(
        'dropped',
        `${device}: the apply lock for ${profile} kept changing hands while it was being taken`,
      );
    },

    async readApplyLock(profile, { timeoutMs }) {
      const res = await exec(readScript(profile), { timeoutMs });
      if (res.code !== 0) throw new StepFailed('read apply lock', res, device);
      const { state, record } = parseRecord(res.stdout);
      return state === 'held' ? record : null;
    },

    async launchApply(profile, command, { timeoutMs }) {
      const res = await exec(launchScript(profile, command), { timeoutMs });
      // The device refused to start it: to the operator that is the apply saying no.
      if (res.code !== 0) throw new StepFailed('apply', res, device);
      return res.stdout.trim().endsWith('already-launched') ? 'already-launched' : 'launched';
    },

    async releaseApplyLock(profile, holder, reason, { timeoutMs }) {
      const res = await exec(releaseScript(profile, holder, reason), { timeoutMs });
      if (res.code !== 0) throw new StepFailed('release apply lock', res, device);
      return res.stdout.trim() === 'released';
    },
  };
}
