import { describe, expect, it } from 'vitest';
import { AgentGone } from '../../gateway/agent-gone';

/** The gateway's "the agent closed its connection" (gateway/agent-gone.ts), in place of an AbortController per request. */
describe('AgentGone', () => {
  it('runs each waiting callback once when the agent goes, none it was told to forget, and at once once gone', () => {
    const gone = new AgentGone();
    const calls: string[] = [];
    gone.whenGone(() => calls.push('a'));
    const forgetB = gone.whenGone(() => calls.push('b'));
    gone.whenGone(() => calls.push('c'));
    forgetB();
    expect(gone.aborted).toBe(false);
    gone.abort();
    gone.abort();
    expect(gone.aborted).toBe(true);
    expect(calls).toEqual(['a', 'c']);
    gone.whenGone(() => calls.push('late'))();
    expect(calls).toEqual(['a', 'c', 'late']);
  });

  it('a callback that forgets itself while running changes nothing for the others', () => {
    const gone = new AgentGone();
    const calls: string[] = [];
    const forget = gone.whenGone(() => {
      forget();
      calls.push('self');
    });
    gone.whenGone(() => calls.push('other'));
    gone.abort();
    expect(calls).toEqual(['self', 'other']);
  });
});
