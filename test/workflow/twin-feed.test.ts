import { describe, expect, it } from 'vitest';
import { reportDigest, twinWorkflowId, type AgentReport } from '../../core/twin';
import { desireOnTwin, readTwin, readTwinRecord, reportToTwin, reverifyTwin } from '../../clients/twin';
import { listTwinChanges } from '../../clients/twin-feed';
import { readSeen } from '../../clients/presence';
import { DeviceViews } from '../../gateway/views';
import { realRollouts } from '../support/real-rollouts';
import { until } from '../support/until';
import { recordHistory } from '../support/histories';
import { desiredRequest } from '../support/twin-agent';

/**
 * The twin change feed and the gateway's device views on a real dev server with a real worker: a twin stamps its
 * desired and reported changes as search attributes that one list call finds; the gateway answers idle syncs from
 * its own memory (the twin's history does not move over thousands of them), writes a report to the twin only when
 * what it says changed, and the device's presence reaches readers through the presence shards.
 */
const real = realRollouts('twin-feed');

const report = (revision: number, requestId?: string, ok = true): AgentReport => ({
  profiles: { demo: { revision, state: 'applied', ...(requestId ? { requestId } : {}), at: '2026-12-05T00:00:00Z' } },
  health: [{ name: 'motd', ok, kind: 'runtime' }],
  healthAt: new Date().toISOString(),
  agentVersion: 'test',
});

/** Wait until `probe` holds (until() takes any value but undefined as an answer, false included). */
const when = (what: string, probe: () => Promise<boolean>) => until(what, async () => (await probe()) || undefined);

async function historyLength(device: string): Promise<number> {
  return (await real.env.client.workflow.getHandle(twinWorkflowId(device)).describe()).historyLength;
}

describe('the twin change feed', () => {
  it('a desire, a report and a re-verify each stamp the twin; one list call finds them, newest per device', async () => {
    const device = 'feed-a';
    const since = Date.now() - 1_000;
    // The gateway's first write for a device starts its twin.
    await reportToTwin(real.env.client, real.worker.taskQueue, device, { report: report(1), knownVersion: 0 });
    await when('the first report is in the reported feed', async () =>
      (await listTwinChanges(real.env.client, 'reported', since)).some((c) => c.deviceId === device),
    );
    expect((await listTwinChanges(real.env.client, 'desired', since)).map((c) => c.deviceId)).not.toContain(device);

    await desireOnTwin(real.env.client, real.worker.taskQueue, device, desiredRequest(device, 2));
    await when('the desire is in the desired feed with version 1', async () => {
      const change = (await listTwinChanges(real.env.client, 'desired', since)).find((c) => c.deviceId === device);
      return change?.version === 1;
    });
    const requestId = (await readTwinRecord(real.env.client, device))!.desired.demo!.requestId;
    const reportedBefore = (await listTwinChanges(real.env.client, 'reported', since)).find(
      (c) => c.deviceId === device,
    )!;
    await reportToTwin(real.env.client, real.worker.taskQueue, device, {
      report: report(2, requestId),
      knownVersion: 1,
    });
    await when('the answer moves the reported stamp', async () => {
      const change = (await listTwinChanges(real.env.client, 'reported', since)).find((c) => c.deviceId === device);
      return change !== undefined && change.atMs > reportedBefore.atMs;
    });
    expect((await readTwinRecord(real.env.client, device))!.report!.profiles.demo).toMatchObject({
      revision: 2,
      requestId,
    });

    expect(await reverifyTwin(real.env.client, device)).toBe(true);
    await when('the re-verify request is a desired change (version 2)', async () => {
      const change = (await listTwinChanges(real.env.client, 'desired', since)).find((c) => c.deviceId === device);
      return change?.version === 2;
    });
    // A report knowing version 2 answers the re-verify.
    await reportToTwin(real.env.client, real.worker.taskQueue, device, {
      report: report(2, requestId),
      knownVersion: 2,
    });
    await when('re-verify answered', async () => (await readTwinRecord(real.env.client, device))!.reverify === false);
    await recordHistory(real.env.client.workflow.getHandle(twinWorkflowId(device)), 'twin-feed-desire-report-reverify');
    // Nothing later than now is listed.
    expect(await listTwinChanges(real.env.client, 'desired', Date.now() + 60_000)).toEqual([]);
  });
});

describe('asking again', () => {
  it('the same desire again stamps the twin anew (same version): a gateway that missed the first stamp sees this one', async () => {
    const device = 'feed-again';
    const since = Date.now() - 1_000;
    await desireOnTwin(real.env.client, real.worker.taskQueue, device, desiredRequest(device, 2));
    let first: number | undefined;
    await when('the first stamp', async () => {
      const change = (await listTwinChanges(real.env.client, 'desired', since)).find((c) => c.deviceId === device);
      first = change?.atMs;
      return change?.version === 1;
    });
    await new Promise((r) => setTimeout(r, 50));
    await desireOnTwin(real.env.client, real.worker.taskQueue, device, desiredRequest(device, 2));
    await when('a later stamp of the same version', async () => {
      const change = (await listTwinChanges(real.env.client, 'desired', since)).find((c) => c.deviceId === device);
      return change !== undefined && change.atMs > first! && change.version === 1;
    });
    expect((await readTwinRecord(real.env.client, device))!.version).toBe(1);
  });
});

