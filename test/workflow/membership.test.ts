import { beforeAll, describe, expect, it } from 'vitest';
import { temporal } from '@temporalio/proto';
import { MockActivityEnvironment } from '@temporalio/testing';
import { DefaultLogger } from '@temporalio/worker';
import { createActivities, type SnapshotPage } from '../../activities';
import { storeMembership } from '../../clients/membership';
import { parseInventory } from '../../core/inventory';
import { membershipPages, membershipWorkflowId, type MembershipRef } from '../../core/membership';
import { realRollouts } from '../support/real-rollouts';
import { join } from 'node:path';
import { HISTORY_EVENT_LIMIT } from '../support/history-bounds';
import { parseRolloutSpec } from '../../core/spec';
import { rolloutInputFromFiles } from '../../intake/prepare';
import { demoDevices, fleetInventory, startFleet } from '../../sim';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { rolloutWorkflow } from '../../workflows/rollout';

/**
 * The membership entity on a real dev server with a real worker: a 10,000-device inventory uploaded by
 * the CLI's own code, page by page, sealed, then snapshotted by the real snapshotFleet activity through
 * the client (no file anywhere). The entity's history is measured against Temporal's limits: each
 * payload far under 2 MB, the whole history far under the 50 MB limit (and under the 10 MB warning).
 */
const DEVICES = 10_000;
const real = realRollouts('membership');
let ref: MembershipRef;
const quiet = new DefaultLogger('ERROR');

/** 10,000 devices: every other one left-behind, the rest held by a node-down verdict the CLI judged — none is contacted. */
function bigInventory() {
  return parseInventory(
    {
      pools: { east: { disruptionBudget: 0.05 }, west: { disruptionBudget: 0.05 } },
      defaults: {
        user: 'ops',
        port: 22,
        class: 'edge',
        os: 'linux',
        ssh: { key: '/etc/wavegate/keys/id_ed25519', hostKey: `SHA256:${'A'.repeat(43)}` },
      },
      devices: Array.from({ length: DEVICES }, (_, i) => ({
        id: `edge-${String(i).padStart(5, '0')}`,
        host: `10.${Math.floor(i / 65_536)}.${Math.floor(i / 256) % 256}.${i % 256}`,
        pool: i % 2 ? 'east' : 'west',
        labels: { site: `site-${i % 40}`, fleet: 'edge' },
        ...(i % 2 ? { updateClass: 'left-behind' } : {}),
      })),
    },
    'generated',
  );
}
const inventory = bigInventory();
const marks = new Map(
  inventory.devices
    .filter((_, i) => i % 2 === 0)
    .map((d) => [d.id, { holds: true, text: `node-down since 2026-01-01T00:00:00Z: ${d.id} is down` }]),
);

async function historyOf(workflowId: string) {
  const history = await real.env.client.workflow.getHandle(workflowId).fetchHistory();
  const events = history.events ?? [];
  const sizes = events.map((e) => temporal.api.history.v1.HistoryEvent.encode(e).finish().length);
  return {
    events,
    largestEvent: Math.max(...sizes),
    bytes: temporal.api.history.v1.History.encode(history).finish().length,
  };
}

beforeAll(async () => {
  ref = await storeMembership(real.env.client, real.worker.taskQueue, inventory, 'generated (test)', marks);
}, 240_000);

