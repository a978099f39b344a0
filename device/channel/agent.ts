import { activityWarning } from './activity-log';
import type { Client } from '@temporalio/client';
import { ageMs, describeAge, isOffline, REPORT_FRESH_MS, type TwinView } from '../../core/twin';
import { applyThroughTwin } from '../twin/apply';
import { agentBoardAnswer, agentDriftAnswer, twinReader, type TwinReader } from '../twin/board';
import { agentChecks, agentErrorRate, agentOnline, type AgentHealthAnswer } from '../twin/health';
import { agentSnapshot } from '../twin/snapshot';
import { reverifyTwin } from '../../clients/twin';
import { baseTarget } from './target';
import type { ChannelDeps, DeviceChannel, Reading } from './types';

/**
 * The agent channel (`transport: agent`, docs/architecture.md "The pull transport"): the device is never
 * dialled. Writes go to its twin `device:<id>` (the desired revision, a re-verify request) and its agent
 * carries them out on its next sync; reads are its agent's latest report there, with its age. A report
 * older than REPORT_FRESH_MS answers no health question: the gate says so and names that bound.
 */

/** What the board and drift say of an agent device when nothing can read twins (the CLI had no client). */
export const NO_TWIN_READER = 'agent device: read from its twin, and no Temporal client was given to read it';

const NO_CLIENT = 'no Temporal client to read the device twin with';

/** The freshness bound as evidence states it. */
const BOUND = `reports count for ${Math.round(REPORT_FRESH_MS / 1000)} s`;

export function agentChannel(deps: ChannelDeps): DeviceChannel {
  const now = deps.now ?? Date.now;
  const client = (): Client => {
    const c = deps.client?.();
    if (!c) throw new Error(NO_CLIENT);
    return c;
  };
  const reader = (): TwinReader | undefined => {
    if (deps.twins) return deps.twins;
    const c = deps.client?.();
    return c ? twinReader(c) : undefined;
  };
  const view = (id: string): Promise<TwinView | null> => {
    const read = reader();
    return read ? read(id) : Promise.reject(new Error(NO_CLIENT));
  };
  /** A health answer from the report: unread for its age (`no-report`, the bound named) or for what it says (`unanswered`). */
  const fromReport = <T>(answer: AgentHealthAnswer<T>, at: string | null | undefined): Reading<T> => {
    if (answer.ok) return answer;
    const fresh = at !== null && at !== undefined && ageMs(at, now()) <= REPORT_FRESH_MS;
    return { ok: false, kind: fresh ? 'unanswered' : 'no-report', reason: answer.reason };
  };

  return {
    name: 'agent',
    hasTwin: true,

    // Never dialled: the target carries no ssh settings, so no SSH path can dial it by mistake. Its identity key
    // pin checks its agent's receipts.
    target: (device) => ({ ...baseTarget(device), ...(device.agentKey ? { agentKey: device.agentKey } : {}) }),

    apply(target, steps, ctx) {
      return applyThroughTwin(target, steps, {
        client: client(),
        taskQueue: ctx.taskQueue,
        holder: ctx.holder,
        rollout: ctx.rollout,
        reportOffline: ctx.reportOffline,
        ...(ctx.aheadAbove !== undefined ? { aheadAbove: ctx.aheadAbove } : {}),
        ...(ctx.phase !== undefined ? { phase: ctx.phase } : {}),
        heartbeat: ctx.heartbeat,
        signal: ctx.signal,
        log: activityWarning,
      });
    },

    // Marker and reachability from the agent's last report (offline past TWIN_OFFLINE_AFTER_MS); nothing is read on the device.
    probe: (device, profile) => agentSnapshot(client(), device, profile, now()),

    async online(target) {
      const twin = await view(target.id);
      if (agentOnline(twin, now()).ok) return { ok: true, value: null };
      const last = twin?.lastSeenAt ? `last seen ${describeAge(twin.lastSeenAt, now())}` : 'never synced';
      return { ok: false, kind: 'no-report', reason: `no fresh report from its agent: ${last}, ${BOUND}` };
    },

    async runChecks(target, checks, about) {
      const twin = await view(target.id);
      const names = checks.map((c) => c.name);
      return fromReport(agentChecks(twin, names, about.profile, about.revision, now()), twin?.report?.healthAt);
    },

    // The agent runs the same signed command (agent/health.ts) and reports its value.
    async errorRate(target, _command, about) {
      const twin = await view(target.id);
      return fromReport(agentErrorRate(twin, about.profile, about.revision, now()), twin?.report?.healthAt);
    },

    async boardRead(target, q) {
      const read = reader();
      if (!read) return { state: 'pending', reason: NO_TWIN_READER };
      return agentBoardAnswer(await read(target.id), q.profile, q.revision, q.provable, now(), target.agentKey);
    },

    async drift(target, q) {
      const read = reader();
      if (!read) return { marker: null, status: 'unreachable', detail: NO_TWIN_READER };
      return agentDriftAnswer(await read(target.id), q.profile, now());
    },

    async readMarker(target, profile) {
      const answer = agentDriftAnswer(await view(target.id).catch(() => null), profile, now());
      if (answer.status === 'unreachable') throw new Error(`${target.id}: ${answer.detail ?? 'agent unreachable'}`);
      return answer.marker;
    },

    // Only an agent that syncs can be asked: one that is silent would answer whenever it returns.
    async askReverify(target, q) {
      const twin = await view(target.id);
      if (!twin || isOffline(twin, (q.now ?? now)(), REPORT_FRESH_MS)) return 'offline';
      return (await reverifyTwin(client(), target.id)) ? 'asked' : 'offline';
    },

    // Answered: a fresh report cleared the twin's reverify flag.
    reverified: async (target) => (await view(target.id))?.reverify === false,
  };
}
