import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  floorRefusal,
  formatFloor,
  parseFloor,
  raisedFloor,
  stepDownFloor,
  wayBackOf,
  type DeviceFloor,
  type FloorIntent,
} from '../core/floor';
import { PROFILE_NAME } from '../core/profile-name';
import type { PayloadFile, Revision } from '../core/revision';
import { verifyEnvelope, type Envelope, type Trust } from '../core/signing';
import { loadTrust } from '../intake/trust';
import type { DeviceTarget } from '../core/rollout-state';
import type { RevisionSteps } from '../core/rollout/input';
import type { Dependency } from '../core/dependencies';
import { PayloadRefused, readPayload, resolvePayload } from './payload-file';
import {
  connectDevice,
  deviceValue,
  StepFailed,
  TransportError,
  type ApplyHolder,
  type ApplyLockRecord,
  type DeviceSession,
  type ExecResult,
  type StagedFile,
} from './transport';
import {
  applyScript,
  readApplyReport,
  ReportUnreadable,
  type ApplyReport,
  type ApplyScriptInput,
  type ReportStep,
} from './transport/apply-script';
import { verifySignatureMemoized } from './signature-memo';
import { PROJECT_ROOT } from '../intake/package-layout';

export type { ApplyHolder, RevisionSteps };
export { StepFailed, TransportError };

import { ApplyLockHeld, EnvelopeRejected, type ApplyOutcome, type ApplyResult } from './apply-errors';
export { ApplyLockHeld, EnvelopeRejected, type ApplyOutcome, type ApplyResult };

/** Where workers find their pins and payload files by default: `profiles/<profile>/` of this checkout. */
export const CHECKOUT_PROFILES_ROOT = join(PROJECT_ROOT, 'profiles');

/** The worker's own pins for a profile (`<profilesRoot>/<profile>/trust.yaml`), or undefined when it has none. */
export function loadWorkerTrust(profilesRoot: string, profile: string): Trust | undefined {
  if (!PROFILE_NAME.test(profile))
    throw new EnvelopeRejected('MALFORMED', `profile ${JSON.stringify(profile)} is not a profile name`);
  // Every device's apply asks for the same files: verified once per content (intake/trust.ts).
  try {
    return loadTrust(profilesRoot, profile);
  } catch (err) {
    throw new EnvelopeRejected('NO_TRUST', `the worker's trust file is unusable: ${(err as Error).message}`);
  }
}

/** What a device lacks of the profiles a rollout waits for (`after`). */
export interface UnmetDependencies {
  /** The dependencies the device does not verify, in the spec's order. */
  unmet: Dependency[];
  /** What was found, per dependency: `inference r15 verify failed, marker r14`. */
  detail: string;
}

/** Checks a device's dependencies over an open session; null when every one is verified there (device/dependencies.ts). */
export type DependencyChecker = (
  session: DeviceSession,
  device: string,
  after: readonly Dependency[],
) => Promise<UnmetDependencies | null>;

export interface SignedStepsOptions {
  /** The worker's pins for the steps' profile (undefined: it has none). */
  trust: Trust | undefined;
  /** Refuse steps without an envelope even when the worker holds no pins for the profile. */
  requireEnvelope: boolean;
  /** Epoch milliseconds. */
  now: number;
  /** The worker's profiles directory: payload files are read from `<profilesRoot>/<profile>/payload/` only. */
  profilesRoot: string;
}

/** A payload entry located on this worker (PayloadRefused becomes an envelope rejection: nothing runs). */
function localPayload(opts: SignedStepsOptions, profile: string, file: PayloadFile): PayloadFile {
  try {
    return { ...file, source: resolvePayload(opts.profilesRoot, profile, file) };
  } catch (err) {
    if (err instanceof PayloadRefused) throw new EnvelopeRejected(err.reason, err.message.slice(err.reason.length + 2));
    throw err;
  }
}

/** Steps as verified (signedSteps), with what only their signed body may say. */
export type VerifiedSteps = RevisionSteps & {
  /** How long a device that confirms this revision may go back from it (core/floor.ts wayBackOf). */
  wayBackMs: number;
};

/**
 * The steps a worker may run: verified from the envelope(s) against the worker's own pins, with the
 * commands and payload entries taken from the verified body and the payload files found by those signed
 * entries under the worker's own payload directory. A profile the worker holds pins for is never run
 * unsigned. Throws EnvelopeRejected naming the reason.
 */
