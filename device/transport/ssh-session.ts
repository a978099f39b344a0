import { parseFloor } from '../../core/floor';
import { floorPath, markerPath } from '../../core/revision';
import type { DeviceTarget } from '../../core/rollout-state';
import { applyLockOps } from './apply-lock-ops';
import { StepFailed } from './errors';
import { openSsh, type SshSession } from './ssh';
import type { ConnectOptions, DeviceSession, DeviceTransport, StagedFile, StageOptions } from './types';

/**
 * The DeviceSession over one SSH connection: commands run in the login shell, payload files go over
 * SFTP, the revision marker is a file under the login's $HOME read and written with the shell.
 */
export const sshTransport: DeviceTransport = {
  async connect(target: DeviceTarget, opts: ConnectOptions = {}): Promise<DeviceSession> {
    return sshDeviceSession(target.id, await openSsh(target, opts));
  },
};

export function sshDeviceSession(device: string, ssh: SshSession): DeviceSession {
  return {
    exec: (command, opts) => ssh.exec(command, opts),

    async stage(dir: string, files: readonly StagedFile[], { timeoutMs, onStaged }: StageOptions): Promise<void> {
      if (files.length === 0) return;
      // Upload to an absolute path under $HOME as the shell sees it: an SFTP server starts in the
      // login's passwd home, which is not always the $HOME the commands run in.
      const mk = await ssh.exec(`mkdir -p "$HOME/${dir}" && printf '%s\\n' "$HOME"`, { timeoutMs });
      if (mk.code !== 0) throw new StepFailed('stage payload', mk, device);
      const home = mk.stdout.trim();
      if (!home.startsWith('/'))
        throw new StepFailed(
          'stage payload',
          {
            code: 1,
            stdout: mk.stdout,
            stderr: `$HOME on the device is not an absolute path: ${JSON.stringify(home)}`,
          },
          device,
        );
      for (const file of files) {
        await ssh.upload(file.read(), `${home}/${dir}/${file.name}`, { timeoutMs });
        onStaged?.(file.name);
      }
      // The device checks what landed itself: SFTP carries no end-to-end digest.
      const check = files.map((f) => `${f.sha256}  ${f.name}`).join('\n');
      const res = await ssh.exec(`cd "$HOME/${dir}" && printf '%s\\n' '${check}' | sha256sum -c --quiet -`, {
        timeoutMs,
      });
      if (res.code !== 0) throw new StepFailed('payload digest check', res, device);
    },

    async readMarker(profile, { timeoutMs }) {
      const res = await ssh.exec(`cat "$HOME/${markerPath(profile)}" 2>/dev/null || true`, { timeoutMs });
      const value = Number.parseInt(res.stdout.trim(), 10);
      return Number.isFinite(value) ? value : null;
    },

    async writeMarker(profile, revision, { timeoutMs }) {
      const path = markerPath(profile);
      const dir = path.slice(0, path.lastIndexOf('/'));
      const res = await ssh.exec(`mkdir -p "$HOME/${dir}" && printf '%s\\n' ${revision} > "$HOME/${path}"`, {
        timeoutMs,
      });
      if (res.code !== 0) throw new StepFailed('write marker', res, device);
    },

    async readFloor(profile, { timeoutMs }) {
      const res = await ssh.exec(`cat "$HOME/${floorPath(profile)}" 2>/dev/null || true`, { timeoutMs });
      return parseFloor(res.stdout);
    },

    // The apply lock and the detached apply are shell on the device (./apply-lock.ts); a step of the
    // lock protocol that exits non-zero is the device saying no (a full disk, a read-only home).
    ...applyLockOps(device, (command, opts) => ssh.exec(command, opts)),

    close: () => ssh.close(),
  };
}
