import { describe, expect, it } from 'vitest';
import type { AuditRecord } from '../../../core/audit';
import type { RolloutStatus } from '../../../core/rollout/status';
import {
  abortPreview,
  checkDeviceId,
  deviceHistoryRow,
  metricReading,
  metricSeriesOf,
  pageOfRollouts,
  parseRolloutListQuery,
  timelineOf,
  type BoardOutcome,
} from '../../../core/board';

function record(seq: number, event: AuditRecord['event'], fields: Partial<AuditRecord> = {}): AuditRecord {
  return {
    seq,
    at: `2026-12-05T10:00:${String(seq).padStart(2, '0')}.000Z`,
    rolloutId: 'rollout:demo:1',
    runId: 'run-1',
    event,
    phase: null,
    by: 'wavegate',
    reason: null,
    counts: null,
    evidence: null,
    prev: '0'.repeat(64),
    hash: '1'.repeat(64),
    ...fields,
  };
}

/** The on-call parts of the board (issue 46 item 6) decided in core/board.ts: each against the case it exists for. */
describe('the board for on-call', () => {
  it('the abort dialog counts the devices a rollback puts back, and says none when there are none or it is off', () => {
    const three = abortPreview(3);
    expect(three.devices).toBe(3);
    expect(three.rollback).toMatch(/the 3 devices this rollout changed so far are put back/);
    expect(three.keep).toMatch(/no device is put back: the 3 devices this rollout changed stay as they are/);
    expect(abortPreview(1).rollback).toMatch(/the 1 device this rollout changed so far is put back/);
    const none = abortPreview(0);
    expect(none.devices).toBe(0);
    expect(none.rollback).toMatch(/nothing to put back/);
    expect(none.keep).toMatch(/no device is put back/);
    // A status from a build before changedDevices was published: nothing counted, said as none.
    expect(abortPreview(undefined).devices).toBe(0);
  });

  it('checks the rollout list query: a page size within its bound, a search of id characters, known parameters', () => {
    const q = (text: string) => parseRolloutListQuery(new URLSearchParams(text));
    expect(q('')).toEqual({ page: 0, limit: 50 });
    expect(q('q=web&state=paused&profile=web-config&page=2&limit=100')).toEqual({
      q: 'web',
      state: 'paused',
      profile: 'web-config',
      page: 2,
      limit: 100,
    });
    const refusal = (text: string) => {
      try {
        q(text);
      } catch (err) {
        const e = err as { code: string; details: { field?: string }; message: string };
        return { code: e.code, field: e.details.field, message: e.message };
      }
      throw new Error(`accepted ${text}`);
    };
    expect(refusal('limit=101')).toMatchObject({ code: 'INVALID_INPUT', field: 'limit' });
    expect(refusal('page=1.5').message).toMatch(/page "1.5": must be a whole number 0-1000/);
    expect(refusal("q=a'b")).toMatchObject({ field: 'q' });
    expect(refusal(`q=${'a'.repeat(101)}`)).toMatchObject({ field: 'q' });
    expect(refusal('state=done')).toMatchObject({ field: 'state' });
    expect(refusal('profile=Web')).toMatchObject({ field: 'profile' });
    expect(refusal('size=5').message).toMatch(/"size": not a parameter/);
  });
  it('pages the rollout list failures first, the search matching id, profile, state or outcome in any case', () => {
    const row = (workflowId: string, outcome: BoardOutcome, startTime: string, profile = 'web') => ({
      workflowId,
      outcome,
      startTime,
      profile,
      state: outcome,
    });
    const rows = [
      row('r1', 'completed', '2026-12-01T00:00:00Z'),
      row('r2', 'failed', '2026-12-02T00:00:00Z'),
      row('r3', 'running', '2026-12-03T00:00:00Z', 'db'),
      row('r4', 'completed', '2026-12-04T00:00:00Z'),
    ];
    const first = pageOfRollouts(rows, { page: 0, limit: 3 });
    expect(first.rows.map((r) => r.workflowId)).toEqual(['r2', 'r3', 'r4']);
    expect({ matching: first.matching, pages: first.pages }).toEqual({ matching: 4, pages: 2 });
    expect(pageOfRollouts(rows, { page: 1, limit: 3 }).rows.map((r) => r.workflowId)).toEqual(['r1']);
    expect(pageOfRollouts(rows, { q: 'DB', page: 0, limit: 3 }).rows.map((r) => r.workflowId)).toEqual(['r3']);
    expect(pageOfRollouts(rows, { q: 'fail', page: 0, limit: 3 }).matching).toBe(1);
    expect(pageOfRollouts(rows, { q: 'r', page: 5, limit: 3 }).rows).toEqual([]);
  });

  it('orders a timeline of phases, gates and controls with who and when, and the refused controls from the status', () => {
    const records = [
      record(1, 'rollout.started', { by: 'carol' }),
      record(2, 'phase.started', { phase: 'canary' }),
      record(3, 'devices.outcome', { phase: 'canary', evidence: { mode: 'apply', devices: [] } }),
      record(4, 'phase.applied', { phase: 'canary', evidence: { tally: { succeeded: 1, failed: 0 } } }),
      record(5, 'rollout.paused', { by: 'alice', reason: 'looking' }),
      record(7, 'rollout.resumed', { by: 'alice', reason: 'fine' }),
      record(8, 'gate.failed', { phase: 'canary', evidence: [] }),
      record(9, 'rollback.started'),
    ];
    const { entries, omitted } = timelineOf(
      {
        controls: [
          { control: 'pause', by: 'alice', reason: 'looking', at: records[4]!.at, accepted: true },
          { control: 'approve', by: 'bob', at: '2026-12-05T10:00:06.000Z', accepted: false, note: 'not waiting' },
        ],
      },
      records,
    );
    expect(omitted).toBe(0);
    expect(entries.map((e) => [e.kind, e.text, e.by])).toEqual([
      ['rollout', 'rollout started', 'carol'],
      ['phase', 'phase canary started', 'wavegate'],
      ['phase', 'phase canary applied (1 succeeded, 0 failed)', 'wavegate'],
      ['control', 'paused', 'alice'],
      ['control', 'approve refused: not waiting', 'bob'],
      ['control', 'resumed', 'alice'],
      ['gate', 'gate of canary: fail', 'wavegate'],
      ['rollback', 'rollback started', 'wavegate'],
    ]);
    expect(entries[3]).toMatchObject({ reason: 'looking', seq: 5 });
    // No trail readable here: every control from the status, accepted ones too.
    expect(timelineOf({ controls: [{ control: 'pause', by: 'a', at: 'x', accepted: true }] }, []).entries).toEqual([
      { at: 'x', kind: 'control', text: 'pause accepted', by: 'a', outcome: 'accepted' },
    ]);
  });
  it('reads the value a threshold check read from its evidence, and nothing from other checks', () => {
    expect(metricReading('0.031 at {job="web"} is < 0.05')).toEqual({ value: 0.031, op: '<', threshold: 0.05 });
    expect(metricReading('max of 3 series 0.2 is not <= 0.1')).toEqual({ value: 0.2, op: '<=', threshold: 0.1 });
    expect(metricReading('max error rate 0.02 (dev-1) over 3 devices is < 0.05')).toEqual({
      value: 0.02,
      op: '<',
      threshold: 0.05,
    });
    expect(metricReading('error rate not < 0.05 on dev-1 (0.2), dev-2 (0.4)')).toEqual({
      value: 0.4,
      op: '<',
      threshold: 0.05,
    });
    expect(metricReading('GET https://x:8080/health answered 200')).toBeUndefined();
    expect(metricReading('3/3 devices online')).toBeUndefined();
  });
  it("draws each threshold check's readings over the gates and the watch checks, oldest first", () => {
    const result = (check: string, evidence: string, outcome = 'pass') => ({ check, outcome, evidence, durationMs: 1 });
    const series = metricSeriesOf([
      record(1, 'gate.passed', {
        phase: 'canary',
        evidence: [
          result('errorRate < 0.05', 'max error rate 0.01 (d1) over 1 device is < 0.05'),
          result('devices-online', '1/1 devices online'),
        ],
      }),
      record(2, 'gate.failed', {
        phase: 'bulk',
        evidence: [result('errorRate < 0.05', 'error rate not < 0.05 on d2 (0.09)', 'fail')],
      }),
      record(3, 'watch.passed', {
        evidence: {
          check: 1,
          results: [result('errorRate < 0.05', 'max error rate 0.03 (d1) over 2 devices is < 0.05')],
        },
      }),
    ]);
    expect(series).toHaveLength(1);
    expect(series[0]).toMatchObject({ check: 'errorRate < 0.05', op: '<', threshold: 0.05 });
    expect(series[0]!.points.map((p) => [p.value, p.outcome, p.phase, p.seq])).toEqual([
      [0.01, 'pass', 'canary', 1],
      [0.09, 'fail', 'bulk', 2],
      [0.03, 'pass', null, 3],
    ]);
  });

  it('checks a device id as the inventory does, and says what a rollout did to the device', () => {
    expect(checkDeviceId('web-1.example:22')).toBe('web-1.example:22');
    expect(() => checkDeviceId('web 1')).toThrow(/device id "web 1": must be 1-128 letters/);
    expect(() => checkDeviceId('../etc')).toThrow(/device id/);
    const row = deviceHistoryRow(
      {
        workflowId: 'rollout:web:7',
        runId: 'r',
        status: 'COMPLETED',
        state: 'rolled-back',
        startTime: 's',
        closeTime: 'c',
      },
      {
        profile: 'web',
        fromRevision: 1,
        toRevision: 2,
        state: 'rolled-back',
        counts: {} as RolloutStatus['counts'],
        phases: [{ name: 'canary' }, { name: 'bulk' }] as RolloutStatus['phases'],
      },
      { state: 'rolled-back', phase: 1, reason: 'gate failed' },
    );
    expect(row).toEqual({
      rolloutId: 'rollout:web:7',
      runId: 'r',
      profile: 'web',
      outcome: 'rolled-back',
      state: 'rolled-back',
      phase: 'bulk',
      reason: 'gate failed',
      fromRevision: 1,
      toRevision: 2,
      startTime: 's',
      closeTime: 'c',
    });
  });
});