export function signedSteps(steps: RevisionSteps, opts: SignedStepsOptions): VerifiedSteps {
  if (!steps.envelope) {
    if (steps.rollbackOf)
      throw new EnvelopeRejected(
        'UNSIGNED',
        `r${steps.revision} carries a rollback envelope but no envelope of its own`,
      );
    if (opts.trust)
      throw new EnvelopeRejected(
        'UNSIGNED',
        `${steps.profile} r${steps.revision} has no signed envelope, and this worker holds pins for "${steps.profile}"`,
      );
    if (opts.requireEnvelope)
      throw new EnvelopeRejected(
        'UNSIGNED',
        `${steps.profile} r${steps.revision} has no signed envelope (this worker runs signed revisions only)`,
      );
    // Nothing signed says how long a device may go back from it: the device maximum, whatever the steps say.
    return {
      ...steps,
      payload: steps.payload.map((file) => localPayload(opts, steps.profile, file)),
      wayBackMs: wayBackOf(undefined),
    };
  }
  if (!opts.trust)
    throw new EnvelopeRejected(
      'NO_TRUST',
      `this worker has no pins for profile "${steps.profile}" (no trust.yaml) to verify r${steps.revision} against`,
    );
  const open = (envelope: Envelope, what: string): Revision => {
    const verdict = verifyEnvelope(envelope, opts.trust!, { now: opts.now, verifySignature: verifySignatureMemoized });
    if (!verdict.ok) throw new EnvelopeRejected(verdict.reason, `${what}: ${verdict.message}`);
    if (verdict.revision.profile !== steps.profile) {
      throw new EnvelopeRejected(
        'WRONG_PROFILE',
        `${what} is a revision of "${verdict.revision.profile}", not of "${steps.profile}"`,
      );
    }
    return verdict.revision;
  };
  const revision = open(steps.envelope, `${steps.profile} r${steps.revision} envelope`);
  if (revision.revision !== steps.revision) {
    throw new EnvelopeRejected(
      'WRONG_REVISION',
      `the envelope holds r${revision.revision}, the steps say r${steps.revision}`,
    );
  }
  let apply = revision.apply;
  if (steps.rollbackOf) {
    const target = open(steps.rollbackOf, `${steps.profile} rollback envelope`);
    if (target.rollback === undefined)
      throw new EnvelopeRejected('NO_ROLLBACK', `r${target.revision} names no rollback command`);
    // No mix and match: a rollback command only ever takes its own revision back to the one it names.
    if (target.previous !== revision.revision) {
      throw new EnvelopeRejected(
        'WRONG_ROLLBACK',
        `r${target.revision}'s rollback goes back to ${target.previous === undefined ? 'no named revision' : `r${target.previous}`}, not to r${revision.revision}`,
      );
    }
    apply = target.rollback;
  }
  // Every payload field comes from the signed body, the file's location included: the paths in the
  // steps handed to the worker are ignored.
  const payload = revision.payload.map((file) => localPayload(opts, steps.profile, file));
  return {
    profile: steps.profile,
    revision: revision.revision,
    apply,
    verify: revision.verify,
    payload,
    envelope: steps.envelope,
    ...(steps.rollbackOf ? { rollbackOf: steps.rollbackOf } : {}),
    wayBackMs: wayBackOf(revision),
  };
}

function stagingDir(steps: Pick<RevisionSteps, 'profile' | 'revision'>): string {
  return `.wavegate/staging/${steps.profile}/${steps.revision}`;
}

/** Run a revision command in the login's home with $WAVEGATE_STAGING set (also the fleet board's way to verify). */
export function shellFor(steps: Pick<RevisionSteps, 'profile' | 'revision'>, command: string): string {
  return `cd "$HOME" && WAVEGATE_STAGING="$HOME/${stagingDir(steps)}" && export WAVEGATE_STAGING && ${command}`;
}

/**
 * Stage the payload files in the revision's staging directory. The worker reads each file (resolved by
 * signedSteps) and checks its signed size and digest just before it is sent; the session checks the
 * copies on the device.
 */
async function stagePayload(
  session: DeviceSession,
  steps: RevisionSteps,
  timeoutMs: number,
  beat: (detail: string) => void,
): Promise<void> {
  if (steps.payload.length === 0) return;
  const files = steps.payload.map(
    (file): StagedFile => ({ name: file.name, sha256: file.sha256, read: () => readSignedPayload(file) }),
  );
  await session.stage(stagingDir(steps), files, { timeoutMs, onStaged: (name) => beat(`staged ${name}`) });
}

