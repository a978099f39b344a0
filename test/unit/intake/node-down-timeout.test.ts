import { describe, expect, it } from 'vitest';
import { runRecheck } from '../../../intake/node-down-recheck';

/**
 * The recheck runner's timeout (intake/node-down-recheck.ts), apart from node-down.test.ts: its bound is
 * wall-clock, so this file runs alone (vitest.config.mts) and the rest of the verdicts file's tests share the machine.
 */
describe('the recheck runner (intake/node-down-recheck.ts)', () => {
  it('a recheck that does not answer in time is "still down", and its process group is ended', async () => {
    const started = Date.now();
    const res = await runRecheck('sleep 30 & sleep 30', { id: 'd', host: 'h' }, { timeoutMs: 500 });
    expect(res).toMatchObject({ passed: false, result: 'timed out after 0.5s' });
    expect(Date.now() - started).toBeLessThan(5_000);
  });
});
