import { createHash } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { dirname, isAbsolute, relative } from 'node:path';
import { WavegateError } from '../core/errors';
import { floorRefusal } from '../core/floor';
import { classifyRevision } from '../core/provability';
import type { PayloadFile, Revision } from '../core/revision';
import type { DeviceTarget } from '../core/rollout-state';
import { verifyEnvelope, type Trust } from '../core/signing';
import { envelopeDigestOf, type DesiredEntry, type ProfileReport } from '../core/twin';
import { applyToDevice, ApplyLockHeld, EnvelopeRejected, shellFor, StepFailed, TransportError } from '../device/steps';
import type { DeviceSession } from '../device/transport';
import { profileDir } from '../intake/profile-dir';
import type { AgentTrust } from './pins';
import { stagePins } from './pins';

/**
 * One desired entry on this device, checked by the agent itself before anything runs: the envelope
 * digest the twin names, the envelope against the agent's OWN pins and threshold and its expiry, the
 * device's floor; then the payload downloaded and checked against the signed SHA-256, and the same
 * apply unit as the SSH path (applyToDevice over the local session, holder = the entry's holder: a
 * restarted agent reattaches to the apply it left running). The answer is the profile's report: a
 * refusal (`refused` + reason code) leaves the device on its revision.
 */
export interface EntryContext {
  deviceId: string;
  stateDir: string;
  trust: AgentTrust;
  connect: () => Promise<DeviceSession>;
  download: (profile: string, revision: number, name: string) => Promise<Buffer>;
  commandTimeoutMs: number;
  signal?: AbortSignal;
  log: (line: string) => void;
  now?: () => number;
  /** The profile's trust news in the answer that brought the entry, refused (agent/trust-news.ts): refused with it. */
  newsRefusal?: (profile: string) => { reason: string; message: string } | undefined;
}

const clip = (s: string) => (s.length > 400 ? `${s.slice(0, 397)}...` : s);

class Refusal extends Error {
  constructor(
    readonly reason: string,
    message: string,
  ) {
    super(message);
  }
}

/** The agent's pins for `profile`; a trust file others may write (or not a file) is a refusal, UNSAFE_TRUST. */
function trustOf(trust: AgentTrust, profile: string): Trust | undefined {
  try {
    return trust.of(profile);
  } catch (err) {
    if (err instanceof WavegateError) throw new Refusal('UNSAFE_TRUST', err.message);
    throw err;
  }
}

/** The verified revision of an entry, or Refusal naming why not (digest, pins, signature, threshold, expiry). */
export function verifiedRevision(entry: DesiredEntry, trust: AgentTrust, now: number): Revision {
  if (entry.steps.profile !== entry.profile || entry.steps.revision !== entry.revision)
    throw new Refusal(
      'MALFORMED',
      `the entry is for ${entry.profile} r${entry.revision}, its steps for ${entry.steps.profile} r${entry.steps.revision}`,
    );
  if (!entry.steps.envelope)
    throw new Refusal(
      'UNSIGNED',
      `${entry.profile} r${entry.revision} has no signed envelope; this agent runs signed revisions only`,
    );
  if (envelopeDigestOf(entry.steps.envelope) !== entry.envelopeDigest)
    throw new Refusal(
      'DIGEST',
      `the envelope's sha256 is not the envelopeDigest the twin names (${entry.envelopeDigest.slice(0, 16)}...): changed on the way`,
    );
  const pins = trustOf(trust, entry.profile);
  if (!pins)
    throw new Refusal('NO_TRUST', `this agent holds no pins for profile "${entry.profile}" (${trust.describe()})`);
  const open = (envelope: NonNullable<DesiredEntry['steps']['envelope']>, what: string): Revision => {
    const verdict = verifyEnvelope(envelope, pins, { now });
    if (!verdict.ok)
      throw new Refusal(verdict.reason, `${entry.profile} r${entry.revision} ${what}: ${verdict.message}`);
    return verdict.revision;
  };
  const revision = open(entry.steps.envelope, 'envelope');
  if (revision.profile !== entry.profile || revision.revision !== entry.revision)
    throw new Refusal(
      'WRONG_REVISION',
      `the signed envelope holds ${revision.profile} r${revision.revision}, the entry says ${entry.profile} r${entry.revision}`,
    );
  if (entry.steps.rollbackOf) open(entry.steps.rollbackOf, 'rollback envelope');
  return revision;
}

