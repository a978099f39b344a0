import { describe, expect, it } from 'vitest';
import {
  answerTo,
  askDecision,
  askProblem,
  desire,
  desireProblem,
  envelopeDigestOf,
  hasNews,
  isOffline,
  newTwinState,
  recordSync,
  requestIdOf,
  requestReverify,
  restoreTwinState,
  syncProblem,
  TWIN_LIMITS,
  twinWorkflowId,
  viewOf,
  type AgentReport,
  type DesiredRequest,
} from '../../../core/twin';

const holder = { rollout: 'r-1', run: 'run-1', activity: '7', attempt: 1 };
function request(overrides: Partial<DesiredRequest> = {}): DesiredRequest {
  return {
    requestId: requestIdOf(holder),
    profile: 'web',
    revision: 2,
    steps: { profile: 'web', revision: 2, apply: 'true', verify: 'true', payload: [] },
    envelopeDigest: '',
    holder,
    rollout: 'r-1',
    fromRevision: 1,
    ...overrides,
  };
}
function report(overrides: Partial<AgentReport> = {}): AgentReport {
  return {
    profiles: { web: { revision: 2, state: 'applied', requestId: 'r-1:run-1:7', at: '2026-01-01T00:00:00.000Z' } },
    health: [{ name: 'http', ok: true }],
    healthAt: null,
    agentVersion: '1',
    ...overrides,
  };
}

