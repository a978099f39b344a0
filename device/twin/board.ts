import type { Client } from '@temporalio/client';
import { parseAgentKey } from '../../core/agent-auth';
import { parseReceipt, receiptSignatureValid } from '../../core/receipt';
import { describeAge, type ProfileReport, type TwinView } from '../../core/twin';
import { readTwin } from '../../clients/twin';

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
  /** The agent's receipt of this revision verifies under its enrolled key (the inventory's agentKey). */
  proof?: 'proven';
}

/**
 * Is the report's receipt the agent's own word that this revision is in place: readable, by its enrolled identity
 * key (`ed25519:…` pin), about this device, profile and revision, and an answer that put or found it there?
 */
export function reportProven(
  report: Pick<ProfileReport, 'receipt'>,
  expect: { device: string; profile: string; revision: number; agentKey?: string },
): boolean {
  const key = expect.agentKey ? parseAgentKey(expect.agentKey) : undefined;
  if (!key || typeof report.receipt !== 'string') return false;
  const parsed = parseReceipt(report.receipt);
  if (!parsed.ok) return false;
  const f = parsed.receipt.fields;
  return (
    f.keyKind === 'agent' &&
    f.device === expect.device &&
    f.profile === expect.profile &&
    f.revision === expect.revision &&
    (f.result === 'applied' || f.result === 'already-applied' || f.result === 'claimed') &&
    receiptSignatureValid(parsed.receipt, key)
  );
}

/**
 * What the agent last reported of the profile's trust when it is news for a person: `stale` (its newest timestamp
 * expired, or none came: a frozen view, so it applies nothing new), and the last trust news it refused.
 */
export function agentTrustNote(view: Pick<TwinView, 'report'> | null, profile: string): string | undefined {
  const trust = view?.report?.trust;
  const held = trust && Object.hasOwn(trust, profile) ? trust[profile] : undefined;
  if (!held) return undefined;
  const notes = [
    ...(held.stale ? [`stale: ${held.stale} (applies nothing new until a fresh timestamp comes)`] : []),
    ...(held.refused ? [`trust news refused: ${held.refused}`] : []),
  ];
  return notes.length ? notes.join('; ') : undefined;
}

export function agentBoardAnswer(
  view: TwinView | null,
  profile: string,
  revision: number,
  provable: boolean,
  nowMs: number,
  agentKey?: string,
): AgentBoardAnswer {
  const answer = boardAnswerOf(view, profile, revision, provable, nowMs, agentKey);
  const note = agentTrustNote(view, profile);
  return note ? { ...answer, reason: `${answer.reason}; ${note}` } : answer;
}

function boardAnswerOf(
  view: TwinView | null,
  profile: string,
  revision: number,
  provable: boolean,
  nowMs: number,
  agentKey?: string,
): AgentBoardAnswer {
  if (!view) return { state: 'pending', marker: null, reason: 'never reported: agent never synced (no twin)' };
  const seen = `last seen ${describeAge(view.lastSeenAt, nowMs)}`;
  const report = reportOf(view, profile);
  const marker = report?.revision ?? null;
  if (report && report.revision === revision && VERIFIED.has(report.state)) {
    const verified = `verified by its agent ${describeAge(report.at, nowMs)}, ${seen}`;
    const proof = reportProven(report, { device: view.deviceId, profile, revision, agentKey })
      ? { proof: 'proven' as const }
      : {};
    if (!provable || report.state === 'claimed')
      return {
        state: 'claimed',
        marker,
        reason: `${verified}; verify cannot prove the revision (non-provable)`,
        ...proof,
      };
    return { state: 'applied', marker, reason: verified, ...proof };
  }
  const desired = Object.hasOwn(view.desired, profile) ? view.desired[profile] : undefined;
  if (desired?.revision === revision)
    return {
      state: 'pending',
      marker,
      reason: `converging, ${seen}${report ? ` (agent reports r${report.revision ?? 'none'}, ${report.state}${report.reason ? ` ${report.reason}` : ''})` : ''}`,
    };
  if (!report) return { state: 'pending', marker, reason: `never reported ${profile}: ${seen}` };
  return {
    state: 'pending',
    marker,
    reason: `agent reports r${report.revision ?? 'none'} (${report.state}${report.reason ? ` ${report.reason}` : ''}), ${seen}`,
  };
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
  if (report.state === 'failed' && report.reason === 'VERIFY')
    return {
      marker: report.revision,
      status: 'drifted',
      detail: `${report.detail ?? 'agent re-verify failed'} (${seen})`,
    };
  return { marker: report.revision, status: 'ok', detail: `${report.state}, ${seen}` };
}
