import type { DeviceSnapshot, DeviceTarget } from '../../core/rollout-state';
import { dependencyChecker } from '../dependencies';
import { applyToDevice, CHECKOUT_PROFILES_ROOT, shellFor } from '../steps';
import { readMetricValue } from '../../core/health';
import { connectDevice, TransportError, type ConnectOptions, type DeviceSession, type ExecResult } from '../transport';
import { refusalOf } from './refusal';
import { sshLoginKeys } from './ssh-login-key';
import { sshReceiptAsk } from './ssh-receipt';
import { baseTarget } from './target';
import type {
  About,
  BoardAnswer,
  BoardQuestion,
  ChannelDeps,
  DeviceChannel,
  DriftAnswer,
  DriftQuestion,
  HealthQuestion,
  ProbeOptions,
  Reading,
  SignedCommand,
} from './types';

/**
 * The SSH channel: every question is a session to the device (device/transport/), opened for it
 * and closed after it. What runs there is the signed content (the apply script, verify, the signed
 * health commands) or the worker's own `echo online` and marker reads.
 */

/** Run `fn` in a session to the device, closed after it. */
async function inSession<T>(
  target: DeviceTarget,
  opts: ConnectOptions,
  fn: (session: DeviceSession) => Promise<T>,
): Promise<T> {
  const session = await connectDevice(target, opts);
  try {
    return await fn(session);
  } finally {
    session.close();
  }
}

/**
 * A session for one health question: closed when the check's deadline passes or it is cancelled, so a
 * hanging command or connect ends there (the check then counts the device as unread).
 */
async function inHealthSession<T>(
  target: DeviceTarget,
  q: HealthQuestion,
  fn: (session: DeviceSession) => Promise<T>,
): Promise<T> {
  const session = await connectDevice(target, {
    connectTimeoutMs: Math.max(1, Math.min(q.connectTimeoutMs, q.remainingMs())),
  });
  const close = () => session.close();
  q.signal.addEventListener('abort', close, { once: true });
  if (q.signal.aborted) session.close();
  try {
    return await fn(session);
  } finally {
    q.signal.removeEventListener('abort', close);
    session.close();
  }
}

const left = (q: HealthQuestion) => Math.max(1, q.remainingMs());

/** The last words a failing command printed, for the evidence (short; commands may be chatty). */
export function tail(stdout: string, stderr: string): string {
  const text = (stderr.trim() || stdout.trim()).split('\n').pop()?.trim() ?? '';
  return text ? `: ${JSON.stringify(text.slice(-80))}` : '';
}

function evidence(res: ExecResult): string {
  return (res.stdout || res.stderr).trim().slice(0, 400);
}

/** Why a device gave no answer: a refusal (host key, login, config) is named as such, not as silence. */
function unreachableReason(err: unknown): string {
  if (err instanceof TransportError && !err.retryable) return `refused (${err.kind}): ${err.message}`;
  return `never answered: ${(err as Error).message}`;
}

export function sshChannel(deps: ChannelDeps): DeviceChannel {
  const requireEnvelope = !deps.allowUnsigned;
  return {
    name: 'ssh',
    hasTwin: false,

    target(device) {
      const { hostKey, knownHosts, key, agent, jumpHost } = device.ssh;
      return {
        ...baseTarget(device),
        ssh: { hostKey, knownHosts, key, agent, ...(jumpHost ? { jumpHost } : {}) },
        ...(device.receipts ? { receipts: device.receipts } : {}),
      };
    },

    apply(target, steps, ctx) {
      return applyToDevice(target, steps, {
        commandTimeoutMs: ctx.commandTimeoutMs,
        profilesRoot: deps.profilesRoot,
        requireEnvelope,
        heartbeat: ctx.heartbeat,
        reportOffline: ctx.reportOffline,
        ...(ctx.aheadAbove !== undefined ? { aheadAbove: ctx.aheadAbove } : {}),
        holder: ctx.holder,
        holderClosed: ctx.holderClosed,
        // An enrolled device signs its receipt of the unit's answer on the same session (./ssh-receipt.ts).
        receipt: sshReceiptAsk(target, steps, ctx.holder, ctx.phase ?? null, ctx.commandTimeoutMs),
        signal: ctx.signal,
        // The spec's `after`, checked on the device from this worker's own signed envelopes.
        dependencies: dependencyChecker({
          profilesRoot: deps.profilesRoot ?? CHECKOUT_PROFILES_ROOT,
          requireEnvelope,
          timeoutMs: Math.min(ctx.commandTimeoutMs, 60_000),
        }),
      });
    },

    probe,
    online,
    runChecks,
    errorRate,
    boardRead,
    drift,

    readMarker(target, profile, opts) {
      return inSession(target, { connectTimeoutMs: opts.connectTimeoutMs ?? 5_000 }, (session) =>
        session.readMarker(profile, { timeoutMs: opts.commandTimeoutMs ?? 30_000 }),
      );
    },

    // The board runs verify on an SSH device as it reads it: there is nothing to ask beforehand.
    askReverify: async () => 'live',
    reverified: async () => true,

    loginKeys: sshLoginKeys,
  };
}

/**
 * The canary's probe. Only a connect that fails makes the device unreachable; a marker read that fails or
 * is slow after a good connect leaves it reachable with no marker known, so its own apply (verify-first)
 * decides (a slow device is not an offline one).
 */
