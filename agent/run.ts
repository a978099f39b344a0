import { setTimeout as sleep } from 'node:timers/promises';
import type { KeyPair } from '../core/signing';
import {
  FINAL_REPORT_STATES,
  TWIN_LIMITS,
  type AgentReport,
  type DesiredEntry,
  type HealthReport,
  type TwinView,
} from '../core/twin';
import { localDeviceSession } from '../device/transport/local';
import { applyEntry, isDrift, reverifyEntry, TransportError } from './apply-entry';
import type { GatewayClient } from './gateway-client';
import { runDeviceHealth } from './health';
import type { AgentTrust } from './pins';
import type { IdentityRotation } from './identity-rotation';
import { agentReceipts } from './receipts';
import { reportFile } from './report-file';
import { agentTrustNews, type AgentTrustNews } from './trust-news';

/**
 * `wavegate agent`: sync with the device's twin through the gateway (long-poll), take every desired
 * entry it has not answered for good (agent/apply-entry.ts), re-verify when asked, run the signed
 * health (runtimes, checks, error-rate command: agent/health.ts), and report. Gateway errors back off (1 s doubling to 30 s, with jitter);
 * `stop()` (SIGTERM) ends the loop: a sync in flight is cut, an apply in flight is left running on the
 * device under its lock (the next start reattaches to it), and nothing is reported for it.
 */
export interface AgentOptions {
  deviceId: string;
  gateway: GatewayClient;
  trust: AgentTrust;
  stateDir: string;
  /** The device home: markers, floors and apply locks live under `<home>/.wavegate/`. */
  home: string;
  version: string;
  /** The device's identity key: it signs the requests to the gateway and the receipt of every final answer. */
  key: KeyPair;
  commandTimeoutMs?: number;
  /** How long one sync may wait for news (default 25 s, at most 30 s). */
  waitMs?: number;
  log?: (line: string) => void;
  /** Its identity key's rotation (agent/identity-rotation.ts: it changes `key` in place); absent: none taken. */
  rotation?: IdentityRotation;
}

/**
 * One sync carrying the trust versions held; the trust news in its answer is taken before its view is handled, so a
 * root, a revocation or a timestamp it brings counts for the desired entries it brings. A sync waits within half the
 * time left on a timestamp the agent needs (agent/trust-news.ts waitMs).
 */
async function syncWithTrust(
  gateway: GatewayClient,
  learned: AgentTrustNews,
  sync: { report: AgentReport; knownVersion: number; waitMs: number },
  signal: AbortSignal,
  rotation?: IdentityRotation,
): Promise<TwinView> {
  const proof = rotation?.proof(Date.now());
  const answer = await gateway.sync(
    {
      ...sync,
      // A sync carrying a proof does not wait: its answer says whether to sign with the new key.
      waitMs: proof ? 0 : learned.waitMs(sync.waitMs, Date.now()),
      held: learned.held(),
      ...(proof ? { rotationProof: proof } : {}),
    },
    signal,
  );
  learned.take(answer.trust, Date.now());
  learned.watch(Date.now());
  rotation?.take(answer.rotation, Date.now());
  const { trust: _news, rotation: _rotation, ...view } = answer;
  return view;
}