/** The worker's copy of a payload file, checked against its signed size and digest (a mismatch is an envelope rejection). */
function readSignedPayload(file: PayloadFile): Buffer {
  try {
    return readPayload(file.source, file);
  } catch (err) {
    if (err instanceof PayloadRefused) throw new EnvelopeRejected(err.reason, err.message.slice(err.reason.length + 2));
    throw err;
  }
}

export interface ApplyOptions {
  commandTimeoutMs: number;
  /** The worker's profiles directory: pins (`<dir>/<profile>/trust.yaml`) and payload files (default this checkout's profiles/). */
  profilesRoot?: string;
  /** Refuse unsigned steps even for a profile without pins (workers: yes; direct transport tests: no). */
  requireEnvelope?: boolean;
  /** Epoch milliseconds for the expiry check (default now). */
  now?: number;
  heartbeat?: (detail: string) => void;
  /** How often the apply heartbeats and polls a running apply's outcome on the device (default 1 s). */
  heartbeatIntervalMs?: number;
  /**
   * Which unit this is (the activity's rollout, run, activity id and attempt): a retry of the same unit
   * reattaches to the apply it finds running or finished on the device. Default: a unit of its own.
   */
  holder?: ApplyHolder;
  /** Whether a holder's workflow run is known to be closed (Temporal): a proof that it is gone. */
  holderClosed?: (holder: ApplyHolder) => Promise<boolean>;
  /** Aborting closes the connection (an activity cancelled or timed out on the server stops here). */
  signal?: AbortSignal;
  /** Checks the steps' `after` on the device before the apply lock is taken (device/dependencies.ts). */
  dependencies?: DependencyChecker;
  /** Payloads up to this many bytes in all are streamed on the apply script's input (default 1 MiB; 0: always SFTP when missing). */
  streamPayloadMaxBytes?: number;
  /** How the device is reached (default its transport, connectDevice): the pull agent passes its LOCAL session (device/transport/local.ts). */
  connect?: (target: DeviceTarget) => Promise<DeviceSession>;
  /** A first attempt whose connect fails (connect/timeout: nothing ran) returns the `offline` outcome instead of throwing. */
  reportOffline?: boolean;
  /** A device whose marker is above this revision answers `ahead` and nothing runs (ApplyInput.aheadAbove). */
  aheadAbove?: number;
  /**
   * Asked on the same session once the unit has answered (its result, or the error it ended with): the device's
   * receipt of that answer, or why there is none (device/channel/ssh-receipt.ts); undefined: that answer gets none.
   */
  receipt?: (session: DeviceSession, answer: unknown) => Promise<ReceiptAnswer | undefined>;
}

/** A receipt an answer travels with, or why it has none: the answer stands either way. */
export type ReceiptAnswer = { receipt: string } | { receiptProblem: string };

/** The lock protocol's own commands are short: they get this long, however long an apply may run. */
const LOCK_STEP_TIMEOUT_MS = 10_000;

/**
 * Bring one device to a revision as one exclusive, resumable unit on the device: take the device's apply
 * lock, verify first (already in place: nothing to apply), stage the payload, start apply detached on
 * the device, wait for its recorded outcome, verify again reading the fact back, write the marker,
 * release the lock. A retry of the same unit (a dropped connection, a dead worker) reattaches to the
 * apply it finds instead of starting a second one; docs/formats.md, "The apply lock". All of it is
 * one remote script over one connection (runUnit, ./transport/apply-script.ts).
 */
