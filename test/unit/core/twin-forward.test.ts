import { describe, expect, it } from 'vitest';
import {
  desireProblem,
  feedStamp,
  forwardDecision,
  HEALTH_DETAIL_FORWARD_MS,
  reportDigest,
  settledReport,
  withPresence,
  type AgentReport,
  type ProfileReport,
  type TwinView,
} from '../../../core/twin';
import { desiredRequest } from '../../support/twin-agent';

/** Which syncs the gateway writes to the twin (core/twin.ts forwardDecision) and how readers merge presence. */
const profile = (over: Partial<ProfileReport> = {}): ProfileReport => ({
  revision: 1,
  state: 'applied',
  requestId: 'r:1:1',
  at: '2026-12-05T00:00:00.000Z',
  ...over,
});
const report = (over: Partial<AgentReport> = {}): AgentReport => ({
  profiles: { demo: profile() },
  health: [{ name: 'motd', ok: true, kind: 'runtime', detail: 'ok in 3 ms' }],
  healthAt: '2026-12-05T00:00:00.000Z',
  agentVersion: '1.0',
  ...over,
});
const view = (over: Partial<TwinView> = {}): TwinView => ({
  deviceId: 'd1',
  version: 3,
  desired: {},
  report: report(),
  lastSeenAt: '2026-12-05T00:00:00.000Z',
  reverify: false,
  ...over,
});
const NOW = Date.parse('2026-12-05T01:00:00.000Z');
const decide = (v: TwinView, next: AgentReport | null, knownVersion = 3, forwardedAtMs = NOW - 1_000) =>
  forwardDecision({ view: v, sync: { report: next, knownVersion, waitMs: 25_000 }, forwardedAtMs, nowMs: NOW });

describe('forwardDecision: which syncs reach the twin', () => {
  it('the same report with only a newer health time is no news: seen', () => {
    expect(decide(view(), report({ healthAt: '2026-12-05T00:59:59.000Z' }))).toBe('seen');
    expect(decide(view(), null)).toBe('seen');
  });

  it("a device's first report starts its twin, even with no answer in it", () => {
    expect(decide(view({ version: 0, report: null }), report({ profiles: {} }), 0)).toBe('forward');
  });

  it('a first report, a new answer, a changed verdict or value, another agent version: forward', () => {
    expect(decide(view({ report: null }), report())).toBe('forward');
    expect(decide(view(), report({ profiles: { demo: profile({ revision: 2, requestId: 'r:1:2' }) } }))).toBe(
      'forward',
    );
    expect(decide(view(), report({ profiles: {} }))).toBe('forward');
    expect(decide(view(), report({ health: [{ name: 'motd', ok: false, kind: 'runtime' }] }))).toBe('forward');
    const rate = (value: number) =>
      report({ health: [{ name: 'error-rate:demo', ok: true, kind: 'error-rate', value }] });
    expect(decide(view({ report: rate(0.01) }), rate(0.5))).toBe('forward');
    expect(decide(view(), report({ agentVersion: '1.1' }))).toBe('forward');
  });

  it('a profile only starting to apply is no news; its final answer is', () => {
    const applying = report({ profiles: { demo: profile({ state: 'applying', requestId: 'r:1:2' }) } });
    expect(decide(view(), applying)).toBe('seen');
    // A profile the twin never heard of, only applying: still nothing to say.
    expect(decide(view({ report: report({ profiles: {} }) }), applying)).toBe('seen');
    expect(settledReport(report(), applying).profiles.demo).toEqual(profile());
    const done = report({ profiles: { demo: profile({ revision: 2, requestId: 'r:1:2', state: 'applied' }) } });
    expect(decide(view(), done)).toBe('forward');
  });

  it('a report answering a pending re-verify is written, one sent before the request is not', () => {
    expect(decide(view({ reverify: true }), report(), 3)).toBe('forward');
    expect(decide(view({ reverify: true }), report(), 2)).toBe('seen');
  });

  it("a check's free text alone is written at most every HEALTH_DETAIL_FORWARD_MS", () => {
    const chatty = report({ health: [{ name: 'motd', ok: true, kind: 'runtime', detail: 'ok in 9 ms' }] });
    expect(decide(view(), chatty, 3, NOW - 1_000)).toBe('seen');
    expect(decide(view(), chatty, 3, NOW - HEALTH_DETAIL_FORWARD_MS)).toBe('forward');
  });
});

describe('reportDigest and withPresence: what a sighting vouches for', () => {
  it('the digest ignores when health ran and free text, not what the report says', () => {
    expect(reportDigest(report())).toBe(reportDigest(report({ healthAt: null })));
    expect(reportDigest(report())).toBe(
      reportDigest(report({ health: [{ name: 'motd', ok: true, kind: 'runtime', detail: 'other' }] })),
    );
    expect(reportDigest(report())).not.toBe(reportDigest(report({ health: [{ name: 'motd', ok: false }] })));
    expect(reportDigest(null)).toBe('');
    expect(reportDigest(report())).toMatch(/^[0-9a-f]{32}$/);
  });

  it('a later sighting moves lastSeenAt; it freshens the report only when it saw the same report', () => {
    const at = '2026-12-05T00:30:00.000Z';
    const same = withPresence(view(), { at, digest: reportDigest(report()) });
    expect(same.lastSeenAt).toBe(at);
    expect(same.report!.healthAt).toBe(at);
    const other = withPresence(view(), { at, digest: reportDigest(report({ agentVersion: '2' })) });
    expect(other.lastSeenAt).toBe(at);
    expect(other.report!.healthAt).toBe('2026-12-05T00:00:00.000Z');
    // An older sighting changes nothing; a malformed one is ignored; none leaves the view as it was.
    const older = withPresence(view(), { at: '2026-12-04T00:00:00.000Z', digest: reportDigest(report()) });
    expect(older.lastSeenAt).toBe('2026-12-05T00:00:00.000Z');
    expect(older.report!.healthAt).toBe('2026-12-05T00:00:00.000Z');
    expect(withPresence(view(), { at: 'yesterday', digest: '' })).toEqual(view());
    expect(withPresence(view(), undefined)).toEqual(view());
  });
});

describe('feedStamp: what a twin stamps its change feed with', () => {
  it("the later of the twin's workflow clock and the sender's: a stale workflow clock is not a stamp in the past", () => {
    const workflowNow = new Date('2026-12-05T01:03:44.330Z');
    expect(feedStamp(workflowNow, '2026-12-05T01:11:43.000Z').toISOString()).toBe('2026-12-05T01:11:43.000Z');
    expect(feedStamp(workflowNow, '2026-12-05T01:00:00.000Z')).toBe(workflowNow);
    expect(feedStamp(workflowNow, undefined)).toBe(workflowNow);
    expect(feedStamp(workflowNow, 'soon')).toBe(workflowNow);
  });

  it('a desire whose sentAt is not a time is refused, naming the field', () => {
    expect(desireProblem({ ...desiredRequest('d1', 2), sentAt: 'soon' })).toBe(
      'twinDesire: sentAt: must be an ISO time (got "soon")',
    );
    expect(desireProblem({ ...desiredRequest('d1', 2), sentAt: '2026-12-05T01:11:43.000Z' })).toBeNull();
  });
});
