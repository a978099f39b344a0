import { describe, expect, it } from 'vitest';
import { requestIdOf, TWIN_RUN_EVENTS, twinWorkflowId, type AgentReport, type TwinView } from '../../core/twin';
import { askTwin, desireOnTwin, readTwin, reportToTwin, reverifyTwin } from '../../clients/twin';
import { WavegateReportedAt } from '../../contracts/search-attributes';
import { temporal } from '@temporalio/proto';
import { reverifyFleet } from '../../device/fleet';
import { parseInventory } from '../../core/inventory';
import { applyThroughTwin, desiredRequestOf } from '../../device/twin/apply';
import { twinSyncUpdate } from '../../contracts/twin';
import { realRollouts } from '../support/real-rollouts';
import { until } from '../support/until';
import { recordHistory } from '../support/histories';
import { desiredRequest, syncBeforeR11 } from '../support/twin-agent';
import { agentKeyPin } from '../../core/agent-auth';
import { agentReceiptClaim } from '../../core/agent-receipt';
import { RECEIPT_GENESIS, receiptText, signAgentReceipt } from '../../core/receipt';
import { keyPairFromSeed, signRevision } from '../../core/signing';
import type { Revision } from '../../core/revision';
import { EnvelopeRejected } from '../../device/apply-errors';
import { applyFailureOf } from '../../device/apply-failure';

/**
 * The device twin `device:<id>` on a real dev server with a real worker: desired state by signal,
 * the agent's long-poll sync by update (answered at once on news, else after waitMs), validation in
 * the validator (nothing in history), and continue-as-new keeping the history bounded over 3,000
 * syncs with the state carried.
 */
const real = realRollouts('device-twin');

const report = (revision: number, requestId?: string): AgentReport => ({
  profiles: { demo: { revision, state: 'applied', ...(requestId ? { requestId } : {}), at: new Date().toISOString() } },
  health: [],
  healthAt: null,
  agentVersion: 'test',
});

/** An agent device as the rollout's apply gets it. */
const target = (id: string) => ({
  id,
  host: '',
  port: 0,
  user: '',
  pool: 'p',
  class: 'c',
  transport: 'agent' as const,
  ssh: {},
});

function sync(
  device: string,
  input: { report: AgentReport | null; knownVersion: number; waitMs: number },
): Promise<TwinView> {
  return syncBeforeR11(real.env.client, real.worker.taskQueue, device, input);
}