export async function applyToDevice(
  target: DeviceTarget,
  given: RevisionSteps,
  opts: ApplyOptions,
): Promise<ApplyResult> {
  const profilesRoot = opts.profilesRoot ?? CHECKOUT_PROFILES_ROOT;
  const holder: ApplyHolder = opts.holder ?? { rollout: 'direct', run: randomUUID(), activity: 'apply', attempt: 1 };
  const interval = opts.heartbeatIntervalMs ?? 1_000;
  let detail = 'connect';
  const beat = (d: string) => {
    detail = d;
    opts.heartbeat?.(d);
  };
  // Verified before the device is contacted: a rejected envelope runs nothing there, not even verify.
  const steps = signedSteps(given, {
    trust: loadWorkerTrust(profilesRoot, given.profile),
    requireEnvelope: opts.requireEnvelope ?? false,
    now: opts.now ?? Date.now(),
    profilesRoot,
  });
  // A payload file that differs from its signed size or digest is refused before the device is
  // contacted (read again when it is sent: the check at upload time stays).
  for (const file of steps.payload) readSignedPayload(file);
  // Heartbeat on a clock, not only from running commands: a short heartbeat timeout then only catches
  // a worker that is really gone, whatever step it is in (connecting, staging, waiting).
  const ticker = setInterval(() => opts.heartbeat?.(detail), interval);
  try {
    beat('connect');
    const session = await connectOrOffline(
      target,
      opts.connect ?? connectDevice,
      opts.reportOffline === true && holder.attempt === 1,
    );
    if ('outcome' in session) return session;
    const onAbort = () => session.close();
    opts.signal?.addEventListener('abort', onAbort);
    try {
      const unit = answerOf(session, target, steps, given, holder, { ...opts, heartbeatIntervalMs: interval }, beat);
      if (!opts.receipt) return await unit;
      const answered = await unit.then(
        (result) => ({ result }),
        (error: unknown) => ({ error }),
      );
      beat('receipt');
      // The error keeps its type and message: its receipt rides on it to the failure's details (./apply-failure.ts).
      if ('error' in answered) {
        const proof = await opts.receipt(session, answered.error);
        throw proof && answered.error instanceof Error ? Object.assign(answered.error, proof) : answered.error;
      }
      const proof = await opts.receipt(session, answered.result);
      return proof ? { ...answered.result, ...proof } : answered.result;
    } finally {
      opts.signal?.removeEventListener('abort', onAbort);
      session.close();
    }
  } finally {
    clearInterval(ticker);
  }
}

/** The unit's answer over an open session: the floor and dependencies first when the steps wait for others, then the script. */
async function answerOf(
  session: DeviceSession,
  target: DeviceTarget,
  steps: VerifiedSteps,
  given: RevisionSteps,
  holder: ApplyHolder,
  opts: ApplyOptions & { heartbeatIntervalMs: number },
  beat: (detail: string) => void,
): Promise<ApplyResult> {
  let skipFloor = false;
  if (given.after?.length) {
    // With `after`, the floor and the dependencies are checked first by commands of their own (the
    // dependencies' verifies come from other envelopes); the unit's script then skips the floor.
    beat('floor');
    const held = await session.readFloor(steps.profile, {
      timeoutMs: Math.min(opts.commandTimeoutMs, LOCK_STEP_TIMEOUT_MS),
    });
    const refusal = floorRefusal(held, steps.revision, opts.now ?? Date.now(), given.floor?.below);
    if (refusal) throw new EnvelopeRejected('BELOW_FLOOR', `${target.id}: ${refusal}`);
    // `after` is the history's (signedSteps keeps only signed content): references, checked by their own envelopes.
    const waiting = await unmetDependencies(session, target.id, steps, given.after, holder, opts, beat);
    if (waiting) return waiting;
    // Going below a floor is judged again by the script, on the device's own clock.
    skipFloor = held === null || steps.revision >= held.revision;
  }
  return await runUnit(session, target.id, steps, given.floor, holder, opts, beat, skipFloor);
}

/**
 * Connect with the transport's own (generous) connect timeout. With `offline`, a connect that fails
 * before login (kind connect or timeout: nothing ran on the device) is the `offline` outcome; only a
 * first attempt asks, as a retry may follow an attempt that did run something. A slow device whose
 * connect succeeds is never offline.
 */
async function connectOrOffline(
  target: DeviceTarget,
  connect: (target: DeviceTarget) => Promise<DeviceSession>,
  offline: boolean,
): Promise<DeviceSession | ApplyResult> {
  try {
    return await connect(target);
  } catch (err) {
    if (offline && err instanceof TransportError && (err.kind === 'connect' || err.kind === 'timeout')) {
      return { device: target.id, outcome: 'offline', steps: [], detail: err.message };
    }
    throw err;
  }
}

/**
 * Ordering between profiles: before the apply lock is taken, whether the device verifies each profile
 * the steps wait for (`after`). Not met: the outcome says so and nothing else has run. A retry of a unit
 * that already holds the device's lock passed this check before it took the lock: it goes on to
 * reattach, never leaving its own apply behind because a dependency changed since.
 */
