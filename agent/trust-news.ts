import { WavegateError } from '../core/errors';
import {
  freshnessFor,
  freshnessProblem,
  heldVersionsOf,
  MAX_HELD_PROFILES,
  refusalText,
  type HeldVersions,
  type NewsRefusal,
} from '../core/held-trust';
import { PROFILE_NAME } from '../core/profile-name';
import type { DesiredEntry, TrustReport } from '../core/twin';
import { withHeldTrust, type AgentTrust } from './pins';
import { heldTrustStore, type HeldTrustStoreOptions } from './trust-store';

/**
 * What the agent does with the trust a sync answer carries (docs/formats.md, "Trust news"): it tells the gateway the
 * versions it holds, takes each profile's news (roots, revocation list, timestamp: verified here, kept in the state
 * directory: agent/trust-store.ts), verifies every envelope against the newest trust it holds (`trust`), reports per
 * profile what it holds and whether it is `stale`, and takes no desired entry of a profile that requires freshness
 * unless its newest timestamp is fresh and names that entry (`blocked`).
 */

/** How long a sync waits while a profile is stale: a fresh timestamp comes only with an answer. */
export const STALE_WAIT_MS = 10_000;
/** The shortest a sync waits: a timestamp about to expire is not renewed by a storm of syncs. */
export const MIN_FRESH_WAIT_MS = 1_000;

export interface AgentTrustNews {
  /** The agent's pins with what it learned applied (agent/pins.ts withHeldTrust). */
  trust: AgentTrust;
  /** The versions held per profile it has pins for: the sync's `held`. */
  held(): Record<string, HeldVersions>;
  /** Take a sync answer's `trust` (per profile); refusals are logged and reported. */
  take(news: unknown, now: number): void;
  /**
   * The first trust news of `profile` the last answer carried that was refused: its desired entries are refused with
   * it (a view that does not verify applies nothing new, as a worker refuses such a profile), each with its receipt.
   */
  newsRefusal(profile: string): NewsRefusal | undefined;
  /** Say (log) each profile that went stale or fresh again since the last call. */
  watch(now: number): void;
  /** Per profile: what is held, `stale` and the last refusal (the report's `trust`). */
  report(now: number): Record<string, TrustReport>;
  /**
   * Whether `entry` waits, not taken now: its profile is stale, or its newest timestamp does not name it. Said once
   * per request and reason.
   */
  waits(entry: DesiredEntry, now: number): boolean;
  /** How long the next sync may wait: within half the time left on the freshest-needed timestamp. */
  waitMs(base: number, now: number): number;
}

export function agentTrustNews(
  base: AgentTrust,
  opts: HeldTrustStoreOptions & { log: (line: string) => void },
): AgentTrustNews {
  const store = heldTrustStore(opts);
  const trust = withHeldTrust(base, store);
  /** The last refusal per profile, until news for it is taken without one. */
  const refused = new Map<string, string>();
  /** The refusals of the last answer's news, per profile. */
  let refusedNow = new Map<string, NewsRefusal>();
  let staleBefore = new Set<string>();
  /** What was said of each entry that waits, so it is said once per request and reason. */
  const waiting = new Map<string, string>();
  const profiles = () => trust.profiles?.() ?? [];
  const anchorOf = (profile: string) => {
    try {
      return trust.anchorOf?.(profile);
    } catch (err) {
      // A pins file that became unsafe: nothing is walked from it (its applies are refused UNSAFE_TRUST).
      if (err instanceof WavegateError) return undefined;
      throw err;
    }
  };

  const takeOne = (profile: string, news: unknown, now: number) => {
    const anchor = anchorOf(profile);
    if (!anchor) return; // no pins for it here: nothing to walk from
    const before = heldVersionsOf(store.get(profile));
    const refusals = store.take(profile, news, anchor, now);
    const after = heldVersionsOf(store.get(profile));
    if (after.root !== before.root) opts.log(`${profile}: trust root v${after.root} taken (held v${before.root})`);
    if (after.revocations !== before.revocations)
      opts.log(`${profile}: revocation list v${after.revocations} taken (held v${before.revocations})`);
    if (refusals.length === 0) {
      refused.delete(profile);
      return;
    }
    refusedNow.set(profile, refusals[0]!);
    const text = refusals.map(refusalText).join('; ');
    refused.set(profile, text.length > 400 ? `${text.slice(0, 397)}...` : text);
    for (const r of refusals) opts.log(`${profile}: trust news refused: ${refusalText(r)}`);
  };

  return {
    trust,
    held: () => Object.fromEntries(profiles().map((p) => [p, heldVersionsOf(store.get(p))])),
    newsRefusal: (profile) => refusedNow.get(profile),
    take(news, now) {
      refusedNow = new Map();
      if (news === undefined || news === null) return;
      if (typeof news !== 'object' || Array.isArray(news)) return opts.log('trust news refused: not an object');
      const entries = Object.entries(news as Record<string, unknown>);
      if (entries.length > MAX_HELD_PROFILES)
        return opts.log(`trust news refused: ${entries.length} profiles, at most ${MAX_HELD_PROFILES}`);
      for (const [profile, item] of entries) {
        if (!PROFILE_NAME.test(profile)) {
          opts.log(`trust news refused: ${JSON.stringify(profile.slice(0, 64))} is not a profile name`);
          continue;
        }
        takeOne(profile, item, now);
      }
    },
    watch(now) {
      const stale = new Set(profiles().filter((p) => staleWhy(p, now) !== undefined));
      for (const p of stale)
        if (!staleBefore.has(p))
          opts.log(`${p}: stale: ${staleWhy(p, now)}; nothing new is applied until a fresh timestamp comes`);
      for (const p of staleBefore) if (!stale.has(p)) opts.log(`${p}: fresh again`);
      staleBefore = stale;
    },
    report(now) {
      const out: Record<string, TrustReport> = {};
      for (const profile of profiles()) {
        const why = staleWhy(profile, now);
        const last = refused.get(profile);
        out[profile] = {
          ...heldVersionsOf(store.get(profile)),
          ...(why ? { stale: why } : {}),
          ...(last ? { refused: last } : {}),
        };
      }
      return out;
    },
    waits(entry, now) {
      const problem = freshnessProblem(
        store.get(entry.profile),
        { revision: entry.revision, envelope: entry.steps.envelope },
        now,
      );
      if (!problem) {
        waiting.delete(entry.requestId);
        return false;
      }
      if (waiting.get(entry.requestId) !== problem)
        opts.log(`${entry.profile}: r${entry.revision} (request ${entry.requestId}) not taken: ${problem}`);
      if (waiting.size >= 256) waiting.clear();
      waiting.set(entry.requestId, problem);
      return true;
    },
    waitMs(base, now) {
      let wait = base;
      for (const profile of profiles()) {
        const freshness = freshnessFor(store.get(profile), now);
        if (!freshness.required) continue;
        const left = freshness.fresh ? (Date.parse(freshness.until) - now) / 2 : STALE_WAIT_MS;
        wait = Math.min(wait, Math.max(MIN_FRESH_WAIT_MS, left));
      }
      return Math.round(wait);
    },
  };

  function staleWhy(profile: string, now: number): string | undefined {
    const freshness = freshnessFor(store.get(profile), now);
    return freshness.required && !freshness.fresh ? freshness.why : undefined;
  }
}