describe('membership entity', () => {
  it('stores 10,000 devices in 10 pages within Temporal payload and history limits', async () => {
    expect(ref).toMatchObject({ workflowId: membershipWorkflowId(ref.digest), devices: DEVICES, pages: 10 });
    expect(ref.digest).toBe(membershipPages(inventory, marks).digest);
    const { events, largestEvent, bytes } = await historyOf(ref.workflowId);
    console.log(
      `membership of ${DEVICES} devices: ${events.length} events, ${bytes} bytes of history, largest event ${largestEvent} bytes`,
    );
    // One update per page and one seal: a workflow task and the update's accepted/completed events each.
    expect(events.length).toBeLessThan(80);
    expect(largestEvent).toBeLessThan(1_000_000); // each page's update: far under the 2 MB payload limit
    expect(bytes).toBeLessThan(10 * 1024 * 1024); // the server warns at 10 MB, refuses at 50 MB
  });

  it('storing the same content again reuses the sealed entity and writes nothing', async () => {
    const before = (await historyOf(ref.workflowId)).events.length;
    expect(await storeMembership(real.env.client, real.worker.taskQueue, inventory, 'generated (test)', marks)).toEqual(
      ref,
    );
    expect((await historyOf(ref.workflowId)).events.length).toBe(before);
  });

  it('refuses a page after the seal and a forged page in the validator, leaving no trace in history', async () => {
    const small = parseInventory(
      {
        defaults: { user: 'u', port: 22, pool: 'p', class: 'c', os: 'linux' },
        devices: [
          { id: 'a', host: '10.9.9.1' },
          { id: 'b', host: '10.9.9.2' },
        ],
      },
      'small',
    );
    const { pages, digest } = membershipPages(small);
    const id = membershipWorkflowId(digest);
    await real.env.client.workflow.start('membershipWorkflow', {
      workflowId: id,
      taskQueue: real.worker.taskQueue,
      args: [{ digest, devices: 2, pages: 1, source: 'small' }],
    });
    const handle = real.env.client.workflow.getHandle(id);
    const forged = { ...pages[0]!, devices: pages[0]!.devices.map((d) => ({ ...d, host: '203.0.113.66' })) };
    await expect(handle.executeUpdate('storePage', { args: [forged] })).rejects.toMatchObject({
      cause: { type: 'MembershipRefused', message: expect.stringMatching(/^digest: page 0's content hashes to/) },
    });
    await expect(handle.executeUpdate('seal', { args: [] })).rejects.toMatchObject({
      cause: { message: 'pages: 0 of 1 stored' },
    });
    await handle.executeUpdate('storePage', { args: [pages[0]] });
    await handle.executeUpdate('seal', { args: [] });
    await expect(handle.executeUpdate('storePage', { args: [pages[0]] })).rejects.toMatchObject({
      cause: { message: expect.stringMatching(/^sealed: a membership never changes/) },
    });
    // The two accepted updates only: no refused one reached history, nor the forged content.
    const { events } = await historyOf(id);
    expect(events.filter((e) => e.workflowExecutionUpdateAcceptedEventAttributes).length).toBe(2);
    expect(
      JSON.stringify(
        events.map((e) =>
          e.workflowExecutionUpdateAcceptedEventAttributes?.acceptedRequest?.input?.args?.payloads?.map((p) =>
            Buffer.from(p.data!).toString(),
          ),
        ),
      ),
    ).not.toContain('203.0.113.66');
    expect(await handle.query('page', 0)).toMatchObject({ index: 0, digest: pages[0]!.digest });
  });

  it('snapshotFleet reads all 10,000 from the entity through the client, page by page, with the stored node-down standings', async () => {
    const acts = createActivities({ client: real.env.client, auditDir: real.dir });
    const activityEnv = new MockActivityEnvironment(undefined, { logger: quiet });
    const seen: string[] = [];
    for (let offset = 0; offset < DEVICES; offset += 1_000) {
      const page: SnapshotPage = await activityEnv.run(acts.snapshotFleet, {
        membership: ref,
        profile: 'demo',
        scope: { fleet: 'edge' },
        offset,
        limit: 1_000,
      });
      expect(page.total).toBe(DEVICES);
      expect(page.devices).toHaveLength(1_000);
      // A snapshot page's result is one payload in the rollout's history: well under 2 MB.
      expect(JSON.stringify(page).length).toBeLessThan(1_000_000);
      seen.push(...page.devices.map((d) => d.id));
      for (const d of page.devices) {
        expect(d.reachable).toBe(false);
        expect(d.error).toBe(
          d.updateClass === 'left-behind' ? 'left-behind: not contacted' : 'node-down: not contacted',
        );
        if (d.updateClass !== 'left-behind')
          expect(d.nodeDown).toEqual({ holds: true, text: `node-down since 2026-01-01T00:00:00Z: ${d.id} is down` });
      }
    }
    expect(seen).toEqual(inventory.devices.map((d) => d.id));
    const scoped: SnapshotPage = await activityEnv.run(acts.snapshotFleet, {
      membership: ref,
      profile: 'demo',
      scope: { site: 'site-3' },
      offset: 0,
      limit: 1_000,
    });
    expect(scoped.total).toBe(DEVICES / 40);
  }, 120_000);

  it('a real rollout over the 10,000-device membership (plus 2 simulated devices) completes; every history within limits', async () => {
    const fleet = await startFleet({ devices: demoDevices(2), dir: join(real.dir, 'fleet') });
    try {
      const sim = fleetInventory(fleet, { budgets: { 'pool-a': 0.5, 'pool-b': 0.5 } });
      const big = bigInventory();
      const doc = {
        pools: { ...sim.pools, east: { disruptionBudget: 0.05 }, west: { disruptionBudget: 0.05 } },
        devices: [
          ...sim.devices.map((d) => ({ ...d, user: sim.defaults.user, ssh: { ...d.ssh, key: sim.defaults.ssh.key } })),
          ...big.devices,
        ],
      };
      const inv = parseInventory(doc, 'generated+sim');
      const spec = parseRolloutSpec(
        {
          rollout: {
            profile: 'demo',
            fromRevision: 1,
            toRevision: 2,
            phases: [{ canary: '1 device' }, { bulk: 'remainder' }],
            gate: '1s',
          },
        },
        'membership spec',
      );
      const input = rolloutInputFromFiles({
        spec,
        specSource: 'membership spec',
        inventory: inv,
        inventoryPath: 'generated+sim',
        profilesRoot: join(PROJECT_ROOT, 'profiles'),
        startedBy: 'test',
        rolloutId: 'rollout:membership-10k',
      });
      const membership = await storeMembership(real.env.client, real.worker.taskQueue, inv, 'generated+sim', marks);
      const handle = await real.env.client.workflow.start(rolloutWorkflow, {
        workflowId: input.rolloutId,
        taskQueue: real.worker.taskQueue,
        args: [{ ...input, membership }],
      });
      const status = await handle.result();
      expect(status.state).toBe('completed');
      expect(
        status.devices
          .filter((d) => d.state === 'applied')
          .map((d) => d.id)
          .sort(),
      ).toEqual(fleet.devices.map((d) => d.id).sort());
      expect(status.devices.length).toBe(DEVICES + 2);
      // Every payload passed the server's 2 MB blob limit (a larger one fails the workflow task, and the
      // rollout would not have completed); the history's size and length from the server itself.
      const described = await handle.describe();
      console.log(
        `rollout over ${DEVICES + 2} members: ${described.historyLength} events, ${described.historySize} bytes of history`,
      );
      expect(described.historyLength).toBeLessThan(HISTORY_EVENT_LIMIT);
      expect(described.historySize).toBeLessThan(10 * 1024 * 1024); // the server warns at 10 MB, refuses at 50 MB
    } finally {
      await fleet.stop();
    }
  }, 300_000);

  it('a membership larger than a volume is stored as one entity per volume and read back whole by the snapshot; a volume that is not its digest is refused', async () => {
    const acts = createActivities({ client: real.env.client, auditDir: real.dir });
    const activityEnv = new MockActivityEnvironment(undefined, { logger: quiet });
    const small = { devices: inventory.devices.slice(0, 2_500) };
    // Volumes of one page each here (MAX_VOLUME_PAGES in production): three entities for three pages.
    const volumed = await storeMembership(real.env.client, real.worker.taskQueue, small, 'volumes (test)', marks, {
      pages: 1,
      bytes: 8_000_000,
    });
    expect(volumed).toMatchObject({ devices: 2_500, pages: 3, digest: membershipPages(small, marks).digest });
    expect(volumed.volumes?.map((v) => [v.devices, v.pages])).toEqual([
      [1_000, 1],
      [1_000, 1],
      [500, 1],
    ]);
    expect(volumed.workflowId).toBe(volumed.volumes![0]!.workflowId);
    for (const v of volumed.volumes!) {
      expect(v.workflowId).toBe(membershipWorkflowId(v.digest));
      expect(
        (await real.env.client.workflow.getHandle(v.workflowId).query<{ sealed: boolean }>('progress')).sealed,
      ).toBe(true);
    }
    // Stored again (an interrupted start re-run): the same sealed entities, the same ref.
    expect(
      await storeMembership(real.env.client, real.worker.taskQueue, small, 'volumes (test)', marks, {
        pages: 1,
        bytes: 8_000_000,
      }),
    ).toEqual(volumed);
    const page: SnapshotPage = await activityEnv.run(acts.snapshotFleet, {
      membership: volumed,
      profile: 'demo',
      scope: {},
      offset: 0,
      limit: 3_000,
    });
    expect(page.total).toBe(2_500);
    expect(page.devices.map((d) => d.id)).toEqual(small.devices.map((d) => d.id));
    // Volumes swapped: each volume is sealed and whole, but the pages in this order are not the membership.
    const swapped = { ...volumed, volumes: [volumed.volumes![1]!, volumed.volumes![0]!, volumed.volumes![2]!] };
    swapped.workflowId = swapped.volumes[0]!.workflowId;
    const fresh = () => createActivities({ client: real.env.client, auditDir: real.dir });
    const refusal = (ref: MembershipRef) =>
      new MockActivityEnvironment(undefined, { logger: quiet }).run(fresh().snapshotFleet, {
        membership: ref,
        profile: 'demo',
        scope: {},
        offset: 0,
        limit: 10,
      });
    await expect(refusal(swapped)).rejects.toMatchObject({
      type: 'MembershipMismatch',
      nonRetryable: true,
      message: expect.stringMatching(/digest .* is not the rollout's/),
    });
    // A volume named with another digest than its entity holds.
    const forged = {
      ...volumed,
      volumes: volumed.volumes!.map((v, i) => (i === 2 ? { ...v, digest: 'd'.repeat(64) } : v)),
    };
    await expect(refusal(forged)).rejects.toMatchObject({
      type: 'MembershipMismatch',
      message: expect.stringMatching(/is not the rollout's dddddddddddd/),
    });
    // Volumes that do not add up to the ref are refused before anything is read.
    await expect(refusal({ ...volumed, devices: 2_501 })).rejects.toMatchObject({
      type: 'MembershipMismatch',
      message: expect.stringMatching(/volumes: 2500 devices in all, the membership names 2501/),
    });
  }, 120_000);

  it('a rollout naming another digest than the entity holds is refused at snapshot (MembershipMismatch, not retried)', async () => {
    const acts = createActivities({ client: real.env.client, auditDir: real.dir });
    const wrong = { ...ref, digest: 'e'.repeat(64) };
    await expect(
      new MockActivityEnvironment(undefined, { logger: quiet }).run(acts.snapshotFleet, {
        membership: wrong,
        profile: 'demo',
        scope: {},
        offset: 0,
        limit: 10,
      }),
    ).rejects.toMatchObject({
      type: 'MembershipMismatch',
      nonRetryable: true,
      message: expect.stringMatching(/is not the rollout's eeeeeeeeeeee/),
    });
  });
});