async function unmetDependencies(
  session: DeviceSession,
  device: string,
  steps: RevisionSteps,
  after: RevisionSteps['after'],
  holder: ApplyHolder,
  opts: ApplyOptions,
  beat: (detail: string) => void,
): Promise<ApplyResult | null> {
  if (!after?.length) return null;
  if (!opts.dependencies)
    throw new EnvelopeRejected(
      'NO_DEPENDENCY_CHECK',
      `${steps.profile} r${steps.revision} waits for ${after.map((d) => `${d.profile} r${d.revision}`).join(', ')}, and this apply was given no way to check that`,
    );
  beat('lock-read');
  const lock = await session.readApplyLock(steps.profile, {
    timeoutMs: Math.min(opts.commandTimeoutMs, LOCK_STEP_TIMEOUT_MS),
  });
  const ours =
    lock?.holder &&
    lock.holder.rollout === deviceValue(holder.rollout) &&
    lock.holder.run === deviceValue(holder.run) &&
    lock.holder.activity === deviceValue(holder.activity);
  if (ours) return null;
  beat('dependencies');
  const found = await opts.dependencies(session, device, after);
  return found
    ? { device, outcome: 'dependency-unmet', steps: ['dependencies'], unmet: found.unmet, detail: found.detail }
    : null;
}

/**
 * The unit on the device as one remote script (./transport/apply-script.ts): floor, lock, verify first,
 * staging check, the detached apply, its outcome, verify, marker, release. The worker acts on the
 * script's parsed report; it runs the script again only with an answer the device could not reach
 * itself (a floor the shell cannot compare, a lock whose holder only Temporal can prove gone, payload
 * files it had to upload first).
 */
