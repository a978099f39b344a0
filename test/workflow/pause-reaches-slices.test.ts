import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Client } from '@temporalio/client';
import { describe, expect, it } from 'vitest';
import { demoDevices, type Fleet } from '../../sim';
import { pauseUpdate, resumeUpdate, statusQuery } from '../../contracts/rollout';
import { rolloutInputFor } from '../support/harness';
import { recordHistory } from '../support/histories';
import { realRollouts } from '../support/real-rollouts';
import { until } from '../support/until';

function readMarker(fleet: Fleet, id: string): string | undefined {
  try {
    return readFileSync(join(fleet.device(id).sandbox, '.wavegate/profiles/demo/revision'), 'utf8').trim();
  } catch {
    return undefined;
  }
}

/** When each apply activity of an execution was scheduled (server clock, epoch ms), and the children it started. */
async function appliesScheduled(
  client: Client,
  workflowId: string,
): Promise<{ scheduled: number[]; children: string[] }> {
  const history = await client.workflow.getHandle(workflowId).fetchHistory();
  const scheduled: number[] = [];
  const children: string[] = [];
  for (const e of history.events ?? []) {
    const at = e.eventTime ? Number(e.eventTime.seconds) * 1000 + Math.floor((e.eventTime.nanos ?? 0) / 1e6) : 0;
    if (e.activityTaskScheduledEventAttributes?.activityType?.name === 'applyRevision') scheduled.push(at);
    const child = e.startChildWorkflowExecutionInitiatedEventAttributes?.workflowId;
    if (child) children.push(child);
  }
  return { scheduled, children };
}

/**
 * "No new device start after `pause` returns" with slice children: the pause update answers only once
 * every live slice has answered that it holds the paused state (patch slice-control-ack: a slice's
 * workflow task in flight when the signal landed may still schedule; its answer comes after that task),
 * so no apply is scheduled anywhere in the execution tree after the CLI's pause came back.
 */
describe('pause over overlapping slices', () => {
  const real = realRollouts('pause-slices');

  it('no apply is scheduled in any slice after the pause update returns; resume finishes the rollout', async () => {
    const DEVICES = 40;
    const { dir, fleet, inventoryPath } = await real.fleet(demoDevices(DEVICES), { 'pool-a': 0.1, 'pool-b': 0.1 });
    // Slow commands keep devices of neighbouring slices in flight when the pause lands.
    await Promise.all(fleet.devices.map((d) => fleet.setFaults(d.id, { latencyMs: 200 })));
    const input = rolloutInputFor(
      dir,
      { gate: '0s', phases: [{ canary: '1 device' }, { bulk: 'remainder' }] },
      inventoryPath,
      'rollout:pause-slices',
    );
    const handle = await real.start({ ...input, sliceSize: 4 });

    // Mid-phase, read from the devices themselves (the parent learns a slice's devices when it ends).
    const onTarget = () => fleet.devices.filter((d) => readMarker(fleet, d.id) === '2').length;
    await until('ten devices applied', async () => (onTarget() >= 10 ? true : undefined), 120_000);
    await handle.executeUpdate(pauseUpdate, { args: [{ by: 'test', reason: 'hold the fleet' }] });
    const pausedAt = Date.now();

    // The devices in flight finish; nothing else starts.
    await new Promise((r) => setTimeout(r, 8_000));
    const held = onTarget();
    await new Promise((r) => setTimeout(r, 4_000));
    expect(onTarget()).toBe(held);
    expect(held).toBeLessThan(DEVICES);
    expect((await handle.query(statusQuery)).pausedReason).toContain('hold the fleet');

    const parent = await appliesScheduled(real.env.client, input.rolloutId);
    const late: number[] = [];
    let slices = 0;
    for (const id of parent.children) {
      const child = await appliesScheduled(real.env.client, id);
      slices += 1;
      late.push(...child.scheduled.filter((at) => at > pausedAt));
    }
    late.push(...parent.scheduled.filter((at) => at > pausedAt));
    expect(slices).toBeGreaterThan(1);
    expect(late).toEqual([]);

    await handle.executeUpdate(resumeUpdate, { args: [{ by: 'test', reason: 'go on' }] });
    const result = await handle.result();
    expect(result.state).toBe('completed');
    expect(result.counts.applied).toBe(DEVICES);
    // The path of SLICE_CONTROL_ACK (archive/r9/pause-reaches-slices.json holds the retired CONTROLS_REACH_SLICES one).
    await recordHistory(handle, 'pause-acked-by-slices');
    for (const id of parent.children) {
      const events = (await real.env.client.workflow.getHandle(id).fetchHistory()).events ?? [];
      if (
        events.some((e) => e.signalExternalWorkflowExecutionInitiatedEventAttributes?.signalName === 'sliceControlAck')
      ) {
        await recordHistory(real.env.client.workflow.getHandle(id), 'pause-acked-slice-child');
        break;
      }
    }
  });
});
