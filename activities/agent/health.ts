import type { Client } from '@temporalio/client';
import { ageMs, describeAge, REPORT_FRESH_MS, type TwinView } from '../../core/twin';
import { readTwin } from './twin-client';

/**
 * Health-gate answers for `transport: agent` devices, read from their agents' latest reports on the
 * twin (the agent runs the signed profile's runtime checks locally and reports them on every sync).
 * A report older than REPORT_FRESH_MS, or none, is unread (the gate is inconclusive), never a pass.
 */
export type AgentHealthAnswer<T> = { ok: true; value: T } | { ok: false; reason: string };

/** The twin of each agent device (null: none), read with the client the health activity has. */
export async function twinOf(client: Client | undefined, deviceId: string): Promise<TwinView | null> {
  if (!client) throw new Error('no Temporal client to read the device twin with');
  return readTwin(client, deviceId);
}

/** devices-online for an agent device: its agent synced within the freshness bound. */
export function agentOnline(view: TwinView | null, nowMs: number, freshMs = REPORT_FRESH_MS): AgentHealthAnswer<null> {
  if (!view?.lastSeenAt) return { ok: false, reason: 'agent never synced' };
  if (ageMs(view.lastSeenAt, nowMs) > freshMs) return { ok: false, reason: `agent report stale: last seen ${describeAge(view.lastSeenAt, nowMs)}` };
  return { ok: true, value: null };
}

/**
 * The named checks' results from the agent's report: the names that failed (empty: healthy). Unread
 * when the report is stale, the device does not report `revision` of `profile` yet, or a check is missing.
 */
export function agentChecks(view: TwinView | null, names: readonly string[], profile: string | undefined, revision: number | undefined, nowMs: number, freshMs = REPORT_FRESH_MS): AgentHealthAnswer<string[]> {
  const report = view?.report;
  if (!report?.healthAt) return { ok: false, reason: 'agent reported no health yet' };
  if (ageMs(report.healthAt, nowMs) > freshMs) return { ok: false, reason: `agent health report stale: taken ${describeAge(report.healthAt, nowMs)}` };
  if (profile !== undefined && revision !== undefined) {
    const on = Object.hasOwn(report.profiles, profile) ? report.profiles[profile]!.revision : null;
    if (on !== revision) return { ok: false, reason: `agent reports ${profile} r${on ?? 'none'}, not r${revision}: its health is not about this revision` };
  }
  const failed: string[] = [];
  for (const name of names) {
    const check = report.health.find((c) => c.name === name);
    if (!check) return { ok: false, reason: `agent reported no check "${name}"` };
    if (!check.ok) failed.push(`${name} failed${check.detail ? `: ${check.detail.slice(0, 200)}` : ''}`);
  }
  return { ok: true, value: failed };
}