describe("the gateway's device views", () => {
  it('3,000 idle syncs leave the twin untouched; a changed report is written; presence makes the device seen', async () => {
    const device = 'views-idle';
    const views = new DeviceViews({
      client: real.env.client,
      taskQueue: real.worker.taskQueue,
      presenceFlushMs: 3_600_000,
    });
    try {
      await views.sync(device, { report: report(1), knownVersion: 0, waitMs: 0 });
      // Read first: a query waits for the signal's workflow task to complete, so the history is settled.
      const seenBefore = (await readTwinRecord(real.env.client, device))!.lastSeenAt;
      const before = await historyLength(device);
      for (let i = 0; i < 3_000; i++) {
        // Only when the health ran changes between these syncs: nothing the control plane needs to hear.
        await views.sync(device, { report: report(1), knownVersion: 0, waitMs: 0 });
      }
      expect(await historyLength(device)).toBe(before);
      expect(views.stats()).toMatchObject({ forwards: 1, seenMarks: 3_000, reads: 1 });

      // The seen marks reach the presence shard in one write; a reader sees the device as seen then, and the
      // report as fresh (the device kept reporting what the twin holds).
      await views.flushSeen();
      const seen = (await readSeen(real.env.client, [device])).get(device)!;
      expect(seen.digest).toBe(reportDigest(report(1)));
      const merged = (await readTwin(real.env.client, device))!;
      expect(Date.parse(merged.lastSeenAt!)).toBeGreaterThan(Date.parse(seenBefore!));
      expect(merged.lastSeenAt).toBe(seen.at);
      expect(merged.report!.healthAt).toBe(seen.at);

      // A health verdict that changes is news: written at once.
      await views.sync(device, { report: report(1, undefined, false), knownVersion: 0, waitMs: 0 });
      expect(await historyLength(device)).toBeGreaterThan(before);
      expect((await readTwinRecord(real.env.client, device))!.report!.health[0]!.ok).toBe(false);
      expect(views.stats().forwards).toBe(2);
    } finally {
      await views.close();
    }
  });

  it('a device seen but with no twin reads as an empty twin, seen when it was', async () => {
    const device = 'views-seen-only';
    const views = new DeviceViews({ client: real.env.client, taskQueue: real.worker.taskQueue });
    try {
      // A sync with no report: nothing to write, so no twin; the sighting still reaches its presence shard.
      await views.sync(device, { report: null, knownVersion: 0, waitMs: 0 });
      expect(await readTwinRecord(real.env.client, device)).toBeNull();
      await views.flushSeen();
      const seen = await readTwin(real.env.client, device);
      expect(seen).toMatchObject({ deviceId: device, version: 0, desired: {}, report: null });
      expect(seen!.lastSeenAt).not.toBeNull();
    } finally {
      await views.close();
    }
  });

  it('a held long-poll is answered when the twin change feed shows a new desired version, well before its wait', async () => {
    const device = 'views-wake';
    const views = new DeviceViews({ client: real.env.client, taskQueue: real.worker.taskQueue, feedIntervalMs: 200 });
    try {
      await views.sync(device, { report: report(1), knownVersion: 0, waitMs: 0 });
      const started = Date.now();
      const held = views.sync(device, { report: report(1), knownVersion: 0, waitMs: 30_000 });
      await when('the long-poll is held in the gateway', async () => views.stats().held === 1);
      await desireOnTwin(real.env.client, real.worker.taskQueue, device, desiredRequest(device, 2));
      const view = await held;
      const tookMs = Date.now() - started;
      expect(view.version).toBe(1);
      expect(view.desired.demo).toMatchObject({ revision: 2 });
      expect(tookMs).toBeLessThan(20_000);
      // The change moved the version: the gateway read the twin again (its first sync, then this change).
      expect(views.stats()).toMatchObject({ held: 0, feedChanges: 1, reads: 2 });
      // Another device desiring the same revision, read from its twin: both records hold ONE copy of the steps.
      const other = 'views-wake-other';
      await desireOnTwin(real.env.client, real.worker.taskQueue, other, desiredRequest(other, 2));
      const otherView = await views.sync(other, { report: report(1), knownVersion: 0, waitMs: 0 });
      expect(otherView.desired.demo!.steps).toEqual(view.desired.demo!.steps);
      expect(otherView.desired.demo!.steps).toBe((await views.view(device)).desired.demo!.steps);
    } finally {
      await views.close();
    }
  });
});
