import { describe, expect, it } from 'vitest';
import {
  answerIn,
  answersOf,
  desire,
  desiredSideOf,
  FEED_MEMO,
  FEED_MEMO_MAX_CHARS,
  feedMemo,
  newTwinState,
  recordSync,
  type AgentReport,
} from '../../core/twin';
import { desiredRequest } from '../support/twin-agent';

/** What a twin's change carries on the feed (core/twin.ts `feedMemo`) and how readers check it before use. */
describe('the feed memo', () => {
  const report = (requestId: string, detail = ''): AgentReport => ({
    profiles: {
      demo: {
        revision: 2,
        state: 'applied',
        requestId,
        steps: ['verify', 'apply'],
        detail,
        at: '2026-12-05T00:00:00Z',
      },
    },
    health: [],
    healthAt: null,
    agentVersion: 'test',
  });

  it('a desired change carries version, desired and reverify, which a reader takes back as they were', () => {
    const state = newTwinState('d1');
    desire(state, desiredRequest('d1', 2), '2026-12-05T00:00:00.000Z');
    const memo = feedMemo(state, 'desired');
    expect(Object.keys(memo)).toEqual([FEED_MEMO.desired]);
    const side = desiredSideOf(JSON.parse(JSON.stringify(memo[FEED_MEMO.desired])));
    expect(side).toEqual({ version: 1, desired: state.desired, reverify: false });
  });

  it('a reported change carries the report profiles; the answer to a request reads from them', () => {
    const state = newTwinState('d1');
    recordSync(state, { report: report('r-1'), knownVersion: 0, waitMs: 0 }, '2026-12-05T00:00:00.000Z');
    const memo = feedMemo(state, 'reported');
    const answers = answersOf(memo[FEED_MEMO.reported]);
    expect(answerIn(answers!, 'demo', 'r-1')).toMatchObject({ state: 'applied', report: { revision: 2 } });
    expect(answerIn(answers!, 'demo', 'r-2')).toEqual({ state: 'pending' });
  });

  it('a side too large to carry is null, and a reader reads the twin instead', () => {
    const state = newTwinState('d1');
    recordSync(state, { report: report('r-1', 'x'.repeat(FEED_MEMO_MAX_CHARS)), knownVersion: 0, waitMs: 0 }, 'now');
    expect(feedMemo(state, 'reported')).toEqual({ [FEED_MEMO.reported]: null });
    expect(answersOf(null)).toBeNull();
  });

  it('anything not of the shape is refused (absent, a malformed entry, a reserved profile name)', () => {
    expect(desiredSideOf(undefined)).toBeNull();
    expect(desiredSideOf({ version: 1, desired: {}, reverify: 'no' })).toBeNull();
    expect(desiredSideOf({ version: -1, desired: {}, reverify: false })).toBeNull();
    expect(desiredSideOf({ version: 1, desired: { demo: { profile: 'demo' } }, reverify: false })).toBeNull();
    expect(desiredSideOf({ version: 1, desired: {}, reverify: false })).toEqual({
      version: 1,
      desired: {},
      reverify: false,
    });
    expect(answersOf({ profiles: { demo: { state: 'sleeping', at: 'now', revision: 2 } } })).toBeNull();
    expect(answersOf(JSON.parse('{"profiles":{"__proto__":{"state":"applied","at":"now","revision":2}}}'))).toBeNull();
    expect(answersOf({ profiles: {} })).toEqual({});
  });
});
