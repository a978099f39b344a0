import type { Client } from '@temporalio/client';
import { describeAge, isOffline, REPORT_FRESH_MS, type ProfileReport, type TwinView } from '../../core/twin';
import { mapLimit } from '../map-limit';
import { readTwin, reverifyTwin } from './twin-client';

/**
 * The fleet board, drift and the fleet revision for `transport: agent` devices: read from each agent's
 * latest report on its twin (never by dialling the device), with its age. Only a report of a verified
 * apply (or re-verify) at the revision counts as applied; a device whose desired state is the revision
 * but whose agent has not reported it is `pending`, "converging".
 */
export type TwinReader = (deviceId: string) => Promise<TwinView | null>;

export function twinReader(client: Client): TwinReader {
  return (id) => readTwin(client, id);
}

const VERIFIED: ReadonlySet<ProfileReport['state']> = new Set(['applied', 'already-applied', 'claimed']);

function reportOf(view: TwinView | null, profile: string): ProfileReport | undefined {
  const profiles = view?.report?.profiles;
  return profiles && Object.hasOwn(profiles, profile) ? profiles[profile] : undefined;
}

export interface AgentBoardAnswer {
  state: 'applied' | 'claimed' | 'pending';
  marker: number | null;
  reason: string;
}

export function agentBoardAnswer(view: TwinView | null, profile: string, revision: number, provable: boolean, nowMs: number): AgentBoardAnswer {
  if (!view) return { state: 'pending', marker: null, reason: 'never reported: agent never synced (no twin)' };
  const seen = `last seen ${describeAge(view.lastSeenAt, nowMs)}`;
  const report = reportOf(view, profile);
  const marker = report?.revision ?? null;
  if (report && report.revision === revision && VERIFIED.has(report.state)) {
    const verified = `verified by its agent ${describeAge(report.at, nowMs)}, ${seen}`;
    if (!provable || report.state === 'claimed') return { state: 'claimed', marker, reason: `${verified}; verify cannot prove the revision (non-provable)` };
    return { state: 'applied', marker, reason: verified };
  }
  const desired = Object.hasOwn(view.desired, profile) ? view.desired[profile] : undefined;
  if (desired?.revision === revision) return { state: 'pending', marker, reason: `converging, ${seen}${report ? ` (agent reports r${report.revision ?? 'none'}, ${report.state}${report.reason ? ` ${report.reason}` : ''})` : ''}` };
  if (!report) return { state: 'pending', marker, reason: `never reported ${profile}: ${seen}` };
  return { state: 'pending', marker, reason: `agent reports r${report.revision ?? 'none'} (${report.state}${report.reason ? ` ${report.reason}` : ''}), ${seen}` };
}

export interface AgentDriftAnswer {
  marker: number | null;
  status: 'ok' | 'drifted' | 'no-marker' | 'unreachable';
  detail?: string;
}

/** Drift from the agent's report: its re-verify failing at its marker's revision is drift. */
export function agentDriftAnswer(view: TwinView | null, profile: string, nowMs: number): AgentDriftAnswer {
  if (!view?.lastSeenAt) return { marker: null, status: 'unreachable', detail: 'agent never synced' };
  const report = reportOf(view, profile);
  const seen = `reported ${describeAge(report?.at ?? view.lastSeenAt, nowMs)}`;
  if (!report || report.revision === null) return { marker: null, status: 'no-marker', detail: seen };
  if (VERIFIED.has(report.state)) return { marker: report.revision, status: 'ok', detail: seen };
  if (report.state === 'failed' && report.reason === 'VERIFY') return { marker: report.revision, status: 'drifted', detail: `${report.detail ?? 'agent re-verify failed'} (${seen})` };
  return { marker: report.revision, status: 'ok', detail: `${report.state}, ${seen}` };
}

export interface ReverifyOutcome {
  asked: string[];
  answered: string[];
  /** Asked but no fresh report within the wait. */
  silent: string[];
  /** Not asked: no twin, or its agent is not syncing. */
  offline: string[];
}

/**
 * `fleet status --reverify`: ask every online agent device to re-verify now, and wait (at most
 * `waitMs`) until each asked twin has the answer (its reverify flag cleared by a fresh report).
 */
export async function reverifyAgents(client: Client, deviceIds: readonly string[], opts: { waitMs: number; concurrency?: number; now?: () => number; pollMs?: number }): Promise<ReverifyOutcome> {
  const now = opts.now ?? Date.now;
  const offline: string[] = [];
  const asked: string[] = [];
  await mapLimit(deviceIds, opts.concurrency ?? 16, async (id) => {
    const view = await readTwin(client, id);
    if (!view || isOffline(view, now(), REPORT_FRESH_MS)) return void offline.push(id);
    if (await reverifyTwin(client, id)) asked.push(id);
    else offline.push(id);
  });
  const deadline = now() + opts.waitMs;
  let waiting = [...asked];
  while (waiting.length && now() < deadline) {
    await new Promise((r) => setTimeout(r, opts.pollMs ?? 500));
    const views = await mapLimit(waiting, opts.concurrency ?? 16, async (id) => [id, await readTwin(client, id)] as const);
    waiting = views.filter(([, v]) => v?.reverify !== false).map(([id]) => id);
  }
  const silent = new Set(waiting);
  return { asked: asked.sort(), answered: asked.filter((id) => !silent.has(id)).sort(), silent: [...silent].sort(), offline: offline.sort() };
}
