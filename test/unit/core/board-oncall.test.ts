import { describe, expect, it } from 'vitest';
import { abortPreview, pageOfRollouts, parseRolloutListQuery, type BoardOutcome } from '../../../core/board';

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
    expect(refusal('q=' + 'a'.repeat(101))).toMatchObject({ field: 'q' });
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
});
