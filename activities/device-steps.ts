import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { PROFILE_NAME } from '../core/profile-name';
import type { PayloadFile, Revision } from '../core/revision';
import { verifyEnvelope, type Envelope, type Trust } from '../core/signing';
import { loadTrust } from '../intake/trust';
import type { DeviceTarget } from '../core/rollout-state';
import type { RevisionSteps } from '../core/rollout/input';
import { connectDevice, StepFailed, TransportError, type DeviceSession, type StagedFile } from './transport';

export type { RevisionSteps };
export { StepFailed, TransportError };

export type ApplyOutcome = 'applied' | 'already-applied';

export interface ApplyResult {
  device: string;
  outcome: ApplyOutcome;
  /** Which steps ran, in order: the evidence for the audit trail. */
  steps: string[];
}

/**
 * The worker refused the revision's envelope before touching the device: a compromised control plane
 * (or a tampered history) cannot push content the worker's own pins did not sign. Never retried.
 */
export class EnvelopeRejected extends Error {
  constructor(
    readonly reason: string,
    detail: string,
  ) {
    super(`EnvelopeRejected (${reason}): ${detail}`);
    this.name = 'EnvelopeRejected';
  }
}

/** Where workers find their pins by default: `profiles/<profile>/trust.yaml` of this checkout. */
export const DEFAULT_TRUST_DIR = resolve(__dirname, '..', 'profiles');

/** The worker's own pins for a profile (`<trustDir>/<profile>/trust.yaml`), or undefined when it has none. */
export function loadWorkerTrust(trustDir: string, profile: string): Trust | undefined {
  if (!PROFILE_NAME.test(profile)) throw new EnvelopeRejected('MALFORMED', `profile ${JSON.stringify(profile)} is not a profile name`);
  try {
    return loadTrust(trustDir, profile);
  } catch (err) {
    throw new EnvelopeRejected('NO_TRUST', `the worker's trust file is unusable: ${(err as Error).message}`);
  }
}

export interface SignedStepsOptions {
  /** The worker's pins for the steps' profile (undefined: it has none). */
  trust: Trust | undefined;
  /** Refuse steps without an envelope even when the worker holds no pins for the profile. */
  requireEnvelope: boolean;
  /** Epoch milliseconds. */
  now: number;
}

/**
 * The steps a worker may run: verified from the envelope(s) against the worker's own pins, with the
 * commands and digests taken from the verified body. A profile the worker holds pins for is never run
 * unsigned. Throws EnvelopeRejected naming the reason.
 */
export function signedSteps(steps: RevisionSteps, opts: SignedStepsOptions): RevisionSteps {
  if (!steps.envelope) {
    if (steps.rollbackOf) throw new EnvelopeRejected('UNSIGNED', `r${steps.revision} carries a rollback envelope but no envelope of its own`);
    if (opts.trust) throw new EnvelopeRejected('UNSIGNED', `${steps.profile} r${steps.revision} has no signed envelope, and this worker holds pins for "${steps.profile}"`);
    if (opts.requireEnvelope) throw new EnvelopeRejected('UNSIGNED', `${steps.profile} r${steps.revision} has no signed envelope (this worker runs signed revisions only)`);
    return steps;
  }
  if (!opts.trust) throw new EnvelopeRejected('NO_TRUST', `this worker has no pins for profile "${steps.profile}" (no trust.yaml) to verify r${steps.revision} against`);
  const open = (envelope: Envelope, what: string): Revision => {
    const verdict = verifyEnvelope(envelope, opts.trust!, { now: opts.now });
    if (!verdict.ok) throw new EnvelopeRejected(verdict.reason, `${what}: ${verdict.message}`);
    if (verdict.revision.profile !== steps.profile) {
      throw new EnvelopeRejected('WRONG_PROFILE', `${what} is a revision of "${verdict.revision.profile}", not of "${steps.profile}"`);
    }
    return verdict.revision;
  };
  const revision = open(steps.envelope, `${steps.profile} r${steps.revision} envelope`);
  if (revision.revision !== steps.revision) {
    throw new EnvelopeRejected('WRONG_REVISION', `the envelope holds r${revision.revision}, the steps say r${steps.revision}`);
  }
  let apply = revision.apply;
  if (steps.rollbackOf) {
    const target = open(steps.rollbackOf, `${steps.profile} rollback envelope`);
    if (target.rollback === undefined) throw new EnvelopeRejected('NO_ROLLBACK', `r${target.revision} names no rollback command`);
    apply = target.rollback;
  }
  // Only the file's location comes from outside the body: its name, digest and size are signed, and the
  // digest is checked again before upload and on the device.
  const payload = revision.payload.map((file): PayloadFile => {
    const local = steps.payload.find((f) => f.name === file.name);
    if (!local) throw new EnvelopeRejected('PAYLOAD_SOURCE_MISSING', `payload "${file.name}" of r${revision.revision} has no local source on this worker`);
    return { ...file, source: local.source };
  });
  return { profile: steps.profile, revision: revision.revision, apply, verify: revision.verify, payload, envelope: steps.envelope, ...(steps.rollbackOf ? { rollbackOf: steps.rollbackOf } : {}) };
}