async function runUnit(
  session: DeviceSession,
  device: string,
  steps: VerifiedSteps,
  floor: FloorIntent | undefined,
  holder: ApplyHolder,
  opts: ApplyOptions & { heartbeatIntervalMs: number },
  beat: (detail: string) => void,
  skipFloor: boolean,
): Promise<ApplyResult> {
  const profile = steps.profile;
  const step = steps.rollbackOf ? 'rollback' : 'apply';
  const floorNowMs = opts.now ?? Date.now();
  const floorWork = floorScriptInput(floor, steps.revision, floorNowMs, steps.wayBackMs);
  const ran: string[] = [];
  const answers: Pick<ApplyScriptInput, 'skipFloor' | 'afterStage' | 'breakTheirs'> = { skipFloor };
  // Small payloads travel on the script's standard input (the device writes them only if it lacks
  // them); larger ones go by SFTP when the script says the device lacks them.
  const payloadBytes = steps.payload.reduce((n, f) => n + f.size, 0);
  const stream = steps.payload.length > 0 && payloadBytes <= (opts.streamPayloadMaxBytes ?? STREAM_PAYLOAD_MAX_BYTES);
  let streamed: Buffer | undefined;
  // An earlier unit of this very run still holding the lock with its apply running is waited for, not refused
  // (earlierUnitOfThisRun): up to the apply's own command bound, without using up a script round.
  const waitForEarlierUntil = Date.now() + opts.commandTimeoutMs;
  for (let round = 0; round < MAX_SCRIPT_ROUNDS; round++) {
    beat('apply');
    const script = applyScript({
      profile,
      revision: steps.revision,
      step,
      holder,
      nowMs: Date.now(),
      floorNowMs,
      verify: shellFor(steps, steps.verify),
      apply: shellFor(steps, steps.apply),
      stagingDir: stagingDir(steps),
      payload: steps.payload,
      streamed: stream && !answers.afterStage,
      ownerlessGraceSeconds: OWNERLESS_GRACE_MS / 1000,
      ...(opts.aheadAbove !== undefined ? { aheadAbove: opts.aheadAbove } : {}),
      ...floorWork,
      ...answers,
    });
    if (stream && !answers.afterStage) streamed ??= Buffer.concat(steps.payload.map(readSignedPayload));
    const res = await session.exec(script, {
      timeoutMs: opts.commandTimeoutMs,
      onProgress: (elapsedMs) => beat(`apply running ${Math.round(elapsedMs / 1000)}s`),
      progressIntervalMs: opts.heartbeatIntervalMs,
      ...(stream && !answers.afterStage ? { stdin: streamed } : {}),
    });
    const report = reportOf(res, device, step);
    if ('steps' in report) ran.push(...ranSteps(report.steps, ran));
    switch (report.kind) {
      case 'already-applied':
        // In place with the floor this run raised: an earlier attempt of this apply finished on the device
        // and its worker died before it heard. This rollout changed it, so it is compensated and reverted.
        if (report.steps.some((st) => st.name === 'floor' && st.status === 'ours'))
          return {
            device,
            outcome: 'applied',
            steps: ran,
            detail: 'applied by an earlier attempt of this apply (found in place with the floor this run raised)',
          };
        return { device, outcome: 'already-applied', steps: ran };
      case 'applied':
        return { device, outcome: 'applied', steps: ran };
      case 'ahead':
        return {
          device,
          outcome: 'ahead',
          steps: [],
          detail: `the device is at revision ${report.marker}, above r${opts.aheadAbove}`,
        };
      case 'floor': {
        // The worker's rule decides (core/floor.ts); the shell only stops where it cannot compare. The
        // way back is judged on the device's clock, which the script reports with the floor.
        const refusal = floorRefusal(
          parseFloor(report.text),
          steps.revision,
          deviceClockOf(report.text) ?? floorNowMs,
          floor?.below,
        );
        if (refusal) throw new EnvelopeRejected('BELOW_FLOOR', `${device}: ${refusal}`);
        answers.skipFloor = true;
        continue;
      }
      case 'lock-held':
        if (earlierUnitOfThisRun(report.record, holder) && Date.now() < waitForEarlierUntil) {
          beat(`waiting for activity ${report.record.holder?.activity} of this run to end its apply`);
          await sleep(EARLIER_UNIT_POLL_MS, undefined, opts.signal ? { signal: opts.signal } : {});
          round--;
          continue;
        }
        throw new ApplyLockHeld(device, report.record, profile);
      case 'lock-theirs': {
        // Not running, never started or ended: its activity may still be between steps, unless Temporal
        // says its workflow run is closed.
        const theirs = report.record.holder;
        const gone = theirs && opts.holderClosed ? await opts.holderClosed(theirs).catch(() => false) : false;
        if (!theirs || !gone) throw new ApplyLockHeld(device, report.record, profile);
        answers.breakTheirs = {
          holder: theirs,
          reason: `stale, broken by ${deviceValue(holder.rollout)} activity ${deviceValue(holder.activity)} attempt ${holder.attempt}: its workflow run ${theirs.run} is closed`,
        };
        continue;
      }
      case 'lock-busy':
        throw new TransportError('dropped', `${device}: the apply lock for ${profile} kept changing hands; try again`);
      case 'stage-needed':
        // Verify first ran and failed under our lock: upload, then the same script goes on from the staging check.
        if (answers.afterStage)
          throw new StepFailed(
            'payload digest check',
            { code: 1, stdout: '', stderr: 'the staged payload files do not have their signed SHA-256 on the device' },
            device,
          );
        if (!ran.includes('verify')) ran.push('verify');
        beat('stage');
        await stagePayload(session, steps, opts.commandTimeoutMs, beat);
        ran.push('stage');
        answers.afterStage = true;
        continue;
      case 'failed':
        throw new StepFailed(report.failed, { code: report.code, stdout: report.output, stderr: '' }, device);
      case 'apply-gone':
        throw new TransportError('dropped', `${device}: ${report.why}; verify decides on the retry`);
    }
  }
  throw new TransportError(
    'dropped',
    `${device}: the apply unit for ${profile} did not settle in ${MAX_SCRIPT_ROUNDS} runs; try again`,
  );
}

/**
 * The floor work of one apply as the script takes it (core/floor.ts): the compensation of the rollout
 * that raised the floor steps it down to where it went, with no way back; any other apply with a floor
 * intent raises the floor once confirmed (found in place: only from below, with no way back), with the
 * way back its verified revision signs. The device adds its own clock (`at`) and keeps `from` at or
 * above the floor it replaces, so neither comes from here.
 */
