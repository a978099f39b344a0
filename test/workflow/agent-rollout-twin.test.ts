import { join } from 'node:path';
import { readFileSync, writeFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse, stringify } from 'yaml';
import { demoDevices } from '../../sim';
import { readAuditFile } from '../../audit/file';
import { readTwin } from '../../clients/twin';
import { convergeEnrolledDevice, latestCompletedRollout } from '../../device/twin/enrolled';
import { parseInventory } from '../../core/inventory';
import { rolloutInputFor } from '../support/harness';
import { realRollouts } from '../support/real-rollouts';
import { markerOf } from '../support/rollout-helpers';
import { until } from '../support/until';
import { recordHistory } from '../support/histories';
import { appliesIn, markerIn, startTwinAgent } from '../support/twin-agent';
import { DeviceViews } from '../../gateway/views';
import { listTwinChanges } from '../../clients/twin-feed';
import { twinWorkflowId } from '../../core/twin';

/**
 * The rollout side of the pull transport on a real dev server, a real worker and real simulated SSH
 * devices, with agent devices driven by a small in-process agent loop talking to their twins through
 * the Temporal client (the e2e with real `wavegate agent` processes and gateway is test/e2e/agent-rollout.test.ts).
 */
const agents: Array<{ stop(): Promise<void> }> = [];
const real = realRollouts('agent-twin', { cleanup: async () => void (await Promise.all(agents.map((a) => a.stop()))) });
let n = 0;

const agentKey = (i: number) => `ed25519:${Buffer.alloc(32, i + 1).toString('base64')}`;

/** An inventory of `ssh` simulated devices plus `agents` agent devices (ids agent-<n>-<i>) in pool-a. */
async function setup(ssh: number, agentCount: number) {
  n++;
  const { dir, fleet, inventoryPath } = await real.fleet(demoDevices(ssh), { 'pool-a': 1, 'pool-b': 1, agents: 1 });
  const doc = parse(readFileSync(inventoryPath, 'utf8'));
  const agentIds = Array.from({ length: agentCount }, (_, i) => `agent-${n}-${i + 1}`);
  doc.pools.agents = { disruptionBudget: 1 };
  doc.devices.push(
    ...agentIds.map((id, i) => ({
      id,
      transport: 'agent',
      agentKey: agentKey(n * 10 + i),
      pool: 'agents',
      class: 'agent',
      labels: {},
    })),
  );
  writeFileSync(inventoryPath, stringify(doc));
  return { dir, fleet, inventoryPath, agentIds };
}

function agentDir(dir: string, id: string) {
  return join(dir, 'agents', id);
}