function stagingDir(steps: Pick<RevisionSteps, 'profile' | 'revision'>): string {
  return `.wavegate/staging/${steps.profile}/${steps.revision}`;
}

/** Run a revision command in the login's home with $WAVEGATE_STAGING set (also the fleet board's way to verify). */
export function shellFor(steps: Pick<RevisionSteps, 'profile' | 'revision'>, command: string): string {
  return `cd "$HOME" && WAVEGATE_STAGING="$HOME/${stagingDir(steps)}" && export WAVEGATE_STAGING && ${command}`;
}

/**
 * Stage the payload files in the revision's staging directory. The worker checks each local copy
 * against its signed digest just before it is sent; the session checks the copies on the device.
 */
async function stagePayload(session: DeviceSession, device: string, steps: RevisionSteps, timeoutMs: number, beat: (detail: string) => void): Promise<void> {
  if (steps.payload.length === 0) return;
  const files = steps.payload.map(
    (file): StagedFile => ({
      name: file.name,
      sha256: file.sha256,
      read: () => {
        const data = readFileSync(file.source);
        const local = createHash('sha256').update(data).digest('hex');
        if (local !== file.sha256) {
          throw new StepFailed('stage payload', { code: 1, stdout: '', stderr: `${file.name}: local copy has sha256 ${local}, revision says ${file.sha256}` }, device);
        }
        return data;
      },
    }),
  );
  await session.stage(stagingDir(steps), files, { timeoutMs, onStaged: (name) => beat(`staged ${name}`) });
}

/**
 * Bring one device to a revision: verify first (already in place: nothing to apply), stage the payload,
 * apply, verify again reading the fact back, then write the device's marker. One connection throughout.
 */
export async function applyToDevice(
  target: DeviceTarget,
  given: RevisionSteps,
  opts: {
    commandTimeoutMs: number;
    /** Where the worker's pins live (`<trustDir>/<profile>/trust.yaml`; default this checkout's profiles/). */
    trustDir?: string;
    /** Refuse unsigned steps even for a profile without pins (workers: yes; direct transport tests: no). */
    requireEnvelope?: boolean;
    /** Epoch milliseconds for the expiry check (default now). */
    now?: number;
    heartbeat?: (detail: string) => void;
    /** How often a running command heartbeats (default: the transport's 5 s). */
    heartbeatIntervalMs?: number;
  },
): Promise<ApplyResult> {
  const beat = opts.heartbeat ?? (() => {});
  // Verified before the device is contacted: a rejected envelope runs nothing there, not even verify.
  const steps = signedSteps(given, {
    trust: loadWorkerTrust(opts.trustDir ?? DEFAULT_TRUST_DIR, given.profile),
    requireEnvelope: opts.requireEnvelope ?? false,
    now: opts.now ?? Date.now(),
  });
  const session = await connectDevice(target);
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
      await session.writeMarker(steps.profile, steps.revision, { timeoutMs: opts.commandTimeoutMs });
      ran.push('marker');
      return { device: target.id, outcome: 'already-applied', steps: ran };
    }
    beat('stage');
    await stagePayload(session, target.id, steps, opts.commandTimeoutMs, beat);
    if (steps.payload.length) ran.push('stage');
    beat('apply');
    const applied = await run('apply', steps.apply);
    ran.push('apply');
    if (applied.code !== 0) throw new StepFailed('apply', applied, target.id);
    beat('verify');
    const after = await run('verify', steps.verify);
    ran.push('verify');
    if (after.code !== 0) throw new StepFailed('verify', after, target.id);
    await session.writeMarker(steps.profile, steps.revision, { timeoutMs: opts.commandTimeoutMs });
    ran.push('marker');
    return { device: target.id, outcome: 'applied', steps: ran };
  } finally {
    session.close();
  }
}