export function startAgent(opts: AgentOptions): { done: Promise<void>; stop: () => void } {
  const log = opts.log ?? (() => {});
  const stopper = new AbortController();
  const answers = reportFile(opts.stateDir);
  // Read at start, and refused then (a corrupt or rolled-back receipts.json): never a counter given twice.
  const receipts = agentReceipts({
    stateDir: opts.stateDir,
    deviceId: opts.deviceId,
    key: opts.key,
    sent: Object.values(answers.profiles),
    log,
  });
  // Read at start too, and refused then (a corrupt or rolled-back trust file): never a revocation forgotten.
  const learned = agentTrustNews(opts.trust, {
    stateDir: opts.stateDir,
    deviceId: opts.deviceId,
    marks: answers.trust,
    onHeld: (profile, versions) => answers.setTrust(profile, versions),
    log,
  });
  const connect = async () => localDeviceSession(opts.deviceId, opts.home);
  let health: HealthReport[] = [];
  let healthAt: string | null = null;
  let lastReverify = -1;

  /** Profiles the twin last desired: the report answers those (bounded as the twin bounds them). */
  let desiredProfiles: Set<string> | null = null;
  const report = (): AgentReport => {
    const entries = Object.entries(answers.profiles).filter(([p]) => !desiredProfiles || desiredProfiles.has(p));
    const held = learned.report(Date.now());
    return {
      profiles: Object.fromEntries(entries.slice(0, TWIN_LIMITS.profiles)),
      ...(Object.keys(held).length ? { trust: held } : {}),
      health,
      healthAt,
      agentVersion: opts.version,
    };
  };
  const ctx = {
    deviceId: opts.deviceId,
    stateDir: opts.stateDir,
    trust: learned.trust,
    connect,
    download: (profile: string, revision: number, name: string) =>
      opts.gateway.payload(profile, revision, name, stopper.signal),
    commandTimeoutMs: opts.commandTimeoutMs ?? 30 * 60_000,
    newsRefusal: learned.newsRefusal,
    signal: stopper.signal,
    log,
  };

  /** Keep lastSeenAt fresh while a long apply runs (no sync happens meanwhile). */
  const whileBusy = async <T>(body: () => Promise<T>): Promise<T> => {
    const beat = setInterval(() => void opts.gateway.report(report(), stopper.signal).catch(() => {}), 20_000);
    try {
      return await body();
    } finally {
      clearInterval(beat);
    }
  };

  const take = async (entry: DesiredEntry): Promise<void> => {
    log(`${entry.profile}: desired r${entry.revision} (request ${entry.requestId}); checking and applying`);
    answers.set(entry.profile, {
      revision: answers.profiles[entry.profile]?.revision ?? null,
      state: 'applying',
      requestId: entry.requestId,
      at: new Date().toISOString(),
    });
    await opts.gateway.report(report(), stopper.signal).catch(() => {});
    // Signed, and the receipt chain's state on disk, before the answer is kept (report.json) and sent with it.
    const answer = receipts.sign(entry, await whileBusy(() => applyEntry(ctx, entry)));
    answers.set(entry.profile, answer);
    log(
      `${entry.profile}: r${entry.revision} ${answer.state}${answer.reason ? ` (${answer.reason})` : ''}${answer.detail && answer.state !== 'applied' ? `: ${answer.detail}` : ''}${answer.receipt ? ` [receipt ${receipts.state.counter}]` : ''}`,
    );
  };

  const handle = async (view: TwinView): Promise<void> => {
    desiredProfiles = new Set(Object.keys(view.desired));
    for (const entry of Object.values(view.desired)) {
      if (stopper.signal.aborted) return;
      const answer = answers.profiles[entry.profile];
      if (answer?.requestId === entry.requestId && FINAL_REPORT_STATES.includes(answer.state)) continue;
      // A view that may be frozen takes nothing new (trust news refused in this answer refuses it: applyEntry).
      if (!learned.newsRefusal(entry.profile) && learned.waits(entry, Date.now())) continue;
      await take(entry);
    }
    if (view.reverify && view.version > lastReverify) {
      lastReverify = view.version;
      for (const entry of Object.values(view.desired)) {
        const answer = answers.profiles[entry.profile];
        // What the device answered as in place, and what an earlier re-verify found drifted (so a
        // restored fact reads in place again); a refusal or a failed apply stays as it was reported.
        if (
          !answer ||
          answer.requestId !== entry.requestId ||
          !(['applied', 'already-applied', 'claimed'].includes(answer.state) || isDrift(answer)) ||
          stopper.signal.aborted
        )
          continue;
        const again = await reverifyEntry(ctx, entry, answer);
        answers.set(entry.profile, again);
        log(
          `${entry.profile}: re-verified r${entry.revision}: ${again.state}${again.reason ? ` (${again.reason})` : ''}`,
        );
      }
    }
    const session = await connect();
    try {
      health = await runDeviceHealth(session, view.desired, answers.profiles, learned.trust, Date.now());
      healthAt = new Date().toISOString();
    } finally {
      session.close();
    }
  };

  const loop = async () => {
    let knownVersion = 0;
    let backoff = 1_000;
    log(`agent ${opts.deviceId}: syncing with the gateway; device home ${opts.home}; pins ${opts.trust.describe()}`);
    while (!stopper.signal.aborted) {
      let view: TwinView;
      learned.watch(Date.now());
      try {
        const sync = { report: report(), knownVersion, waitMs: opts.waitMs ?? 25_000 };
        view = await syncWithTrust(opts.gateway, learned, sync, stopper.signal, opts.rotation);
        backoff = 1_000;
      } catch (err) {
        if (stopper.signal.aborted) break;
        log(`sync failed: ${(err as Error).message.slice(0, 300)}; retrying in ${Math.round(backoff / 1000)} s`);
        await sleep(backoff * (0.5 + Math.random() / 2), undefined, { signal: stopper.signal }).catch(() => {});
        backoff = Math.min(backoff * 2, 30_000);
        continue;
      }
      knownVersion = view.version;
      try {
        await handle(view);
      } catch (err) {
        if (stopper.signal.aborted && err instanceof TransportError) break;
        log(`error: ${(err as Error).message.slice(0, 300)}`);
        await sleep(backoff, undefined, { signal: stopper.signal }).catch(() => {});
        backoff = Math.min(backoff * 2, 30_000);
      }
    }
    log(`agent ${opts.deviceId}: stopped`);
  };

  return { done: loop(), stop: () => stopper.abort() };
}