/** Fetch one signed payload file into `<state>/profiles/<profile>/<source>`, checked by size and SHA-256 first. */
async function fetchPayload(
  ctx: EntryContext,
  profilesRoot: string,
  entry: DesiredEntry,
  file: PayloadFile,
): Promise<void> {
  const layout = profileDir(profilesRoot, entry.profile);
  const path = layout.payloadSource(file.source);
  const rel = relative(layout.payloadDir, path);
  if (rel === '' || rel.startsWith('..') || isAbsolute(rel))
    throw new Refusal(
      'PAYLOAD_OUTSIDE_ROOT',
      `payload "${file.name}" (source ${JSON.stringify(file.source)}) is not under payload/`,
    );
  const digest = (b: Buffer) => createHash('sha256').update(b).digest('hex');
  if (existsSync(path) && digest(readFileSync(path)) === file.sha256) return; // already here from an earlier attempt
  const bytes = await ctx.download(entry.profile, entry.revision, file.name);
  if (bytes.length !== file.size || digest(bytes) !== file.sha256)
    throw new Refusal(
      'PAYLOAD_DIGEST_MISMATCH',
      `payload "${file.name}" from the gateway is ${bytes.length} bytes with another sha256 than the signed ${file.sha256.slice(0, 16)}... (${file.size} bytes)`,
    );
  mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
  writeFileSync(`${path}.part`, bytes, { mode: 0o600 });
  chmodSync(`${path}.part`, 0o600);
  renameSync(`${path}.part`, path);
}

export async function applyEntry(ctx: EntryContext, entry: DesiredEntry): Promise<ProfileReport> {
  const now = ctx.now ?? Date.now;
  const session = await ctx.connect();
  let marker: number | null = null;
  const report = (fields: Omit<ProfileReport, 'revision' | 'requestId' | 'at'>): ProfileReport => ({
    revision: marker,
    requestId: entry.requestId,
    at: new Date(now()).toISOString(),
    ...fields,
    ...(fields.detail ? { detail: clip(fields.detail) } : {}),
  });
  try {
    marker = await session.readMarker(entry.profile, { timeoutMs: 10_000 });
    let revision: Revision;
    let pins: Trust;
    try {
      const news = ctx.newsRefusal?.(entry.profile);
      if (news)
        throw new Refusal(
          news.reason,
          `the trust of ${entry.profile} this sync brought does not verify, so nothing new of it applies: ${news.message}`,
        );
      revision = verifiedRevision(entry, ctx.trust, now());
      // The pins staged below for applyToDevice, read again: gone or refused since is a refusal too.
      const staged = trustOf(ctx.trust, entry.profile);
      if (!staged)
        throw new Refusal(
          'NO_TRUST',
          `this agent holds no pins for profile "${entry.profile}" (${ctx.trust.describe()})`,
        );
      pins = staged;
      // The exemption (a compensation or revert of the rollout and run that raised the floor) travels in
      // the steps; the floor rule checks it against the floor's own tags, so a forged one buys nothing.
      const refusal = floorRefusal(
        await session.readFloor(entry.profile, { timeoutMs: 10_000 }),
        entry.revision,
        now(),
        entry.steps.floor?.below,
      );
      if (refusal) throw new Refusal('BELOW_FLOOR', refusal);
    } catch (err) {
      if (err instanceof Refusal) return report({ state: 'refused', reason: err.reason, detail: err.message });
      throw err;
    }
    const profilesRoot = stagePins(ctx.stateDir, entry.profile, pins);
    const target: DeviceTarget = {
      id: ctx.deviceId,
      host: '',
      port: 0,
      user: '',
      pool: '',
      class: '',
      transport: 'agent',
    } as DeviceTarget;
    try {
      for (const file of revision.payload) await fetchPayload(ctx, profilesRoot, entry, file);
      const result = await applyToDevice(target, entry.steps, {
        commandTimeoutMs: ctx.commandTimeoutMs,
        profilesRoot: profilesRoot,
        requireEnvelope: true,
        now: now(),
        holder: entry.holder,
        connect: ctx.connect,
        ...(ctx.signal ? { signal: ctx.signal } : {}),
      });
      marker = await session.readMarker(entry.profile, { timeoutMs: 10_000 });
      // A revision whose verify cannot read the fact back is only ever claimed (core/provability.ts).
      const provable = classifyRevision(revision).provable;
      if (result.outcome !== 'applied' && result.outcome !== 'already-applied')
        return report({
          state: 'failed',
          reason: result.outcome.toUpperCase(),
          detail: result.detail ?? result.outcome,
          steps: result.steps,
        });
      return report({ state: provable ? result.outcome : 'claimed', steps: result.steps });
    } catch (err) {
      marker = await session.readMarker(entry.profile, { timeoutMs: 10_000 }).catch(() => marker);
      if (err instanceof Refusal) return report({ state: 'refused', reason: err.reason, detail: err.message });
      if (err instanceof EnvelopeRejected) return report({ state: 'refused', reason: err.reason, detail: err.message });
      if (err instanceof StepFailed) return report({ state: 'failed', reason: err.step, detail: err.message });
      if (err instanceof ApplyLockHeld) return report({ state: 'failed', reason: 'CONFLICT', detail: err.message });
      throw err; // TransportError (the session closed under a stop): no answer; the next start reattaches
    }
  } finally {
    session.close();
  }
}

