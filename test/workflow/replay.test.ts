import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { currentHistories } from '../support/histories';
import { replayUpdateOutcomes } from '../support/replay-update-outcomes';

/**
 * Replays every recorded history (test/fixtures/histories, recorded from the workflow tests with
 * RECORD_HISTORIES=1) against the current workflow code: a non-deterministic change fails here. Histories
 * under test/fixtures/histories/archive/<release>/ are of rollouts the current code no longer supports (a retired
 * patch's old branch); they replay on that release's commit, not here.
 */
describe('replay of recorded rollout histories', () => {
  const files = currentHistories();

  it('replays the files directly in histories/, never those archived below it', () => {
    const dir = mkdtempSync(join(tmpdir(), 'histories-'));
    try {
      writeFileSync(join(dir, 'current.json'), '{}');
      mkdirSync(join(dir, 'archive', 'r9'), { recursive: true });
      writeFileSync(join(dir, 'archive', 'r9', 'retired.json'), '{}');
      writeFileSync(join(dir, 'notes.md'), '');
      expect(currentHistories(dir)).toEqual(['current.json']);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('has recorded histories of every control and failure path to replay', () => {
    expect(files.length).toBeGreaterThanOrEqual(8);
  });

  it('replays each history deterministically with the current workflow code, every update ending as it was recorded', async () => {
    // The SDK's replay does not compare an update's outcome (a handler that now throws where it once returned
    // replays "fine" while the state diverges): the interceptor reports each handler's end and it is compared here.
    const { errors, outcomes } = await replayUpdateOutcomes(files);
    expect(errors).toEqual([]);
    const changed = outcomes
      .filter((o) => o.recorded !== 'not completed' && o.recorded !== o.replayed)
      .map(
        (o) =>
          `${o.file} ${o.updateId}: recorded ${o.recorded}, replayed ${o.replayed}${o.failure ? ` (${o.failure.slice(0, 200)})` : ''}`,
      );
    expect(changed).toEqual([]);
    expect(outcomes.length).toBeGreaterThan(0);
  });
});
