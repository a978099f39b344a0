import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { markerPath, type PayloadFile } from '../core/revision';
import type { DeviceTarget } from '../core/rollout-state';
import { openSsh, TransportError, type ExecResult, type SshSession } from './ssh';

/** The parts of a revision a device operation needs (no signatures, no secrets). */
export interface RevisionSteps {
  profile: string;
  revision: number;
  apply: string;
  verify: string;
  /** Payload files with `source` resolved to a path the worker can read. */
  payload: PayloadFile[];
}

export type ApplyOutcome = 'applied' | 'already-applied';

export interface ApplyResult {
  device: string;
  outcome: ApplyOutcome;
  /** Which steps ran, in order: the evidence for the audit trail. */
  steps: string[];
}

/** The failure of a device step that ran and said no (as opposed to a transport problem). */
export class StepFailed extends Error {
  constructor(
    readonly step: string,
    readonly result: ExecResult,
    device: string,
  ) {
    super(`${device}: ${step} exited ${result.code}: ${(result.stderr || result.stdout).trim().slice(-400) || '(no output)'}`);
    this.name = 'StepFailed';
  }
}

function stagingDir(steps: RevisionSteps): string {
  return `.wavegate/staging/${steps.profile}/${steps.revision}`;
}

/** Run a revision command in the login's home with $WAVEGATE_STAGING set. */
function shellFor(steps: RevisionSteps, command: string): string {
  return `cd "$HOME" && WAVEGATE_STAGING="$HOME/${stagingDir(steps)}" && export WAVEGATE_STAGING && ${command}`;
}

export async function readMarker(session: SshSession, profile: string, timeoutMs: number): Promise<number | null> {
  const res = await session.exec(`cat "$HOME/${markerPath(profile)}" 2>/dev/null || true`, { timeoutMs });
  const value = Number.parseInt(res.stdout.trim(), 10);
  return Number.isFinite(value) ? value : null;
}

async function writeMarker(session: SshSession, device: string, profile: string, revision: number, timeoutMs: number): Promise<void> {
  const path = markerPath(profile);
  const dir = path.slice(0, path.lastIndexOf('/'));
  const res = await session.exec(`mkdir -p "$HOME/${dir}" && printf '%s\\n' ${revision} > "$HOME/${path}"`, { timeoutMs });
  if (res.code !== 0) throw new StepFailed('write marker', res, device);
}

/** Upload payload files to the staging directory and check their SHA-256 on the device itself. */
async function stagePayload(session: SshSession, device: string, steps: RevisionSteps, timeoutMs: number): Promise<void> {
  if (steps.payload.length === 0) return;
  const dir = stagingDir(steps);
  // Upload to an absolute path under $HOME as the shell sees it: an SFTP server starts in the login's
  // passwd home, which is not always the $HOME the commands run in.
  const mk = await session.exec(`mkdir -p "$HOME/${dir}" && printf '%s\\n' "$HOME"`, { timeoutMs });
  if (mk.code !== 0) throw new StepFailed('stage payload', mk, device);
  const home = mk.stdout.trim();
  if (!home.startsWith('/')) throw new StepFailed('stage payload', { code: 1, stdout: mk.stdout, stderr: `$HOME on the device is not an absolute path: ${JSON.stringify(home)}` }, device);
  for (const file of steps.payload) {
    const data = readFileSync(file.source);
    const local = createHash('sha256').update(data).digest('hex');
    if (local !== file.sha256) {
      throw new StepFailed('stage payload', { code: 1, stdout: '', stderr: `${file.name}: local copy has sha256 ${local}, revision says ${file.sha256}` }, device);
    }
    await session.upload(data, `${home}/${dir}/${file.name}`, { timeoutMs });
  }
  const check = steps.payload.map((f) => `${f.sha256}  ${f.name}`).join('\n');
  const res = await session.exec(`cd "$HOME/${dir}" && printf '%s\\n' '${check}' | sha256sum -c --quiet -`, { timeoutMs });
  if (res.code !== 0) throw new StepFailed('payload digest check', res, device);
}

/**
 * Bring one device to a revision: verify first (already in place: nothing to apply), stage the payload,
 * apply, verify again reading the fact back, then write the device's marker. One connection throughout.
 */
export async function applyToDevice(
  target: DeviceTarget,
  steps: RevisionSteps,
  opts: {
    commandTimeoutMs: number;
    heartbeat?: (detail: string) => void;
    /** How often a running command heartbeats (default: the transport's 5 s). */
    heartbeatIntervalMs?: number;
  },
): Promise<ApplyResult> {
  const beat = opts.heartbeat ?? (() => {});
  const session = await openSsh(target);
  // A long apply keeps heartbeating while it runs, so the activity's heartbeat timeout only catches
  // a worker that is really gone, not a slow package install.
  const run = (step: string, command: string) =>
    session.exec(shellFor(steps, command), {
      timeoutMs: opts.commandTimeoutMs,
      onProgress: (elapsedMs) => beat(`${step} running ${Math.round(elapsedMs / 1000)}s`),
      progressIntervalMs: opts.heartbeatIntervalMs,
    });
  const ran: string[] = [];
  try {
    beat('verify-first');
    const before = await run('verify-first', steps.verify);
    ran.push('verify');
    if (before.code === 0) {
      await writeMarker(session, target.id, steps.profile, steps.revision, opts.commandTimeoutMs);
      ran.push('marker');
      return { device: target.id, outcome: 'already-applied', steps: ran };
    }
    beat('stage');
    await stagePayload(session, target.id, steps, opts.commandTimeoutMs);
    if (steps.payload.length) ran.push('stage');
    beat('apply');
    const applied = await run('apply', steps.apply);
    ran.push('apply');
    if (applied.code !== 0) throw new StepFailed('apply', applied, target.id);
    beat('verify');
    const after = await run('verify', steps.verify);
    ran.push('verify');
    if (after.code !== 0) throw new StepFailed('verify', after, target.id);
    await writeMarker(session, target.id, steps.profile, steps.revision, opts.commandTimeoutMs);
    ran.push('marker');
    return { device: target.id, outcome: 'applied', steps: ran };
  } finally {
    session.close();
  }
}

export { TransportError };