/** A re-verify's drift answer (reverifyEntry): the next re-verify looks again, so a restored fact recovers. */
export function isDrift(report: ProfileReport): boolean {
  return report.state === 'failed' && report.reason === 'VERIFY' && (report.steps ?? []).includes('reverify');
}

/**
 * Re-verify what the device answered for `entry`: the envelope again (pins, expiry), then its signed
 * verify on the device. A drift (verify fails) is reported `failed` with reason VERIFY. A pass after a
 * drift reports the revision in place again: `applied`, or `claimed` for a revision whose verify cannot
 * prove the fact (core/provability.ts) — only while the device's marker is still the entry's revision.
 */
export async function reverifyEntry(
  ctx: EntryContext,
  entry: DesiredEntry,
  last: ProfileReport,
): Promise<ProfileReport> {
  const now = ctx.now ?? Date.now;
  const session = await ctx.connect();
  try {
    const marker = await session.readMarker(entry.profile, { timeoutMs: 10_000 });
    const at = new Date(now()).toISOString();
    let revision: Revision;
    try {
      const news = ctx.newsRefusal?.(entry.profile);
      if (news)
        throw new Refusal(
          news.reason,
          `the trust of ${entry.profile} this sync brought does not verify, so nothing new of it applies: ${news.message}`,
        );
      revision = verifiedRevision(entry, ctx.trust, now());
    } catch (err) {
      if (err instanceof Refusal)
        return {
          revision: marker,
          state: 'refused',
          requestId: entry.requestId,
          reason: err.reason,
          detail: clip(err.message),
          at,
        };
      throw err;
    }
    const drift = (detail: string): ProfileReport => ({
      revision: marker,
      state: 'failed',
      requestId: entry.requestId,
      reason: 'VERIFY',
      detail: clip(detail),
      steps: ['reverify'],
      at,
    });
    const res = await session.exec(shellFor(entry.steps, revision.verify), {
      timeoutMs: Math.min(ctx.commandTimeoutMs, 60_000),
    });
    if (res.code !== 0)
      return drift(
        `re-verify of r${entry.revision} exited ${res.code}: ${(res.stderr || res.stdout).trim().slice(-300)}`,
      );
    if (!isDrift(last)) return { ...last, revision: marker, at, steps: ['reverify'] };
    // Recovering from a drift: the fact reads back, but the marker must still say this revision.
    if (marker !== entry.revision)
      return drift(`re-verify of r${entry.revision} passed, but the device's marker is r${marker ?? 'none'}`);
    return {
      revision: marker,
      state: classifyRevision(revision).provable ? 'applied' : 'claimed',
      requestId: entry.requestId,
      steps: ['reverify'],
      at,
    };
  } finally {
    session.close();
  }
}

export { TransportError };
