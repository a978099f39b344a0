import { readdirSync } from 'node:fs';
import { Worker } from '@temporalio/worker';
import { describe, expect, it } from 'vitest';
import { HISTORIES_DIR, loadHistory } from '../support/histories';
import { workflowBundle } from '../support/temporal';

/**
 * Replays every recorded history (test/fixtures/histories, recorded from the workflow tests with
 * RECORD_HISTORIES=1) against the current workflow code: a non-deterministic change fails here.
 */
describe('replay of recorded rollout histories', () => {
  const files = readdirSync(HISTORIES_DIR).filter((f) => f.endsWith('.json'));

  it('has recorded histories of every control and failure path to replay', () => {
    expect(files.length).toBeGreaterThanOrEqual(8);
  });

  it('replays each history deterministically with the current workflow code', async () => {
    const histories = files.map((file) => {
      const { workflowId, history } = loadHistory(file);
      return { workflowId: `${workflowId}#${file}`, history };
    });
    const results = [];
    for await (const result of Worker.runReplayHistories({ workflowBundle: await workflowBundle() }, histories)) results.push(result);
    expect(results).toHaveLength(files.length);
    const failures = results.filter((r) => r.error).map((r) => `${r.workflowId}: ${r.error}`);
    expect(failures).toEqual([]);
  });
});
