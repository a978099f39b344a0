import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { WorkflowHandle } from '@temporalio/client';
import { describe, expect, it } from 'vitest';
import { DEVICE_WAY_BACK_MS, parseFloor } from '../../core/floor';
import { changedDevices, IN_PLACE_REASON } from '../../core/rollout/revert';
import { demoDevices, type Fleet } from '../../sim';
import { abortUpdate } from '../../contracts/rollout';
import type { RolloutInput } from '../../workflows/rollout';
import { rolloutInputFor } from '../support/harness';
import { recordHistory } from '../support/histories';
import { realRollouts } from '../support/real-rollouts';
import { APPLY_COMMAND, markerOf, waitForStatus } from '../support/rollout-helpers';

/**
 * The floor moves with each device's own confirmed apply (core/floor.ts, docs/formats.md "The floor"):
 * the apply's one remote command raises it after verify and marker, tagged with the rollout and run; a
 * device found in place is not changed by the rollout and its floor only rises; only the raising run's
 * compensation goes below it, and puts back the floor that was there. Real Temporal, real activities
 * over SSH to the simulator.
 */
describe("the floor rises with each device's confirmed apply", () => {
  const real = realRollouts('floor-at-apply');
  /** The number of the test, at the end of its rollout ids. */
  let n = 0;

  const floorFile = (fleet: Fleet, id: string) => join(fleet.device(id).sandbox, '.wavegate/profiles/demo/floor');
  const floorText = (fleet: Fleet, id: string) =>
    existsSync(floorFile(fleet, id)) ? readFileSync(floorFile(fleet, id), 'utf8') : null;
  const run = async (input: RolloutInput) => {
    const handle = await real.start(input);
    return { handle, result: await handle.result(), runId: (await handle.describe()).runId };
  };
  const activityTypes = async (handle: WorkflowHandle) =>
    (await handle.fetchHistory())
      .events!.map((e) => e.activityTaskScheduledEventAttributes?.activityType?.name)
      .filter(Boolean);

  it('raises the floor in the apply, with no pass after completion; a device found in place is not changed and keeps its floor; a re-run changes no floor', async () => {
    n++;
    const { dir, fleet, inventoryPath } = await real.fleet(demoDevices(4));
    const phases = [{ canary: '1 device' }, { bulk: 'remainder' }];
    const [first, ...others] = fleet.devices.map((d) => d.id);

    // One device brought to r2 by a rollout of its own: the next rollout finds it in place.
    const pre = {
      ...rolloutInputFor(dir, { gate: '0s', phases, revertWindow: '1h' }, inventoryPath, `rollout:demo-floor-pre-${n}`),
      onlyDevices: [first!],
    };
    expect((await run(pre)).result.state).toBe('completed');
    const preFloor = floorText(fleet, first!);
    expect(parseFloor(preFloor ?? '')).toMatchObject({ revision: 2, from: 1, rollout: pre.rolloutId });

    const main = rolloutInputFor(
      dir,
      { gate: '0s', phases, revertWindow: '1h' },
      inventoryPath,
      `rollout:demo-floor-main-${n}`,
    );
    const { handle, result, runId } = await run(main);
    await recordHistory(handle, 'floor-at-apply');
    expect(result.state).toBe('completed');
    for (const id of others) {
      expect(markerOf(fleet, id)).toBe(2);
      expect(parseFloor(floorText(fleet, id)!)).toEqual({
        revision: 2,
        from: 1,
        revertUntil: 0,
        rollout: main.rolloutId,
        run: runId,
        window: 3_600_000,
        at: expect.any(Number),
        // The demo's r2 signs no way back of its own: the device maximum.
        wayBack: DEVICE_WAY_BACK_MS,
      });
    }
    // Found in place: applied for the board, but not changed by this rollout, and its floor untouched.
    expect(result.devices.find((d) => d.id === first)).toMatchObject({ state: 'applied', reason: IN_PLACE_REASON });
    expect(floorText(fleet, first!)).toBe(preFloor);
    expect(changedDevices(result).sort()).toEqual([...others].sort());
    expect(result.changedDevices).toBe(others.length);
    // The floor went with the applies: no floor pass after completion.
    expect(await activityTypes(handle)).not.toContain('confirmFloor');

    // The same change again, now with a month to revert: every device is in place, no floor moves, no window opens.
    const before = new Map(fleet.devices.map((d) => [d.id, floorText(fleet, d.id)]));
    const applies = fleet.devices.map((d) => fleet.count(d.id, APPLY_COMMAND));
    const again = await run(
      rolloutInputFor(dir, { gate: '0s', phases, revertWindow: '30d' }, inventoryPath, `rollout:demo-floor-again-${n}`),
    );
    expect(again.result.state).toBe('completed');
    expect(changedDevices(again.result)).toEqual([]);
    for (const d of fleet.devices) expect(floorText(fleet, d.id)).toBe(before.get(d.id));
    expect(fleet.devices.map((d) => fleet.count(d.id, APPLY_COMMAND))).toEqual(applies);
  });

  it('abort with rollback goes below the floor its own run raised, once: the floor steps down to r1 with no way back', async () => {
    n++;
    const { dir, fleet, inventoryPath } = await real.fleet(demoDevices(4));
    const input = rolloutInputFor(
      dir,
      { phases: [{ canary: '1 device', gate: 'manual' }, { bulk: 'remainder' }] },
      inventoryPath,
      `rollout:demo-floor-abort-${n}`,
    );
    const handle = await real.start(input);
    const waiting = await waitForStatus(handle, (s) => s.phases[0]?.stage === 'awaiting-approval');
    const canary = waiting.devices.find((d) => d.phase === 0)!.id;
    const runId = (await handle.describe()).runId;
    // Raised by the canary's apply, while the rollout still runs.
    expect(parseFloor(floorText(fleet, canary)!)).toMatchObject({
      revision: 2,
      from: 1,
      rollout: input.rolloutId,
      run: runId,
    });
    await handle.executeUpdate(abortUpdate, { args: [{ by: 'test', reason: 'wrong revision', rollback: true }] });
    const result = await handle.result();
    await recordHistory(handle, 'floor-at-apply-abort-rollback');
    expect(result.state).toBe('aborted');
    expect(result.devices.find((d) => d.id === canary)!.state).toBe('rolled-back');
    expect(markerOf(fleet, canary)).toBe(1);
    // No floor was there before this rollout raised one: its compensation leaves one at r1, never none.
    expect(parseFloor(floorText(fleet, canary)!)).toMatchObject({ revision: 1, from: 1, wayBack: 0, run: runId });
  });
});
