import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { executionTreeShapes, HISTORY_EVENT_LIMIT, PENDING_LIMIT } from '../support/history-bounds';
import { demoDevices, type Fleet } from '../../sim';
import { rolloutWorkflow } from '../../workflows/rollout';
import { rolloutInputFor, startTestWorker } from '../support/harness';
import { realRollouts } from '../support/real-rollouts';
import { recordHistory } from '../support/histories';

const DEVICES = 1_000;
const SLICE = 100;

describe('rollout at scale on a real Temporal dev server over real SSH', () => {
  const real = realRollouts('scale', { worker: false });
  let fleet: Fleet;
  let inventoryPath: string;

  beforeAll(async () => {
    // Two pools of 500 with a 10% budget each: about 100 devices in flight.
    ({ fleet, inventoryPath } = await real.fleet(demoDevices(DEVICES), { 'pool-a': 0.1, 'pool-b': 0.1 }));
  });

  it(`${DEVICES} devices in slices of ${SLICE}: completes, and the parent and every slice child keep history < ${HISTORY_EVENT_LIMIT} events, ≤ ${PENDING_LIMIT} pending activities, ≤ ${PENDING_LIMIT} pending children`, async () => {
    const worker = await startTestWorker(real.env, { auditDir: join(real.dir, 'audit') });
    try {
      const rolloutId = 'rollout:scale-1000';
      const input = {
        ...rolloutInputFor(
          real.dir,
          { phases: [{ canary: '1 device' }, { bulk: '25%' }, { bulk: 'remainder' }], gate: '1s' },
          inventoryPath,
          rolloutId,
        ),
        sliceSize: SLICE,
      };
      const handle = await real.env.client.workflow.start(rolloutWorkflow, {
        workflowId: rolloutId,
        taskQueue: worker.taskQueue,
        args: [input],
      });
      const result = await handle.result();
      await recordHistory(handle, 'rollout-scale-1000');
      await recordHistory(handle, 'rollout-scale-1000-floor-chunks-parallel');

      expect(result.state).toBe('completed');
      expect(result.counts.applied).toBe(DEVICES);
      expect(result.phases.map((p) => p.devices)).toEqual([1, 250, 749]);
      for (const device of fleet.devices) {
        expect(readFileSync(join(device.sandbox, '.wavegate/profiles/demo/revision'), 'utf8').trim(), device.id).toBe(
          '2',
        );
      }
      // The floor rose with each device's own apply (patch floor-at-apply): no floor pass after completion,
      // and every device's floor written, tagged with this rollout.
      const events = (await handle.fetchHistory()).events ?? [];
      expect(
        events.filter((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'confirmFloor'),
      ).toHaveLength(0);
      for (const device of fleet.devices) {
        expect(readFileSync(join(device.sandbox, '.wavegate/profiles/demo/floor'), 'utf8'), device.id).toMatch(
          new RegExp(`^revision=2\nfrom=1\n(.|\n)*rollout=${rolloutId}\n`),
        );
      }

      const shapes = await executionTreeShapes(real.env.client, rolloutId);
      const [parent, ...children] = shapes;
      // The canary (1 device) runs inline; 250 and 749 devices run as ceil(n / 100) slice children.
      expect(children).toHaveLength(Math.ceil(250 / SLICE) + Math.ceil(749 / SLICE));
      expect(parent!.childrenInitiated).toBe(children.length);
      for (const child of children) expect(child.workflowId.startsWith(`${rolloutId}/`), child.workflowId).toBe(true);
      // Every device's apply ran in exactly one execution: the parent holds only the canary's.
      expect(children.reduce((n, c) => n + c.activitiesScheduled, 0)).toBe(DEVICES - 1);
      for (const shape of shapes) {
        expect(shape.events, shape.workflowId).toBeLessThan(HISTORY_EVENT_LIMIT);
        expect(shape.maxPendingActivities, shape.workflowId).toBeLessThanOrEqual(PENDING_LIMIT);
        expect(shape.maxPendingChildren, shape.workflowId).toBeLessThanOrEqual(PENDING_LIMIT);
      }
      // A slice of 100 within pools allowing 50 + 50 does run its devices side by side.
      expect(Math.max(...children.map((c) => c.maxPendingActivities))).toBeGreaterThan(1);
      console.log(
        shapes
          .map(
            (s) =>
              `${s.workflowId}: ${s.events} events, max ${s.maxPendingActivities} pending activities, max ${s.maxPendingChildren} pending children, longest workflow task ${s.maxWorkflowTaskMs} ms`,
          )
          .join('\n'),
      );
    } finally {
      await worker.stop();
    }
  }, 300_000);
});
