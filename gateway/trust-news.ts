import { existsSync, readdirSync } from 'node:fs';
import { devicesInScope } from '../core/gates';
import type { HeldVersions, ProfileTrustNews } from '../core/held-trust';
import type { Device } from '../core/inventory';
import { signDocument } from '../core/signed-document';
import { bodyDigest, type Envelope, type KeyPair } from '../core/signing';
import { DEFAULT_TIMESTAMP_EXPIRY_MS, timestampContent, type TimestampContent } from '../core/timestamp';
import { MAX_ROOT_STEPS, type TrustRoot } from '../core/trust-root';
import type { TwinView } from '../core/twin';
import { readDocument } from '../intake/files';
import { profileDir, type ProfileDir } from '../intake/profile-dir';
import { profileTrustState, type ProfileTrustState } from '../intake/trust';
import type { ProfileScope } from '../device/twin/enrolled';
import { profilesUnder } from './enrolled';

/**
 * The trust news of a sync answer (docs/formats.md, "Trust news"): for each profile the agent says it holds
 * (`held`: root and list versions) that the device is in scope of or desires, the roots of the gateway's profiles
 * root above the agent's (at most MAX_ROOT_STEPS at once: the rest at the next sync), the revocation list when newer
 * than the agent's, and, with `--timestamp-key`, this device's timestamp for the profile: the root and list versions
 * current here and the desired revision with its envelope body's digest, signed by the keys of the root's timestamp
 * role this gateway holds. The gateway's copy is verified as a worker's is (intake/trust.ts: the same walk and marks);
 * one that does not verify is sent as it is with the gateway's `problem` and no timestamp: the agent names what is
 * wrong and applies nothing new of the profile, as a worker refuses it. The agent verifies everything itself.
 */
export interface TrustNewsOptions {
  profilesRoot: string;
  /** The device's inventory record (its scope); undefined: the profiles it desires only. */
  deviceOf: (device: string) => Device | undefined;
  /** The timestamp role keys this gateway holds (`--timestamp-key`); none: no timestamps. */
  timestampKeys?: readonly KeyPair[];
  /** How long a timestamp is valid (`--timestamp-expiry`, default 24 h). */
  timestampExpiryMs?: number;
  log: (line: string) => void;
  now?: () => number;
}

/** Profiles and their scopes are read again at most this often. */
const SCOPES_TTL_MS = 5_000;
/** Timestamps kept for reuse (one per device and profile); the oldest goes past it. */
const MAX_CACHED_TIMESTAMPS = 100_000;
/** A timestamp is signed again once this share of its validity has passed (or at most this long after). */
const REUSE_SHARE = 4;
const MAX_REUSE_MS = 3_600_000;

export class TrustNews {
  private scopes: { at: number; list: ProfileScope[] } = { at: -Infinity, list: [] };
  private readonly stamps = new Map<string, { key: string; envelope: Envelope; issuedAt: number }>();
  /** Problems said once each (a broken profile copy, a role this gateway holds no key of). */
  private readonly said = new Set<string>();
  private readonly now: () => number;
  private readonly expiryMs: number;

  constructor(private readonly opts: TrustNewsOptions) {
    this.now = opts.now ?? Date.now;
    this.expiryMs = opts.timestampExpiryMs ?? DEFAULT_TIMESTAMP_EXPIRY_MS;
  }

  /** The news for one sync answer of `deviceId`, whose view is `view` and which holds `held`. */
  answer(deviceId: string, held: Record<string, HeldVersions>, view: TwinView): Record<string, ProfileTrustNews> {
    const names = Object.keys(held);
    if (names.length === 0) return {};
    const device = this.opts.deviceOf(deviceId);
    const inScope = new Set(
      device
        ? this.profileScopes()
            .filter((p) => devicesInScope(p.scope, [device]).length > 0)
            .map((p) => p.name)
        : [],
    );
    const out: Record<string, ProfileTrustNews> = {};
    for (const profile of names) {
      if (!inScope.has(profile) && !Object.hasOwn(view.desired, profile)) continue;
      const news = this.profileNews(deviceId, profile, held[profile]!, view);
      if (news) out[profile] = news;
    }
    return out;
  }

  private profileNews(
    deviceId: string,
    profile: string,
    held: HeldVersions,
    view: TwinView,
  ): ProfileTrustNews | undefined {
    const layout = profileDir(this.opts.profilesRoot, profile);
    let state: ProfileTrustState | undefined;
    let list: Envelope | undefined;
    try {
      // The list's envelope read first, then the state verified: the envelope sent is the one the state took.
      list = readListEnvelope(layout.revocationsFile);
      state = profileTrustState(layout);
      if (state?.revocations && (!list || bodyDigest(list) !== state.revocations.digest))
        throw new Error(`${layout.revocationsFile}: changed while it was read; sent at the next sync`);
    } catch (err) {
      const problem = (err as Error).message.slice(0, 300);
      this.sayOnce(`${profile}: its trust does not verify here, no timestamp sent: ${problem}`);
      return unverifiedNews(layout, held, problem);
    }
    if (!state) return undefined;
    const root = 'content' in state.root ? state.root : undefined;
    const rootVersion = root?.content.version ?? 0;
    const listVersion = state.revocations?.content.version ?? 0;
    const news: ProfileTrustNews = {};
    if (rootVersion > held.root) {
      const roots = this.rootsAbove(layout.rootFile, held.root, rootVersion, root!);
      if (roots) news.roots = roots;
    }
    if (listVersion > held.revocations && list) news.revocations = list;
    const timestamp = root && this.timestamp(deviceId, profile, root, listVersion, view);
    if (timestamp) news.timestamp = timestamp;
    return Object.keys(news).length ? news : undefined;
  }