function floorScriptInput(
  floor: FloorIntent | undefined,
  revision: number,
  nowMs: number,
  wayBackMs: number,
): Pick<ApplyScriptInput, 'floorWrite' | 'floorRestore'> {
  if (!floor) return {};
  if (floor.below?.kind === 'compensation') {
    const down = stepDownFloor(floor.below.rollout, floor.below.run, revision, nowMs);
    return { floorRestore: { rollout: down.rollout, run: down.run!, text: floorText(down, ['at']) } };
  }
  if (!floor.raise) return {};
  const raised = raisedFloor({ ...floor, raise: floor.raise }, revision, nowMs, wayBackMs);
  return {
    floorWrite: {
      raise: floorText(raised, ['from', 'at']),
      raiseFrom: raised.from,
      inPlace: floorText({ ...raised, from: revision, window: 0, wayBack: 0 }, ['at']),
      rollout: raised.rollout,
      run: raised.run!,
    },
  };
}

/** A floor's text without the keys the device itself writes (the script appends them). */
function floorText(floor: DeviceFloor, deviceWrites: ReadonlyArray<'from' | 'at'>): string {
  return formatFloor(floor)
    .split('\n')
    .filter((line) => line !== '' && !deviceWrites.some((key) => line.startsWith(`${key}=`)))
    .map((line) => `${line}\n`)
    .join('');
}

/** The device's clock (epoch ms) as the script reports it after a floor it cannot compare (`now=`). */
function deviceClockOf(text: string): number | undefined {
  const match = /\nnow=(\d{1,15})\n?$/.exec(text);
  return match ? Number(match[1]) : undefined;
}

/** Payloads up to this size (all files together) are streamed in the apply's one command. */
const STREAM_PAYLOAD_MAX_BYTES = 1024 * 1024;

/** Floor answer, lock break, staging: each needs at most one more run of the script. */
const MAX_SCRIPT_ROUNDS = 4;

/**
 * Whether the lock's holder is an earlier unit (another activity) of this very workflow run. The run starts a
 * device's next unit only once the previous one closed, so that one is gone: cancelled mid-apply (a cancel, an
 * abort), it left its detached apply running on the device. Its compensation, the next unit, waits for that apply
 * to end; the script then puts the lock aside as the same run's stale one (docs/formats.md, "The apply lock").
 * Refusing it instead would leave the device changed and marked rollback-failed for a race with its own rollout.
 */
function earlierUnitOfThisRun(record: ApplyLockRecord, holder: ApplyHolder): boolean {
  const theirs = record.holder;
  return (
    theirs !== null &&
    theirs.rollout === deviceValue(holder.rollout) &&
    theirs.run === deviceValue(holder.run) &&
    theirs.activity !== deviceValue(holder.activity)
  );
}

/** How often a unit looks again at an earlier unit's apply it waits for. */
const EARLIER_UNIT_POLL_MS = 1_000;

/** How long a lock may stay without an owner before it counts as a dead claimer's (a live claim names itself within milliseconds). */
const OWNERLESS_GRACE_MS = 3_000;

/** The evidence for the audit trail, in today's words: verify, stage, apply (or reattach), verify, marker. */
function ranSteps(report: readonly ReportStep[], already: readonly string[]): string[] {
  const out: string[] = [];
  for (const s of report) {
    if (s.name === 'verify-first' || s.name === 'verify') out.push('verify');
    else if (s.name === 'reattach') out.push('reattach');
    else if (s.name === 'stage' && (s.status === 'present' || s.status === 'streamed') && !already.includes('stage'))
      out.push('stage');
    else if (s.name === 'launch') out.push('apply');
    else if (s.name === 'marker' && s.status === 'written') out.push('marker');
    else if (s.name === 'floor' && (s.status === 'raised' || s.status === 'restored')) out.push('floor');
  }
  return out;
}

/**
 * The script's report, strictly read. A script refused as a whole before its first line (the device
 * exited non-zero having run none of it) is the device saying no to the apply; any other report that
 * does not add up (cut short, garbled) is a dropped session: a retry reattaches, nothing is guessed.
 */
function reportOf(res: ExecResult, device: string, step: 'apply' | 'rollback'): ApplyReport {
  try {
    return readApplyReport(res.stdout, step);
  } catch (err) {
    if (!(err instanceof ReportUnreadable)) throw err;
    const begun = res.stdout.split('\n').some((l) => l.startsWith('WAVEGATE-STEP begin '));
    if (!begun && res.code !== null && res.code !== 0) throw new StepFailed(step, res, device);
    throw new TransportError(
      'dropped',
      `${device}: the apply unit's report cannot be read (${err.message}; exit ${res.code}); a retry reattaches to what it left on the device`,
    );
  }
}
