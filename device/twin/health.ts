import type { Client } from '@temporalio/client';
import {
  ageMs,
  type AgentReport,
  describeAge,
  errorRateReportName,
  REPORT_FRESH_MS,
  type TwinView,
} from '../../core/twin';
import { readTwin } from '../../clients/twin';

/**
 * Health-gate answers for `transport: agent` devices, read from their agents' latest reports on the
 * twin (the agent runs the signed revision's runtimes, checks and error-rate command locally and reports
 * them on every sync).
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
  if (ageMs(view.lastSeenAt, nowMs) > freshMs)
    return { ok: false, reason: `agent report stale: last seen ${describeAge(view.lastSeenAt, nowMs)}` };
  return { ok: true, value: null };
}

/** Why a report taken at `at` is not read now (null: fresh): names its age and the bound it broke. */
function staleness(at: string | null | undefined, nowMs: number, freshMs: number): string | null {
  if (!at) return 'no report from its agent yet';
  if (ageMs(at, nowMs) > freshMs)
    return `no fresh report from its agent: last ${describeAge(at, nowMs)}, reports count for ${Math.round(freshMs / 1000)} s`;
  return null;
}

/** Why the report is not about `revision` of `profile` (null: it is, or nothing to compare). */
function notAbout(report: AgentReport, profile: string | undefined, revision: number | undefined): string | null {
  if (profile === undefined || revision === undefined) return null;
  const on = Object.hasOwn(report.profiles, profile) ? report.profiles[profile]!.revision : null;
  return on === revision
    ? null
    : `agent reports ${profile} r${on ?? 'none'}, not r${revision}: its health is not about this revision`;
}

/**
 * The named checks' results from the agent's report: the names that failed (empty: healthy). A name
 * is looked up among the signed runtimes and checks the agent ran (never an error-rate entry). Unread
 * when the report is stale, the device does not report `revision` of `profile` yet, or a check is missing.
 */
export function agentChecks(
  view: TwinView | null,
  names: readonly string[],
  profile: string | undefined,
  revision: number | undefined,
  nowMs: number,
  freshMs = REPORT_FRESH_MS,
): AgentHealthAnswer<string[]> {
  const report = view?.report;
  const stale = staleness(report?.healthAt, nowMs, freshMs);
  if (!report || stale) return { ok: false, reason: stale ?? 'no report from its agent yet' };
  const other = notAbout(report, profile, revision);
  if (other) return { ok: false, reason: other };
  const failed: string[] = [];
  for (const name of names) {
    // A report of an older agent has no kind: its entries are runtimes.
    const check = report.health.find((c) => c.name === name && c.kind !== 'error-rate');
    if (!check) return { ok: false, reason: `agent reported no check "${name}"` };
    if (!check.ok) failed.push(`${name} failed${check.detail ? `: ${check.detail.slice(0, 200)}` : ''}`);
  }
  return { ok: true, value: failed };
}

/**
 * The error rate the agent read with the signed `health.errorRate.command` of `profile`'s revision
 * (agent/health.ts reports it as kind 'error-rate', named errorRateReportName(profile)). Without a
 * profile, the highest of the rates reported (a gate judges the worst). Unread when the report is
 * stale, not about `revision`, has no rate, or the command gave no number.
 */
export function agentErrorRate(
  view: TwinView | null,
  profile: string | undefined,
  revision: number | undefined,
  nowMs: number,
  freshMs = REPORT_FRESH_MS,
): AgentHealthAnswer<number> {
  const report = view?.report;
  const stale = staleness(report?.healthAt, nowMs, freshMs);
  if (!report || stale) return { ok: false, reason: stale ?? 'no report from its agent yet' };
  const other = notAbout(report, profile, revision);
  if (other) return { ok: false, reason: other };
  const rates = report.health.filter(
    (c) => c.kind === 'error-rate' && (profile === undefined || c.name === errorRateReportName(profile)),
  );
  if (rates.length === 0)
    return {
      ok: false,
      reason: `agent reported no error rate${profile === undefined ? '' : ` for ${profile}`}: its verified revision signs no health.errorRate.command`,
    };
  const unread = rates.find((c) => !c.ok || c.value === undefined);
  if (unread)
    return {
      ok: false,
      reason: `error-rate command on the device gave no number: ${unread.detail?.slice(0, 200) ?? 'no detail'}`,
    };
  return { ok: true, value: Math.max(...rates.map((c) => c.value!)) };
}