async function probe(device: DeviceSnapshot, profile: string, opts: ProbeOptions): Promise<DeviceSnapshot> {
  const base: DeviceSnapshot = { ...device, current: null, reachable: true };
  delete base.error;
  delete base.refusal;
  let session: DeviceSession;
  try {
    session = await connectDevice(
      device,
      opts.connectTimeoutMs !== undefined ? { connectTimeoutMs: opts.connectTimeoutMs } : undefined,
    );
  } catch (err) {
    const refusal = err instanceof TransportError ? refusalOf(err.kind) : undefined;
    return { ...base, reachable: false, error: (err as Error).message, ...(refusal ? { refusal } : {}) };
  }
  try {
    return { ...base, current: await session.readMarker(profile, { timeoutMs: opts.readTimeoutMs }) };
  } catch (err) {
    return { ...base, error: `marker not read (the apply's verify-first decides): ${(err as Error).message}` };
  } finally {
    session.close();
  }
}

/** devices-online: the device answers `echo online`. */
function online(target: DeviceTarget, q: HealthQuestion): Promise<Reading<string | null>> {
  return inHealthSession(target, q, async (session): Promise<Reading<string | null>> => {
    const res = await session.exec('echo online', { timeoutMs: left(q) });
    return {
      ok: true,
      value: res.code === 0 && res.stdout.includes('online') ? null : `answered exit ${res.code}`,
    };
  });
}

/** The signed checks, one after another in one session: the ones that exit non-zero, with their last words. */
function runChecks(
  target: DeviceTarget,
  checks: readonly SignedCommand[],
  _about: About,
  q: HealthQuestion,
): Promise<Reading<string[]>> {
  return inHealthSession(target, q, async (session): Promise<Reading<string[]>> => {
    const failed: string[] = [];
    for (const c of checks) {
      try {
        const res = await session.exec(c.command, { timeoutMs: left(q) });
        if (res.code !== 0) failed.push(`${c.name} exit ${res.code}${tail(res.stdout, res.stderr)}`);
      } catch (err) {
        // Keep what this device already said no to; only a device with no answer at all is unread.
        if (failed.length === 0) throw err;
        break;
      }
    }
    return { ok: true, value: failed };
  });
}

/** The signed error-rate command's output, read as one metric value. */
function errorRate(target: DeviceTarget, command: string, _about: About, q: HealthQuestion): Promise<Reading<number>> {
  return inHealthSession(target, q, async (session): Promise<Reading<number>> => {
    const res = await session.exec(command, { timeoutMs: left(q) });
    if (res.code !== 0)
      return { ok: false, kind: 'unanswered', reason: `exit ${res.code}${tail(res.stdout, res.stderr)}` };
    const value = readMetricValue(res.stdout);
    return value.ok ? { ok: true, value: value.value } : { ok: false, kind: 'unanswered', reason: value.reason };
  });
}

/** The board's read: the marker, then the revision's verify run on the device. */
async function boardRead(target: DeviceTarget, q: BoardQuestion): Promise<BoardAnswer> {
  let session: DeviceSession;
  try {
    session = await connectDevice(target, { connectTimeoutMs: q.connectTimeoutMs ?? 5_000 });
  } catch (err) {
    return { state: 'pending', reason: unreachableReason(err) };
  }
  try {
    const marker = await session.readMarker(q.profile, { timeoutMs: q.commandTimeoutMs ?? 30_000 });
    const res = await session.exec(shellFor({ profile: q.profile, revision: q.revision }, q.verify), {
      timeoutMs: q.commandTimeoutMs ?? 30_000,
    });
    if (res.code === 0) {
      return {
        state: q.provable ? 'applied' : 'claimed',
        marker,
        evidence: evidence(res),
        ...(q.provable ? {} : { reason: 'verify exits 0 but cannot prove the revision (non-provable)' }),
      };
    }
    // No marker at all: wavegate never brought this device anywhere — a signal, not an empty cell.
    return {
      state: 'pending',
      marker,
      reason:
        marker !== null
          ? `verify exited ${res.code} (marker says r${marker})`
          : `verify exited ${res.code} (never reported: no revision marker)`,
      evidence: evidence(res),
    };
  } catch (err) {
    return { state: 'pending', reason: `never answered: ${(err as Error).message}` };
  } finally {
    session.close();
  }
}

/** Drift: whether the revision the device's marker names still verifies there. */
async function drift(target: DeviceTarget, q: DriftQuestion): Promise<DriftAnswer> {
  let session: DeviceSession;
  try {
    session = await connectDevice(target, { connectTimeoutMs: q.connectTimeoutMs ?? 5_000 });
  } catch (err) {
    // A refusal (host key, login, config) is not a device being away: the device answered, and not as pinned.
    if (err instanceof TransportError && !err.retryable)
      return { marker: null, status: 'refused', detail: `refused (${err.kind}): ${err.message}` };
    return { marker: null, status: 'unreachable', detail: (err as Error).message };
  }
  try {
    const marker = await session.readMarker(q.profile, { timeoutMs: q.commandTimeoutMs ?? 30_000 });
    if (marker === null) return { marker, status: 'no-marker' };
    const verify = q.verifyOf(marker);
    if (verify === undefined)
      return { marker, status: 'unknown-revision', detail: `r${marker} is not a known revision of ${q.profile}` };
    const res = await session.exec(shellFor({ profile: q.profile, revision: marker }, verify), {
      timeoutMs: q.commandTimeoutMs ?? 30_000,
    });
    return res.code === 0
      ? { marker, status: 'ok' }
      : {
          marker,
          status: 'drifted',
          detail: `r${marker} verify exited ${res.code}: ${evidence(res) || '(no output)'}`,
        };
  } catch (err) {
    return { marker: null, status: 'unreachable', detail: (err as Error).message };
  } finally {
    session.close();
  }
}