describe('device twin state (core/twin.ts)', () => {
  it('a desire bumps the version once per request id: a retried signal changes nothing', () => {
    const s = newTwinState('dev-1');
    expect(desire(s, request(), 't1')).toBe(true);
    expect(s.version).toBe(1);
    expect(s.desired.web).toMatchObject({ revision: 2, requestId: 'r-1:run-1:7', setAt: 't1' });
    expect(desire(s, request(), 't2')).toBe(false);
    expect(s.version).toBe(1);
    expect(s.desired.web!.setAt).toBe('t1');
    // A new request (the rollback: another activity) replaces the entry.
    expect(
      desire(
        s,
        request({
          requestId: 'r-1:run-1:9',
          revision: 1,
          steps: { profile: 'web', revision: 1, apply: 'true', verify: 'true', payload: [] },
        }),
        't3',
      ),
    ).toBe(true);
    expect(s.version).toBe(2);
    expect(s.desired.web!.revision).toBe(1);
  });

  it('a sync records the report and last seen; news is a version above what the agent knows', () => {
    const s = newTwinState('dev-1');
    desire(s, request(), 't1');
    expect(hasNews(s, 0)).toBe(true);
    expect(hasNews(s, 1)).toBe(false);
    recordSync(s, { report: null, knownVersion: 0, waitMs: 0 }, '2026-01-01T00:00:05.000Z');
    expect(s.report).toBeNull();
    expect(s.lastSeenAt).toBe('2026-01-01T00:00:05.000Z');
    recordSync(s, { report: report(), knownVersion: 1, waitMs: 0 }, '2026-01-01T00:00:06.000Z');
    expect(s.report!.profiles.web!.state).toBe('applied');
    expect(s.syncs).toBe(2);
  });

  it('reverify sets the flag and bumps the version; a report made knowing that version clears it', () => {
    const s = newTwinState('dev-1');
    requestReverify(s);
    expect(s).toMatchObject({ reverify: true, version: 1 });
    recordSync(s, { report: report(), knownVersion: 0, waitMs: 0 }, 't');
    expect(s.reverify).toBe(true); // the report predates the request
    recordSync(s, { report: report(), knownVersion: 1, waitMs: 0 }, 't');
    expect(s.reverify).toBe(false);
  });

  it('answers a request only from a final report naming its request id', () => {
    const s = newTwinState('dev-1');
    expect(answerTo(viewOf(s), 'web', 'r-1:run-1:7')).toEqual({ state: 'pending' });
    recordSync(
      s,
      {
        report: report({ profiles: { web: { revision: 1, state: 'applying', requestId: 'r-1:run-1:7', at: 't' } } }),
        knownVersion: 1,
        waitMs: 0,
      },
      't',
    );
    expect(answerTo(viewOf(s), 'web', 'r-1:run-1:7')).toEqual({ state: 'pending' });
    recordSync(
      s,
      {
        report: report({ profiles: { web: { revision: 1, state: 'applied', requestId: 'other', at: 't' } } }),
        knownVersion: 1,
        waitMs: 0,
      },
      't',
    );
    expect(answerTo(viewOf(s), 'web', 'r-1:run-1:7')).toEqual({ state: 'pending' });
    recordSync(
      s,
      {
        report: report({
          profiles: {
            web: { revision: 1, state: 'refused', reason: 'UNPINNED_KEY', requestId: 'r-1:run-1:7', at: 't' },
          },
        }),
        knownVersion: 1,
        waitMs: 0,
      },
      't',
    );
    expect(answerTo(viewOf(s), 'web', 'r-1:run-1:7')).toMatchObject({
      state: 'refused',
      report: { reason: 'UNPINNED_KEY' },
    });
  });

  it('offline: never seen, or silent past the bound', () => {
    const now = Date.parse('2026-01-01T00:10:00.000Z');
    expect(isOffline({ lastSeenAt: null }, now)).toBe(true);
    expect(isOffline({ lastSeenAt: '2026-01-01T00:09:00.000Z' }, now)).toBe(false);
    expect(isOffline({ lastSeenAt: '2026-01-01T00:08:00.000Z' }, now)).toBe(true);
  });

  it('a carried state is restored only for its own device', () => {
    const s = newTwinState('dev-1');
    desire(s, request(), 't1');
    expect(restoreTwinState('dev-1', s)).toEqual(s);
    expect(() => restoreTwinState('dev-2', s)).toThrow(/carried state is of device "dev-1"/);
    expect(twinWorkflowId('dev-1')).toBe('device:dev-1');
  });

  it('the envelope digest is the SHA-256 of its canonical JSON (key order does not matter)', () => {
    const a = envelopeDigestOf({ body: 'eyJ9', signatures: [{ kid: 'k', alg: 'Ed25519', sig: 'c2ln' }] });
    expect(a).toMatch(/^[0-9a-f]{64}$/);
    expect(envelopeDigestOf({ signatures: [{ sig: 'c2ln', alg: 'Ed25519', kid: 'k' }], body: 'eyJ9' } as never)).toBe(
      a,
    );
    expect(envelopeDigestOf(undefined)).toBe('');
  });

  describe('validation names the field and the value', () => {
    it('desires', () => {
      expect(desireProblem(request())).toBeNull();
      expect(desireProblem(request({ revision: 0 }))).toBe(
        'twinDesire: revision: must be a revision number >= 1 (got 0)',
      );
      expect(desireProblem(request({ profile: '../etc' }))).toMatch(
        /^twinDesire: profile: must be a profile name .*"..\/etc"/,
      );
      expect(desireProblem(request({ envelopeDigest: 'xyz' }))).toBe(
        'twinDesire: envelopeDigest: must be 64 hex chars or "" (got "xyz")',
      );
      expect(desireProblem(request({ revision: 3 }))).toBe('twinDesire: steps: must be the steps of web r3');
      expect(desireProblem(request({ holder: { ...holder, attempt: 0 } }))).toMatch(/^twinDesire: holder:/);
      // v1.3: the phase a request is for, as a receipt names it (0-999).
      expect(desireProblem(request({ phase: 0 }))).toBeNull();
      expect(desireProblem(request({ phase: 999 }))).toBeNull();
      for (const phase of [-1, 1000, 1.5, '1'])
        expect(desireProblem(request({ phase: phase as number }))).toBe(
          `twinDesire: phase: must be a phase index 0-999 (got ${JSON.stringify(phase)})`,
        );
    });

    it('syncs', () => {
      expect(syncProblem({ report: null, knownVersion: 0, waitMs: 0 })).toBeNull();
      expect(syncProblem({ report: report(), knownVersion: 3, waitMs: 30_000 })).toBeNull();
      expect(syncProblem({ report: null, knownVersion: 0, waitMs: 30_001 })).toBe(
        'twinSync: waitMs: must be 0-30000 (got 30001)',
      );
      expect(syncProblem({ report: null, knownVersion: -1, waitMs: 0 })).toBe(
        'twinSync: knownVersion: must be an integer >= 0 (got -1)',
      );
      const many = Object.fromEntries(
        Array.from({ length: TWIN_LIMITS.profiles + 1 }, (_, i) => [`p${i}`, { revision: 1, state: 'idle', at: 't' }]),
      );
      expect(syncProblem({ report: report({ profiles: many as never }), knownVersion: 0, waitMs: 0 })).toBe(
        'twinSync: report.profiles: at most 64 profiles (got 65)',
      );
      expect(
        syncProblem({
          report: report({ health: Array.from({ length: 65 }, () => ({ name: 'x', ok: true })) }),
          knownVersion: 0,
          waitMs: 0,
        }),
      ).toBe('twinSync: report.health: at most 64 checks (got 65)');
      expect(
        syncProblem({
          report: report({ profiles: { web: { revision: 1, state: 'done' as never, at: 't' } } }),
          knownVersion: 0,
          waitMs: 0,
        }),
      ).toMatch(/^twinSync: report.profiles.web.state: must be one of idle, applying/);
      expect(
        syncProblem({
          report: report({ profiles: { web: { revision: 1, state: 'failed', detail: 'x'.repeat(401), at: 't' } } }),
          knownVersion: 0,
          waitMs: 0,
        }),
      ).toBe('twinSync: report.profiles.web.detail: at most 400 characters (got 401)');
      // v1.3: a receipt rides on each profile's answer, at most 1 KB of it (checked for what it says by the worker).
      const answered = (receipt: unknown) =>
        syncProblem({
          report: report({ profiles: { web: { revision: 1, state: 'applied', at: 't', receipt: receipt as string } } }),
          knownVersion: 0,
          waitMs: 0,
        });
      expect(answered('r'.repeat(TWIN_LIMITS.receipt))).toBeNull();
      expect(answered('é'.repeat(TWIN_LIMITS.receipt / 2 + 1))).toBe(
        'twinSync: report.profiles.web.receipt: at most 1024 bytes (got 1026)',
      );
      expect(answered(7)).toBe('twinSync: report.profiles.web.receipt: must be a string (got 7)');
      expect(
        syncProblem({
          report: report({ profiles: { __proto__: { revision: 1, state: 'idle', at: 't' } } as never }),
          knownVersion: 0,
          waitMs: 0,
        }),
      ).toBeNull(); // an object literal's __proto__ sets the prototype: no own key
      expect(
        syncProblem({
          report: report({ profiles: JSON.parse('{"__proto__": {"revision": 1, "state": "idle", "at": "t"}}') }),
          knownVersion: 0,
          waitMs: 0,
        }),
      ).toMatch(/must be a profile name/);
    });
  });

  it('askDecision: answered, asked again, offline, ahead, asked; in that order', () => {
    const nowMs = Date.parse('2026-01-01T00:10:00.000Z');
    const ask = { request: request(), reportOffline: true, aheadAbove: 1 };
    const seenNow = { lastSeenAt: '2026-01-01T00:09:30.000Z' };
    const view = (over: Partial<ReturnType<typeof viewOf>> = {}) => ({
      ...viewOf(newTwinState('dev-1')),
      ...seenNow,
      ...over,
    });
    // No twin: offline under reportOffline (never seen), else asked.
    expect(askDecision(null, ask, nowMs)).toEqual({
      kind: 'offline',
      detail: 'agent not syncing (never seen): nothing asked of it',
    });
    expect(askDecision(null, { request: request() }, nowMs)).toEqual({ kind: 'asked' });
    // The agent already answered this request: that answer, whatever the checks would say.
    const answered = view({ report: report(), lastSeenAt: '2026-01-01T00:00:00.000Z' });
    expect(askDecision(answered, ask, nowMs)).toMatchObject({ kind: 'answered', answer: { state: 'applied' } });
    // Silent for 10 minutes: offline, seconds named.
    expect(askDecision(view({ lastSeenAt: '2026-01-01T00:00:00.000Z' }), ask, nowMs)).toEqual({
      kind: 'offline',
      detail: 'agent not syncing (last seen 600s ago): nothing asked of it',
    });
    // A request the twin already holds is asked again (it re-stamps the feed), even from an agent silent since.
    const held = newTwinState('dev-1');
    desire(held, request(), 't');
    expect(askDecision({ ...viewOf(held), lastSeenAt: null }, ask, nowMs)).toEqual({ kind: 'asked' });
    // Reporting r3 of the profile (another request): ahead of r1; not ahead of r3 or without the check.
    const at3 = view({
      report: report({ profiles: { web: { revision: 3, state: 'applied', requestId: 'other', at: 't' } } }),
    });
    expect(askDecision(at3, ask, nowMs)).toEqual({
      kind: 'ahead',
      detail: "the device is at revision 3 (its agent's last report), above r1",
    });
    expect(askDecision(at3, { ...ask, aheadAbove: 3 }, nowMs)).toEqual({ kind: 'asked' });
    expect(askDecision(at3, { request: request() }, nowMs)).toEqual({ kind: 'asked' });
  });

  it('askProblem names the field and the value', () => {
    const sentAt = '2026-01-01T00:00:00.000Z';
    expect(askProblem({ request: { ...request(), sentAt } })).toBeNull();
    expect(
      askProblem({
        request: { ...request(), sentAt },
        reportOffline: true,
        aheadAbove: 2,
        seen: { at: sentAt, digest: 'd' },
      }),
    ).toBeNull();
    expect(askProblem('x')).toBe('twinAsk: must be an object');
    expect(askProblem({ request: request() })).toBe('twinAsk: request.sentAt: must be an ISO time (got undefined)');
    expect(askProblem({ request: { ...request(), sentAt, revision: 0 } })).toBe(
      'twinDesire: revision: must be a revision number >= 1 (got 0)',
    );
    expect(askProblem({ request: { ...request(), sentAt }, reportOffline: 'yes' })).toBe(
      'twinAsk: reportOffline: must be true or false (got "yes")',
    );
    expect(askProblem({ request: { ...request(), sentAt }, aheadAbove: -1 })).toBe(
      'twinAsk: aheadAbove: must be a revision number >= 1 (got -1)',
    );
    expect(askProblem({ request: { ...request(), sentAt }, seen: { at: 'yesterday', digest: 'd' } })).toMatch(
      /^twinAsk: seen\.at: must be an ISO 8601 UTC time/,
    );
  });
});