describe('device twin workflow', () => {
  it('a desire by signal-with-start; a retried one changes nothing; a waiting sync answers at once on news', async () => {
    const device = 'twin-a';
    const first = await sync(device, { report: null, knownVersion: 0, waitMs: 0 });
    expect(first).toMatchObject({ deviceId: device, version: 0, desired: {}, report: null });
    expect(first.lastSeenAt).not.toBeNull();
    // A long-poll with nothing new waits; a desire arriving meanwhile answers it well before its waitMs.
    const started = Date.now();
    const waiting = sync(device, { report: null, knownVersion: 0, waitMs: 30_000 });
    await new Promise((r) => setTimeout(r, 500));
    await desireOnTwin(real.env.client, real.worker.taskQueue, device, desiredRequest(device, 2));
    const view = await waiting;
    expect(Date.now() - started).toBeLessThan(25_000);
    expect(view.version).toBe(1);
    expect(view.desired.demo).toMatchObject({ revision: 2, requestId: `rollout-${device}:run-1:1`, fromRevision: 1 });
    await desireOnTwin(real.env.client, real.worker.taskQueue, device, desiredRequest(device, 2));
    expect((await readTwin(real.env.client, device))!.version).toBe(1);
    // The agent reports; the view carries it.
    await sync(device, { report: report(2, view.desired.demo!.requestId), knownVersion: 1, waitMs: 0 });
    expect((await readTwin(real.env.client, device))!.report!.profiles.demo).toMatchObject({
      revision: 2,
      state: 'applied',
    });
    // Reverify: the version moves, the flag is set until a report knowing that version arrives.
    expect(await reverifyTwin(real.env.client, device)).toBe(true);
    const asked = await sync(device, { report: null, knownVersion: 1, waitMs: 10_000 });
    expect(asked).toMatchObject({ version: 2, reverify: true });
    await sync(device, { report: report(2), knownVersion: 2, waitMs: 0 });
    expect((await readTwin(real.env.client, device))!.reverify).toBe(false);
    await recordHistory(real.env.client.workflow.getHandle(twinWorkflowId(device)), 'device-twin-desire-sync-reverify');
    expect(await reverifyTwin(real.env.client, 'no-such-device')).toBe(false);
    expect(await readTwin(real.env.client, 'no-such-device')).toBeNull();
  });

  it('applyThroughTwin at first contact: offline for a never-seen agent, ahead for one reporting above the target; nothing asked of either', async () => {
    const holder = { rollout: 'rollout:first-contact', run: 'run-1', activity: '3', attempt: 1 };
    const steps = { profile: 'demo', revision: 2, apply: 'true', verify: 'true', payload: [] };
    const opts = { client: real.env.client, taskQueue: real.worker.taskQueue, holder, rollout: holder.rollout };
    expect(await applyThroughTwin(target('never-seen'), steps, { ...opts, reportOffline: true })).toMatchObject({
      outcome: 'offline',
      steps: [],
      detail: 'agent not syncing (never seen): nothing asked of it',
    });
    expect(await readTwin(real.env.client, 'never-seen')).toBeNull();
    await sync('twin-ahead', { report: report(3), knownVersion: 0, waitMs: 0 });
    const ahead = real.env.client.workflow.getHandle(twinWorkflowId('twin-ahead'));
    const before = (await ahead.describe()).historyLength;
    expect(
      await applyThroughTwin(target('twin-ahead'), steps, { ...opts, reportOffline: true, aheadAbove: 2 }),
    ).toMatchObject({ outcome: 'ahead', detail: "the device is at revision 3 (its agent's last report), above r2" });
    expect((await readTwin(real.env.client, 'twin-ahead'))!.desired).toEqual({});
    // Decided by the twin's validator: an ask that asks nothing leaves nothing in its history.
    expect((await ahead.describe()).historyLength).toBe(before);
  });

  it("twinAsk: the checks and the desire in one update; offline by the asker's clock; a malformed ask refused, naming the field", async () => {
    const device = 'twin-ask';
    const holder = { rollout: 'rollout:ask', run: 'run-1', activity: '5', attempt: 1 };
    const steps = { profile: 'demo', revision: 2, apply: 'true', verify: 'true', payload: [] };
    const request = desiredRequestOf(steps, holder, holder.rollout, 1, true);
    await sync(device, { report: report(1), knownVersion: 0, waitMs: 0 });
    const handle = real.env.client.workflow.getHandle(twinWorkflowId(device));
    const before = (await handle.fetchHistory()).events!.length;
    const sentAt = new Date().toISOString();
    expect(await askTwin(real.env.client, device, { request: { ...request, sentAt }, reportOffline: true })).toEqual({
      kind: 'asked',
    });
    const view = (await readTwin(real.env.client, device))!;
    expect(view.version).toBe(1);
    expect(view.desired.demo).toMatchObject({ requestId: request.requestId, revision: 2, awaited: true, sentAt });
    // One update and its workflow task: no signal, no query; the feed's stamp in the same task.
    const added = (await handle.fetchHistory()).events!.slice(before).map((e) => String(e.eventType));
    expect(added).toEqual([
      String(temporal.api.enums.v1.EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED),
      String(temporal.api.enums.v1.EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED),
      String(temporal.api.enums.v1.EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED),
      String(temporal.api.enums.v1.EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED),
      String(temporal.api.enums.v1.EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES),
      String(temporal.api.enums.v1.EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED),
    ]);
    await recordHistory(handle, 'device-twin-ask');
    // A new request asked ten minutes from now (the asker's clock): the agent, silent since, is offline.
    const later = desiredRequestOf(steps, { ...holder, activity: '6' }, holder.rollout, 1, true);
    const length = (await handle.describe()).historyLength;
    expect(
      await askTwin(real.env.client, device, {
        request: { ...later, sentAt: new Date(Date.now() + 600_000).toISOString() },
        reportOffline: true,
      }),
    ).toMatchObject({
      kind: 'offline',
      detail: expect.stringMatching(/^agent not syncing \(last seen (599|600|601)s ago\)/),
    });
    // The same through the apply: its clock is the one the twin counts from.
    expect(
      await applyThroughTwin(target(device), steps, {
        client: real.env.client,
        taskQueue: real.worker.taskQueue,
        holder: { ...holder, activity: '6' },
        rollout: holder.rollout,
        reportOffline: true,
        now: () => Date.now() + 600_000,
      }),
    ).toMatchObject({ outcome: 'offline', steps: [] });
    await expect(
      askTwin(real.env.client, device, { request: { ...later, sentAt: 'soon' }, reportOffline: true }),
    ).rejects.toMatchObject({
      code: 'INVALID_INPUT',
      message: expect.stringContaining('twin-ask: twinDesire: sentAt: must be an ISO time (got "soon")'),
    });
    expect((await handle.describe()).historyLength).toBe(length);
    expect((await readTwin(real.env.client, device))!.desired.demo!.requestId).toBe(request.requestId);
    // A device with no twin is not started by an ask: the caller reads and signals as before.
    expect(await askTwin(real.env.client, 'twin-ask-none', { request: { ...request, sentAt } })).toBeNull();
    expect(await readTwin(real.env.client, 'twin-ask-none')).toBeNull();
  });

  /**
   * The two routes by which the worker's apply itself finds an agent's answer (docs/architecture.md, "Reports reach
   * the rollout"; the gateway's completion, the third, is agent-rollout-twin.test.ts). Each apply waits for the
   * answer to its request while the test writes that answer to the twin as a gateway does, and nobody completes it.
   */
  async function answeredWhileWaiting(
    device: string,
    activity: string,
    answersDelivered: boolean,
    safetyReadMs: number,
  ) {
    const holder = { rollout: `rollout:${device}`, run: 'run-1', activity, attempt: 1 };
    const steps = { profile: 'demo', revision: 2, apply: 'true', verify: 'true', payload: [] };
    await sync(device, { report: report(1), knownVersion: 0, waitMs: 0 });
    const handle = real.env.client.workflow.getHandle(twinWorkflowId(device));
    const opts = { client: real.env.client, taskQueue: real.worker.taskQueue, holder, rollout: holder.rollout };
    const applying = applyThroughTwin(target(device), steps, { ...opts, safetyReadMs });
    const requestId = requestIdOf(holder);
    await until(
      'the request on the twin',
      async () => ((await readTwin(real.env.client, device))?.desired.demo?.requestId === requestId ? true : undefined),
      10_000,
    );
    const stampedBefore = (await handle.describe()).typedSearchAttributes.get(WavegateReportedAt);
    const answeredAt = Date.now();
    await reportToTwin(real.env.client, real.worker.taskQueue, device, {
      report: report(2, requestId),
      knownVersion: 1,
      sentAt: new Date().toISOString(),
      ...(answersDelivered ? { answersDelivered } : {}),
    });
    const result = await applying;
    const stampedAfter = (await handle.describe()).typedSearchAttributes.get(WavegateReportedAt);
    return { result, tookMs: Date.now() - answeredAt, stamped: stampedAfter?.getTime() !== stampedBefore?.getTime() };
  }

  it('the feed: a stamped report wakes the waiting apply long before its safety read', async () => {
    // As a gateway before r11 writes it, or one that did not know the request was awaited: the twin stamps the feed.
    const { result, tookMs, stamped } = await answeredWhileWaiting('twin-feed-answer', '8', false, 600_000);
    expect(stamped).toBe(true);
    expect(result).toMatchObject({ device: 'twin-feed-answer', outcome: 'applied' });
    expect(tookMs).toBeLessThan(60_000);
  });

  it('the safety read: an answer no gateway completed and no feed change announced is read from the twin', async () => {
    // As a gateway killed between its durable write (answersDelivered: no stamp) and its completion writes it.
    const { result, stamped } = await answeredWhileWaiting('twin-safety-answer', '9', true, 2_000);
    expect(stamped).toBe(false);
    expect(result).toMatchObject({ device: 'twin-safety-answer', outcome: 'applied' });
  });

  it('a presence shard that does not answer does not stop the apply: the device is asked without the offline check', async () => {
    const device = 'twin-presence-wedged';
    await sync(device, { report: report(1), knownVersion: 0, waitMs: 0 });
    // The real client, except that every presence query is refused as a wedged shard's were at 10,000 agents.
    const client = real.env.client;
    const workflow = new Proxy(client.workflow, {
      get(target, prop) {
        if (prop === 'getHandle')
          return (id: string, ...rest: []) => {
            const handle = target.getHandle(id, ...rest);
            if (!id.startsWith('presence:')) return handle;
            return Object.assign(Object.create(handle), {
              query: async () => {
                throw new Error('consistent query buffer is full');
              },
            });
          };
        const value = Reflect.get(target, prop, target);
        return typeof value === 'function' ? value.bind(target) : value;
      },
    });
    const wedged = new Proxy(client, {
      get: (target, prop) => (prop === 'workflow' ? workflow : Reflect.get(target, prop, target)),
    });
    const holder = { rollout: 'rollout:wedged', run: 'run-1', activity: '8', attempt: 1 };
    const steps = { profile: 'demo', revision: 2, apply: 'true', verify: 'true', payload: [] };
    // Ten minutes on: by the twin's own record alone the agent would be offline, and skipped.
    const applying = applyThroughTwin(target(device), steps, {
      client: wedged,
      taskQueue: real.worker.taskQueue,
      holder,
      rollout: holder.rollout,
      reportOffline: true,
      now: () => Date.now() + 600_000,
    });
    const requestId = `${holder.rollout}:${holder.run}:${holder.activity}`;
    await until('the desire taken', async () =>
      (await readTwin(real.env.client, device))?.desired.demo?.requestId === requestId ? true : undefined,
    );
    await sync(device, { report: report(2, requestId), knownVersion: 1, waitMs: 0 });
    expect(await applying).toMatchObject({ device, outcome: 'applied' });
  });

  it('a retried apply whose agent already answered its request returns that answer, asking nothing again', async () => {
    const device = 'twin-answered';
    const holder = { rollout: 'rollout:retried', run: 'run-1', activity: '4', attempt: 1 };
    const steps = { profile: 'demo', revision: 2, apply: 'true', verify: 'true', payload: [] };
    const request = desiredRequestOf(steps, holder, holder.rollout, 1);
    await desireOnTwin(real.env.client, real.worker.taskQueue, device, request);
    await sync(device, { report: report(2, request.requestId), knownVersion: 1, waitMs: 0 });
    const handle = real.env.client.workflow.getHandle(twinWorkflowId(device));
    const before = (await handle.describe()).historyLength;
    const result = await applyThroughTwin(target(device), steps, {
      client: real.env.client,
      taskQueue: real.worker.taskQueue,
      holder: { ...holder, attempt: 2 },
      rollout: holder.rollout,
      fromRevision: 1,
      reportOffline: true,
    });
    expect(result).toMatchObject({ device, outcome: 'applied' });
    // No second desire: the twin's history did not move.
    expect((await handle.describe()).historyLength).toBe(before);
  });

  it("the worker's own watch passes on the agent's receipt, checked under the device's enrolled key; a forged one is said and dropped; a refusal's rides on its failure", async () => {
    const device = 'twin-receipt';
    const key = keyPairFromSeed(new Uint8Array(32).fill(21));
    const forger = keyPairFromSeed(new Uint8Array(32).fill(22));
    const content = { profile: 'demo', revision: 2, apply: 'true', verify: 'true', payload: [], risk: 'risky' };
    const envelope = signRevision(content as Revision, keyPairFromSeed(new Uint8Array(32).fill(23)), {
      now: Date.now(),
    });
    const steps = { profile: 'demo', revision: 2, apply: '(signed)', verify: '(signed)', payload: [], envelope };
    await sync(device, { report: report(1), knownVersion: 0, waitMs: 0 });
    const lines: string[] = [];
    let counter = 0;
    /** One apply of the worker, answered by the test as the agent: `state`, with a receipt signed by `by`. */
    const answered = async (activity: string, state: 'applied' | 'refused', by = key) => {
      const holder = { rollout: 'rollout:receipts', run: 'run-1', activity, attempt: 1 };
      const applying = applyThroughTwin({ ...target(device), agentKey: agentKeyPin(key.publicKey) }, steps, {
        client: real.env.client,
        taskQueue: real.worker.taskQueue,
        holder,
        rollout: holder.rollout,
        phase: 1,
        safetyReadMs: 2_000,
        log: (line) => lines.push(line),
      }).then(
        (result) => ({ result }),
        (error: Error) => ({ error }),
      );
      // The request as the twin holds it (its phase too) is what the agent signs.
      const entry = await until('the request on the twin', async () => {
        const desired = (await readTwin(real.env.client, device))?.desired.demo;
        return desired?.requestId === requestIdOf(holder) ? desired : undefined;
      });
      expect(entry.phase).toBe(1);
      const answer = {
        revision: state === 'applied' ? 2 : 1,
        state,
        requestId: entry.requestId,
        ...(state === 'refused' ? { reason: 'BELOW_FLOOR' } : {}),
        at: new Date().toISOString(),
      };
      const claim = agentReceiptClaim(device, entry, answer)!;
      const receipt = receiptText(
        signAgentReceipt({ ...claim, counter: ++counter, prev: RECEIPT_GENESIS, clock: Date.now() }, by),
      );
      const sent = { ...report(1), profiles: { demo: { ...answer, receipt } } };
      await sync(device, { report: sent, knownVersion: 0, waitMs: 0 });
      return { ...(await applying), receipt };
    };
    const good = await answered('31', 'applied');
    expect('result' in good && good.result).toEqual({
      device,
      outcome: 'applied',
      steps: [],
      receipt: good.receipt,
      // The request it answers (the apply activity's id): the trail recomputes its nonce from it.
      request: '31',
    });
    const forged = await answered('32', 'applied', forger);
    expect('result' in forged && forged.result).toEqual({
      device,
      outcome: 'applied',
      steps: [],
      receiptProblem: 'signature: not made by the enrolled key',
    });
    expect(lines).toEqual([
      `${device}: the receipt of its answer to demo r2 is not passed on: signature: not made by the enrolled key`,
    ]);
    const refused = await answered('33', 'refused');
    expect('error' in refused && refused.error).toBeInstanceOf(EnvelopeRejected);
    const failure = applyFailureOf('error' in refused ? refused.error : undefined);
    expect(failure?.details?.[0]).toEqual({ reason: 'BELOW_FLOOR', receipt: refused.receipt, request: '33' });
  });

  it('a sync with no news returns after its waitMs', async () => {
    const device = 'twin-b';
    await sync(device, { report: null, knownVersion: 0, waitMs: 0 });
    const started = Date.now();
    const view = await sync(device, { report: null, knownVersion: 0, waitMs: 1_500 });
    expect(Date.now() - started).toBeGreaterThanOrEqual(1_000);
    expect(view.version).toBe(0);
  });

  it('refuses a malformed sync in the validator, naming the field; nothing reaches history', async () => {
    const device = 'twin-c';
    await sync(device, { report: null, knownVersion: 0, waitMs: 0 });
    const before = (await real.env.client.workflow.getHandle(twinWorkflowId(device)).fetchHistory()).events!.length;
    const handle = real.env.client.workflow.getHandle(twinWorkflowId(device));
    await expect(
      handle.executeUpdate(twinSyncUpdate, { args: [{ report: null, knownVersion: 0, waitMs: 60_000 }] }),
    ).rejects.toMatchObject({
      cause: { type: 'TwinRefused', message: 'twin-c: twinSync: waitMs: must be 0-30000 (got 60000)' },
    });
    const bad = {
      ...report(1),
      profiles: { demo: { revision: 1, state: 'applied' as const, detail: 'x'.repeat(500), at: 't' } },
    };
    await expect(
      handle.executeUpdate(twinSyncUpdate, { args: [{ report: bad, knownVersion: 0, waitMs: 0 }] }),
    ).rejects.toMatchObject({
      cause: { message: 'twin-c: twinSync: report.profiles.demo.detail: at most 400 characters (got 500)' },
    });
    expect((await handle.fetchHistory()).events!.length).toBe(before);
  });

  it('3,000 syncs: the twin continues as new, each run under the bound, the state carried', async () => {
    const device = 'twin-many';
    await sync(device, { report: null, knownVersion: 0, waitMs: 0 });
    await desireOnTwin(real.env.client, real.worker.taskQueue, device, desiredRequest(device, 5, '42'));
    const handle = real.env.client.workflow.getHandle(twinWorkflowId(device));
    const firstRun = (await handle.describe()).runId;
    const SYNCS = 3_000;
    let done = 0;
    const lanes = Array.from({ length: 8 }, async () => {
      while (done < SYNCS) {
        const n = ++done;
        const view = await sync(device, {
          report: report(5, `rollout-${device}:run-1:42`),
          knownVersion: 1,
          waitMs: 0,
        });
        if (n === SYNCS) expect(view.desired.demo?.revision).toBe(5);
      }
    });
    await Promise.all(lanes);
    // Every run closed by continue-as-new stayed under the bound (plus the events of one last task).
    const runs: Array<{ runId: string; status: string; historyLength: number }> = [];
    for await (const w of real.env.client.workflow.list({ query: `WorkflowId = '${twinWorkflowId(device)}'` }))
      runs.push({ runId: w.runId, status: w.status.name, historyLength: w.historyLength });
    const current = await handle.describe();
    console.log(
      `twin over ${SYNCS} syncs: ${runs.length} runs, history lengths ${runs.map((r) => r.historyLength).join(', ')}`,
    );
    expect(current.runId).not.toBe(firstRun);
    expect(runs.filter((r) => r.status === 'CONTINUED_AS_NEW').length).toBeGreaterThanOrEqual(2);
    // Runs of TWIN_RUN_EVENTS (patch twin-short-runs), not TWIN_HISTORY_LIMIT: an ask replays the whole run.
    for (const r of runs) expect(r.historyLength).toBeLessThan(TWIN_RUN_EVENTS + 50);
    expect(runs.length).toBeGreaterThan(SYNCS / TWIN_RUN_EVENTS);
    await recordHistory(real.env.client.workflow.getHandle(twinWorkflowId(device), firstRun), 'device-twin-short-runs');
    const view = await until('the carried view', async () => (await readTwin(real.env.client, device)) ?? undefined);
    expect(view).toMatchObject({
      deviceId: device,
      version: 1,
      desired: { demo: { revision: 5, requestId: `rollout-${device}:run-1:42` } },
      report: { profiles: { demo: { revision: 5 } } },
    });
  }, 600_000);
});

