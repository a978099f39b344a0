import { describe, expect, it } from 'vitest';
import { twinWorkflowId, type AgentReport } from '../../core/twin';
import { desireOnTwin } from '../../clients/twin';
import { mapLimit } from '../../core/map-limit';
import { DeviceViews } from '../../gateway/views';
import { realRollouts } from '../support/real-rollouts';
import { desiredRequest } from '../support/twin-agent';

/**
 * The scale at which the pull transport used to fall over (issue 29): 10,000 agent devices on one worker. Before
 * r11 every sync held a wait inside its twin's update handler, and at this size the worker died (`async hook stack
 * has become corrupted`). Here 3,000 devices sync through the gateway's device views (gateway/views.ts) against
 * the real worker and dev server: the first sync of each reads and starts its twin, then idle rounds of syncs reach
 * no twin at all, and a desired change to some of them answers their held long-polls. The worker keeps running
 * throughout, and no twin's history moves during the idle rounds.
 *
 * Why 3,000 devices suffice (this test ran 10,000 until 27c0909: 162 CPU s, the suite's second largest file,
 * nearly all of it 10,000 twins started): what kept the worker alive is that an idle sync and a held long-poll
 * never reach the twin, and that is asserted here whatever the size (every twin read and started once, the
 * sampled histories unchanged by 9,000 idle syncs, thousands of long-polls held in the gateway and none in a
 * twin). The figures at 10,000 (a rollout, ten idle minutes, the worker's and the gateway's memory) are
 * bench/agent-scale.ts's (bench/README.md).
 */
const real = realRollouts('twin-scale');
const DEVICES = 3_000;
const ids = Array.from({ length: DEVICES }, (_, i) => `scale-${String(i).padStart(5, '0')}`);
// Each device answers as already at r1 (an agent with a marker).
const report: AgentReport = {
  profiles: { demo: { revision: 1, state: 'already-applied', requestId: 'installed', at: '2026-12-01T00:00:00.000Z' } },
  health: [{ name: 'motd', ok: true, kind: 'runtime' }],
  healthAt: null,
  agentVersion: 'scale',
};

describe('3,000 agent devices on one worker', () => {
  it('first syncs start every twin; idle rounds reach none; a desire answers the held long-polls of its devices', async () => {
    const views = new DeviceViews({ client: real.env.client, taskQueue: real.worker.taskQueue, maxReads: 32 });
    try {
      await mapLimit(ids, 200, (id) => views.sync(id, { report, knownVersion: 0, waitMs: 0 }));
      expect(views.stats()).toMatchObject({ records: DEVICES, reads: DEVICES, forwards: DEVICES });
      const sample = ids.filter((_, i) => i % 150 === 0);
      const describeSample = () =>
        Promise.all(sample.map((id) => real.env.client.workflow.getHandle(twinWorkflowId(id)).describe()));
      const lengths = async () => (await describeSample()).map((d) => d.historyLength);
      // A twin started by a first sync has its first workflow task still queued while the worker works through
      // 3,000 of them (CI saw a sampled history move 3 -> 4 during the idle rounds: its task was picked up, not
      // written by a sync). Measured once the sampled twins have no task pending, so only a sync could move them.
      const settleBy = Date.now() + 300_000;
      while ((await describeSample()).some((d) => d.raw.pendingWorkflowTask)) {
        if (Date.now() > settleBy) throw new Error('the sampled twins still had a workflow task pending after 300 s');
        await new Promise((r) => setTimeout(r, 500));
      }
      const before = await lengths();

      // Three idle rounds (9,000 syncs): answered from the gateway's memory.
      for (let round = 0; round < 3; round++) {
        await mapLimit(ids, 500, (id) =>
          views.sync(id, { report: { ...report, healthAt: new Date().toISOString() }, knownVersion: 0, waitMs: 0 }),
        );
      }
      expect(views.stats()).toMatchObject({ reads: DEVICES, forwards: DEVICES, seenMarks: 3 * DEVICES });
      expect(await lengths()).toEqual(before);

      // Every device holds a long-poll; 100 of them are asked for r2, and exactly those are answered with it. The
      // wait is long because this file may share two cores with every other workflow suite: a held long-poll that
      // ends by its wait answers without r2 and fails the check below.
      const asked = new Set(ids.slice(0, 100));
      const held = ids.map((id) => views.sync(id, { report, knownVersion: 0, waitMs: 240_000 }));
      await mapLimit([...asked], 20, (id) =>
        desireOnTwin(real.env.client, real.worker.taskQueue, id, desiredRequest(id, 2)),
      );
      const answered = await Promise.all(held.slice(0, 100));
      for (const view of answered) expect(view.desired.demo?.revision).toBe(2);
      expect(views.stats().held).toBe(DEVICES - 100);
      expect(views.stats().feedChanges).toBe(100);
      // The worker took every twin's task and still answers: a read of a twin it last saw thousands of twins ago.
      expect((await real.env.client.workflow.getHandle(twinWorkflowId(ids[DEVICES - 1]!)).describe()).status.name).toBe(
        'RUNNING',
      );
    } finally {
      await views.close();
    }
  }, 600_000);
});