describe('rollouts over agent devices (twin side)', () => {
  it('a mixed phased rollout: SSH and agent devices, one budget, one trail; an offline agent converges after completion', async () => {
    const { dir, fleet, inventoryPath, agentIds } = await setup(3, 4);
    const [offline, ...online] = agentIds as [string, ...string[]];
    for (const id of online) agents.push(startTwinAgent(real.env.client, real.worker.taskQueue, id, agentDir(dir, id)));
    await until(
      'every online agent seen by its twin',
      async () =>
        (await Promise.all(online.map((id) => readTwin(real.env.client, id)))).every((v) => v?.lastSeenAt)
          ? true
          : undefined,
      60_000,
    );
    const input = rolloutInputFor(
      dir,
      {
        gate: '1s',
        phases: [
          { canary: '1 device', healthGate: ['devices-online', 'all-runtimes-healthy'] },
          { bulk: 'remainder', healthGate: ['devices-online', 'all-runtimes-healthy'] },
        ],
      },
      inventoryPath,
      `rollout:agent-mixed-${n}`,
    );
    const handle = await real.start(input);
    const result = await handle.result();
    await recordHistory(handle, 'agent-mixed-offline-converge');
    await recordHistory(handle, 'agent-converge-offline-only');
    expect(result.state).toBe('completed');
    for (const d of fleet.devices) expect(markerOf(fleet, d.id)).toBe(2);
    for (const id of online) {
      expect(result.devices.find((d) => d.id === id)).toMatchObject({ state: 'applied' });
      expect(markerIn(agentDir(dir, id), 'demo')).toBe(2);
      expect(appliesIn(agentDir(dir, id))).toHaveLength(1);
    }
    expect(result.devices.find((d) => d.id === offline)).toMatchObject({ state: 'skipped' });
    expect(result.counts.applied).toBe(3 + online.length);
    // The skipped agent keeps the completed revision as desired state: started now, it converges.
    const view = await readTwin(real.env.client, offline);
    expect(view?.desired.demo).toMatchObject({
      revision: 2,
      requestId: `${input.rolloutId}:${(await handle.describe()).runId}:converge:${offline}`,
    });
    agents.push(startTwinAgent(real.env.client, real.worker.taskQueue, offline, agentDir(dir, offline)));
    await until(
      'the offline agent converged',
      async () => (markerIn(agentDir(dir, offline), 'demo') === 2 ? true : undefined),
      60_000,
    );
    await until(
      'its report on the twin',
      async () =>
        (await readTwin(real.env.client, offline))?.report?.profiles.demo?.state === 'applied' ? true : undefined,
      30_000,
    );
    expect(appliesIn(agentDir(dir, offline))).toHaveLength(1);

    // A device enrolled after the rollout completed converges to its revision (the latest completed rollout of the profile).
    const late = parseInventory(
      { devices: [{ id: `late-${n}`, transport: 'agent', agentKey: agentKey(99), pool: 'agents' }] },
      'late',
    ).devices[0]!;
    const asked = await until(
      'the completed rollout listed',
      async () => {
        const found = await latestCompletedRollout(real.env.client, 'demo');
        return found?.workflowId === input.rolloutId ? found : undefined;
      },
      60_000,
    );
    expect(asked.workflowId).toBe(input.rolloutId);
    expect(
      await convergeEnrolledDevice(real.env.client, real.worker.taskQueue, late, [{ name: 'demo', scope: {} }]),
    ).toEqual(['demo']);
    agents.push(startTwinAgent(real.env.client, real.worker.taskQueue, late.id, agentDir(dir, late.id)));
    await until(
      'the late device converged',
      async () => (markerIn(agentDir(dir, late.id), 'demo') === 2 ? true : undefined),
      60_000,
    );
    expect((await readTwin(real.env.client, late.id))?.desired.demo).toMatchObject({
      revision: 2,
      rollout: input.rolloutId,
      requestId: `${input.rolloutId}:${asked.runId}:converge:${late.id}`,
    });
    // Asked again (a second first sync): it is desired already, nothing changes.
    expect(
      await convergeEnrolledDevice(real.env.client, real.worker.taskQueue, late, [{ name: 'demo', scope: {} }]),
    ).toEqual([]);
  }, 300_000);

  it('a canary health-gate failure on an agent device rolls back only the canary', async () => {
    const { dir, inventoryPath, agentIds } = await setup(1, 4);
    // Every agent's runtime check fails at revision 2: whichever device is the canary fails its gate.
    for (const id of agentIds)
      agents.push(
        startTwinAgent(real.env.client, real.worker.taskQueue, id, agentDir(dir, id), { health: (rev) => rev !== 2 }),
      );
    await until(
      'every agent seen',
      async () =>
        (await Promise.all(agentIds.map((id) => readTwin(real.env.client, id)))).every((v) => v?.lastSeenAt)
          ? true
          : undefined,
      60_000,
    );
    const input = rolloutInputFor(
      dir,
      {
        gate: '1s',
        canaryClass: 'agent',
        phases: [{ canary: '1 device', healthGate: ['all-runtimes-healthy'] }, { bulk: 'remainder' }],
      },
      inventoryPath,
      `rollout:agent-canary-${n}`,
    );
    const handle = await real.start(input);
    const result = await handle.result();
    await recordHistory(handle, 'agent-canary-health-fail');
    expect(result.state).toBe('rolled-back');
    const canary = result.devices.find((d) => d.phase === 0)!.id;
    expect(agentIds).toContain(canary);
    expect(result.devices.find((d) => d.id === canary)).toMatchObject({ state: 'rolled-back' });
    expect(markerIn(agentDir(dir, canary), 'demo')).toBe(1);
    expect(appliesIn(agentDir(dir, canary)).map((l) => l.split(' ')[1])).toEqual(['r2', 'r1']);
    for (const id of agentIds.filter((x) => x !== canary)) {
      expect(appliesIn(agentDir(dir, id))).toEqual([]);
      expect((await readTwin(real.env.client, id))?.desired.demo).toBeUndefined();
    }
  }, 300_000);

  it("a cancel (the Web UI's Request Cancellation) puts the changed agent device back", async () => {
    const { dir, inventoryPath, agentIds } = await setup(1, 2);
    for (const id of agentIds)
      agents.push(startTwinAgent(real.env.client, real.worker.taskQueue, id, agentDir(dir, id)));
    await until(
      'the agents seen',
      async () =>
        (await Promise.all(agentIds.map((id) => readTwin(real.env.client, id)))).every((v) => v?.lastSeenAt)
          ? true
          : undefined,
      60_000,
    );
    const input = rolloutInputFor(
      dir,
      { gate: '1s', canaryClass: 'agent', phases: [{ canary: '1 device', gate: '5m' }, { bulk: 'remainder' }] },
      inventoryPath,
      `rollout:agent-cancel-${n}`,
    );
    const handle = await real.start(input);
    const canary = await until(
      'the canary applied',
      async () => {
        const s = await handle.query<{ devices: Array<{ id: string; phase?: number; state: string }> }>('status');
        return s.devices.find((d) => d.phase === 0 && d.state === 'applied')?.id;
      },
      120_000,
    );
    await handle.cancel();
    await expect(handle.result()).rejects.toThrow();
    await until(
      'the canary back on r1',
      async () => (markerIn(agentDir(dir, canary), 'demo') === 1 ? true : undefined),
      60_000,
    );
    expect(appliesIn(agentDir(dir, canary)).map((l) => l.split(' ')[1])).toEqual(['r2', 'r1']);
    for (const id of agentIds.filter((x) => x !== canary)) expect(appliesIn(agentDir(dir, id))).toEqual([]);
  }, 300_000);

  it('an agent refusal fails the device as EnvelopeRejected, nothing applied', async () => {
    const { dir, inventoryPath, agentIds } = await setup(1, 1);
    const [id] = agentIds as [string];
    agents.push(
      startTwinAgent(real.env.client, real.worker.taskQueue, id, agentDir(dir, id), { refuse: () => 'UNPINNED_KEY' }),
    );
    await until(
      'the agent seen',
      async () => ((await readTwin(real.env.client, id))?.lastSeenAt ? true : undefined),
      60_000,
    );
    const input = rolloutInputFor(
      dir,
      { gate: '1s', maxFailureRatio: 1, phases: [{ bulk: 'remainder' }] },
      inventoryPath,
      `rollout:agent-refused-${n}`,
    );
    const result = await (await real.start(input)).result();
    const row = result.devices.find((d) => d.id === id)!;
    expect(row.state).toBe('failed');
    expect(row.reason).toMatch(/EnvelopeRejected \(UNPINNED_KEY\)/);
    expect(appliesIn(agentDir(dir, id))).toEqual([]);
    // The refusal is in the audit trail too: the phase's per-device record names it.
    const records = readAuditFile(real.auditDir, input.rolloutId).filter((r) => r.event === 'devices.outcome');
    const audited = records
      .flatMap((r) => (r.evidence as { devices: Array<{ id: string; state: string; reason?: string }> }).devices)
      .find((d) => d.id === id);
    expect(audited).toMatchObject({
      state: 'failed',
      reason: expect.stringMatching(/EnvelopeRejected \(UNPINNED_KEY\)/),
    });
  }, 300_000);

  it("through the gateway's views, each agent device's apply is completed by the gateway from the report it writes, and the twins stamp no reported change", async () => {
    const { dir, inventoryPath, agentIds } = await setup(1, 3);
    const [refusing, ...applying] = agentIds as [string, ...string[]];
    const since = Date.now() - 1_000;
    const views = new DeviceViews({ client: real.env.client, taskQueue: real.worker.taskQueue, feedIntervalMs: 200 });
    agents.push({ stop: () => views.close() });
    for (const id of agentIds)
      agents.push(
        startTwinAgent(real.env.client, real.worker.taskQueue, id, agentDir(dir, id), {
          views,
          ...(id === refusing ? { refuse: () => 'UNPINNED_KEY' } : {}),
        }),
      );
    await until(
      'every agent has a twin',
      async () =>
        (await Promise.all(agentIds.map((id) => readTwin(real.env.client, id)))).every((v) => v !== null)
          ? true
          : undefined,
      60_000,
    );
    const input = rolloutInputFor(
      dir,
      { gate: '1s', maxFailureRatio: 1, phases: [{ bulk: 'remainder' }] },
      inventoryPath,
      `rollout:agent-delivered-${n}`,
    );
    const result = await (await real.start(input)).result();
    for (const id of applying) {
      expect(result.devices.find((d) => d.id === id)).toMatchObject({ state: 'applied' });
      expect(markerIn(agentDir(dir, id), 'demo')).toBe(2);
    }
    // The refusal reaches the rollout as the worker would have put it: EnvelopeRejected, with the agent's reason.
    const refused = result.devices.find((d) => d.id === refusing)!;
    expect(refused.state).toBe('failed');
    expect(refused.reason).toMatch(/EnvelopeRejected \(UNPINNED_KEY\)/);
    // Every answer went to its apply from the gateway, none was lost or failed.
    expect(views.stats().answers).toMatchObject({ delivered: agentIds.length, failed: 0 });
    // The reports were all delivered by the gateway: no twin stamped a reported change for the feed.
    const stamped = (await listTwinChanges(real.env.client, 'reported', since)).map((c) => c.deviceId);
    for (const id of agentIds) expect(stamped).not.toContain(id);
    await recordHistory(real.env.client.workflow.getHandle(twinWorkflowId(applying[0]!)), 'twin-answers-delivered');
  }, 300_000);
});
