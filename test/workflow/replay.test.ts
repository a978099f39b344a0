import { readdirSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { HISTORIES_DIR } from '../support/histories';
import { replayUpdateOutcomes } from '../support/replay-update-outcomes';

/**
 * Replays every recorded history (test/fixtures/histories, recorded from the workflow tests with
 * RECORD_HISTORIES=1) against the current workflow code: a non-deterministic change fails here.
 */
describe('replay of recorded rollout histories', () => {
  const files = readdirSync(HISTORIES_DIR).filter((f) => f.endsWith('.json'));

  it('has recorded histories of every control and failure path to replay', () => {
    expect(files.length).toBeGreaterThanOrEqual(8);
  });

  it('replays each history deterministically with the current workflow code, every update ending as it was recorded', async () => {
    // The SDK's replay does not compare an update's outcome (a handler that now throws where it once returned
    // replays "fine" while the state diverges): the interceptor reports each handler's end and it is compared here.
    const { errors, outcomes } = await replayUpdateOutcomes(files);
    expect(errors).toEqual([]);
    const changed = outcomes.filter((o) => o.recorded !== 'not completed' && o.recorded !== o.replayed).map((o) => `${o.file} ${o.updateId}: recorded ${o.recorded}, replayed ${o.replayed}${o.failure ? ` (${o.failure.slice(0, 200)})` : ''}`);
    expect(changed).toEqual([]);
    expect(outcomes.length).toBeGreaterThan(0);
  });
});