  /** The roots above `from` up to `newest` (at most MAX_ROOT_STEPS), read from the files the state walked. */
  private rootsAbove(
    fileOf: (version: number) => string,
    from: number,
    newest: number,
    root: TrustRoot,
  ): Envelope[] | undefined {
    const last = Math.min(newest, from + MAX_ROOT_STEPS);
    const out: Envelope[] = [];
    try {
      for (let v = from + 1; v <= last; v++)
        out.push(v === newest ? root.envelope : (readDocument(fileOf(v), 'json') as Envelope));
    } catch (err) {
      this.sayOnce(`trust roots not sent: ${(err as Error).message.slice(0, 300)}`);
      return undefined;
    }
    return out;
  }

  /** This device's timestamp for the profile: signed again when what it says changed or it is due; else the same. */
  private timestamp(
    deviceId: string,
    profile: string,
    root: TrustRoot,
    listVersion: number,
    view: TwinView,
  ): Envelope | undefined {
    const keys = this.opts.timestampKeys ?? [];
    const role = root.timestamp;
    if (keys.length === 0 || !role) return undefined;
    const signers = keys.filter((k) => role.keys.has(k.kid));
    if (signers.length < role.threshold) {
      this.sayOnce(
        `${profile}: trust root v${root.content.version} names a timestamp role of ${role.threshold} of ${role.pins.length} keys, and this gateway holds ${signers.length} of them: its agents get no timestamp and go stale (give --timestamp-key)`,
      );
      return undefined;
    }
    const entry = Object.hasOwn(view.desired, profile) ? view.desired[profile] : undefined;
    const digest = entry?.steps.envelope ? bodyDigest(entry.steps.envelope) : undefined;
    const desired: TimestampContent['desired'] = entry && digest ? { revision: entry.revision, digest } : null;
    const key = `${root.content.version}:${listVersion}:${desired ? `${desired.revision}:${desired.digest}` : '-'}`;
    const slot = `${deviceId}\0${profile}`;
    const now = this.now();
    const kept = this.stamps.get(slot);
    if (kept && kept.key === key && now - kept.issuedAt < Math.min(this.expiryMs / REUSE_SHARE, MAX_REUSE_MS))
      return kept.envelope;
    const content = timestampContent({
      device: deviceId,
      profile,
      root: root.content.version,
      revocations: listVersion,
      desired,
      now,
      expiryMs: this.expiryMs,
    });
    const envelope = signDocument(content, signers);
    this.stamps.delete(slot);
    this.stamps.set(slot, { key, envelope, issuedAt: now });
    if (this.stamps.size > MAX_CACHED_TIMESTAMPS) this.stamps.delete(this.stamps.keys().next().value!);
    return envelope;
  }

  private profileScopes(): ProfileScope[] {
    const now = this.now();
    if (now - this.scopes.at > SCOPES_TTL_MS) this.scopes = { at: now, list: profilesUnder(this.opts.profilesRoot) };
    return this.scopes.list;
  }

  private sayOnce(line: string): void {
    if (this.said.has(line)) return;
    if (this.said.size > 1_000) this.said.clear();
    this.said.add(line);
    this.opts.log(line);
  }
}

/**
 * What a copy that does not verify holds, sent as it is with the gateway's problem: the agent verifies it itself and
 * names what is wrong (a root below threshold, a gap, a rolled-back list), and applies nothing new of the profile
 * meanwhile, as a worker refuses the profile. A file that cannot even be read is left out (the problem names it).
 */
function unverifiedNews(layout: ProfileDir, held: HeldVersions, problem: string): ProfileTrustNews {
  const news: ProfileTrustNews = { problem };
  const read = (path: string) => {
    try {
      return readDocument(path, 'json') as Envelope;
    } catch {
      return undefined;
    }
  };
  let names: string[] = [];
  try {
    names = existsSync(layout.rootDir) ? readdirSync(layout.rootDir) : [];
  } catch {
    /* unreadable: the problem says so */
  }
  const versions = names
    .map((n) => /^([1-9][0-9]{0,6})\.json$/.exec(n))
    .filter((m) => m !== null)
    .map((m) => Number(m[1]))
    .filter((v) => v > held.root)
    .sort((a, b) => a - b)
    .slice(0, MAX_ROOT_STEPS);
  const roots = versions.map((v) => read(layout.rootFile(v))).filter((e) => e !== undefined);
  if (roots.length) news.roots = roots;
  const list = existsSync(layout.revocationsFile) ? read(layout.revocationsFile) : undefined;
  if (list) news.revocations = list;
  return news;
}

function readListEnvelope(path: string): Envelope | undefined {
  return existsSync(path) ? (readDocument(path, 'json') as Envelope) : undefined;
}