const key = (n: number) => `ed25519:${Buffer.alloc(32, n).toString('base64')}`;

/**
 * `fleet status --reverify` through the device channel: each device's channel says whether it is asked
 * (an agent that syncs), offline (no twin), or live (SSH: its board read runs verify anyway); asked
 * agents are waited for until their fresh report answers.
 */
describe('reverify through the device channel', () => {
  it('asks syncing agents and waits for their answers; an agent without a twin is offline; an SSH device is not asked', async () => {
    await sync('rv-answers', { report: report(2), knownVersion: 0, waitMs: 0 });
    await sync('rv-silent', { report: report(2), knownVersion: 0, waitMs: 0 });
    const inventory = parseInventory(
      {
        defaults: { pool: 'p' },
        devices: [
          { id: 'rv-answers', transport: 'agent', agentKey: key(1) },
          { id: 'rv-silent', transport: 'agent', agentKey: key(2) },
          { id: 'rv-no-twin', transport: 'agent', agentKey: key(3) },
          { id: 'rv-ssh', host: '127.0.0.1', port: 1, user: 'u' },
        ],
      },
      'fleet.yaml',
    );
    // The answering agent: its next sync (long-polling for the reverify's new version) sends a fresh report knowing it.
    const answering = (async () => {
      const asked = await sync('rv-answers', { report: null, knownVersion: 0, waitMs: 20_000 });
      expect(asked.reverify).toBe(true);
      await sync('rv-answers', { report: report(2), knownVersion: asked.version, waitMs: 0 });
    })();
    const outcome = await reverifyFleet(
      inventory.devices,
      { client: () => real.env.client },
      { waitMs: 6_000, pollMs: 200 },
    );
    await answering;
    expect(outcome).toEqual({
      asked: ['rv-answers', 'rv-silent'],
      answered: ['rv-answers'],
      silent: ['rv-silent'],
      offline: ['rv-no-twin'],
    });
  });
});
