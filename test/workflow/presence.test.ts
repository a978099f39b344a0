import { Client } from '@temporalio/client';
import { describe, expect, it } from 'vitest';
import {
  PRESENCE_HISTORY_LIMIT,
  PRESENCE_LIMITS,
  presenceShardOf,
  presenceWorkflowId,
  type PresenceBatch,
  type SeenEntry,
} from '../../core/presence';
import { readSeen, unwrittenSeen, writeSeen } from '../../clients/presence';
import { presenceOfQuery, presenceSeenSignal } from '../../contracts/presence';
import { recordHistory } from '../support/histories';
import { realRollouts } from '../support/real-rollouts';
import { rejection } from '../support/refusal';
import { until } from '../support/until';
import { devicesOfShard } from '../support/presence';

/**
 * Presence shards `presence:<n>` on a real dev server with a real worker: a gateway's flush written
 * through clients/presence.ts (one signal-with-start per shard) and read back (one query per shard), the
 * later entry kept, a malformed batch dropped while the next lands, a failed flush handing back every
 * entry it did not write, and continue-as-new past PRESENCE_HISTORY_LIMIT carrying the state, pruned of
 * devices silent for a week.
 */
const real = realRollouts('presence');

const iso = (msAgo: number) => new Date(Date.now() - msAgo).toISOString();

describe('presence shards', () => {
  it('a flush over many shards is read back; the later entry stays; a shard never written holds nothing', async () => {
    const { client } = real.env;
    const taskQueue = real.worker.taskQueue;
    // 200 devices of shards 0-15: shards 16-31 are never written here.
    const seen = new Map<string, SeenEntry>();
    for (let i = 0; seen.size < 200; i++)
      if (presenceShardOf(`fleet-${i}`) < 16) seen.set(`fleet-${i}`, { at: iso(60_000), digest: `r${seen.size}` });
    const shards = new Set([...seen.keys()].map(presenceShardOf));
    expect(shards.size).toBe(16);
    expect(await writeSeen(client, taskQueue, seen)).toEqual({ signals: shards.size, devices: 200, refused: [] });
    // A second gateway saw one device later (new digest) and another earlier (its stale entry loses).
    const [seenLater, seenEarlier] = [...seen.keys()];
    const later = { at: iso(1_000), digest: 'changed' };
    await writeSeen(
      client,
      taskQueue,
      new Map([
        [seenLater!, later],
        [seenEarlier!, { at: iso(3_600_000), digest: 'old' }],
      ]),
    );
    const unseen = devicesOfShard(31, 1, 'unseen')[0]!;
    const back = await readSeen(client, [...seen.keys(), seenLater!, 'not-in-the-fleet', unseen]);
    expect(back.size).toBe(200);
    expect(back.get(seenLater!)).toEqual(later);
    expect(back.get(seenEarlier!)).toEqual(seen.get(seenEarlier!));
    expect(back.get([...seen.keys()][199]!)).toEqual([...seen.values()][199]);
    expect(back.has('not-in-the-fleet')).toBe(false);
    expect(back.has(unseen)).toBe(false);
    // Over PRESENCE_LIMITS.query names of one shard: asked in more than one query (one would be refused).
    const inShard0 = [...seen.keys()].find((id) => presenceShardOf(id) === 0)!;
    const many = [...devicesOfShard(0, PRESENCE_LIMITS.query, 'many'), inShard0];
    expect([...(await readSeen(client, many)).keys()]).toEqual([inShard0]);
  });

  it('a malformed batch is dropped whole, the next one lands; a refused entry is never sent', async () => {
    const { client } = real.env;
    const taskQueue = real.worker.taskQueue;
    const shard = 11;
    const [good, other, last] = devicesOfShard(shard, 3, 'batch');
    const first = await writeSeen(
      client,
      taskQueue,
      new Map([
        [good!, { at: iso(5_000), digest: 'a' }],
        ['x'.repeat(129), { at: iso(5_000), digest: 'never sent' }],
      ]),
    );
    expect(first.refused).toEqual([
      { deviceId: 'x'.repeat(129), problem: expect.stringMatching(/^device id: must be 1-128 characters/) },
    ]);
    const handle = client.workflow.getHandle(presenceWorkflowId(shard));
    // Another writer's bug: one bad time drops its whole batch (a signal has no validator), other included.
    const bad: PresenceBatch = {
      shard,
      seen: { [other!]: { at: iso(1_000), digest: 'b' }, [good!]: { at: 'yesterday', digest: 'b' } },
    };
    await handle.signal(presenceSeenSignal, bad);
    // A batch of another shard's devices sent here is dropped too.
    const stray = devicesOfShard(12, 1, 'stray')[0]!;
    await handle.signal(presenceSeenSignal, { shard, seen: { [stray]: { at: iso(1_000), digest: 'c' } } });
    await writeSeen(client, taskQueue, new Map([[last!, { at: iso(500), digest: 'd' }]]));
    const back = await handle.query(presenceOfQuery, { devices: [good!, other!, last!, stray] });
    expect(back).toEqual({
      [good!]: { at: expect.any(String), digest: 'a' },
      [last!]: { at: expect.any(String), digest: 'd' },
    });
    await expect(handle.query(presenceOfQuery, { devices: new Array(10_001).fill(good!) })).rejects.toThrow(
      'presence:11: presenceOf: devices: at most 10000 names (got 10001)',
    );
    await recordHistory(handle, 'presence-seen-batches');
  });

  it('a flush that cannot be written hands back every entry; re-queued, the next flush writes them all', async () => {
    const seen = new Map<string, SeenEntry>();
    for (let i = 0; i < 40; i++) seen.set(`requeue-${i}`, { at: iso(2_000), digest: 'q' });
    // A real failure: the server refuses every signal to a namespace it does not have.
    const unreachable = new Client({ connection: real.env.connection, namespace: 'no-such-namespace' });
    const err = await rejection(writeSeen(unreachable, real.worker.taskQueue, seen));
    expect(err.code).toBe('UNAVAILABLE');
    expect(err.message).toMatch(/^presence: 40 devices in shards [\d, ]+ not written \(kept for the next flush\): /);
    const unwritten = unwrittenSeen(err)!;
    expect([...unwritten.keys()].sort()).toEqual([...seen.keys()].sort());
    expect((err.details.failedShards as number[]).length).toBe(new Set([...seen.keys()].map(presenceShardOf)).size);
    expect(err.cause).toBeInstanceOf(Error);
    expect(unwrittenSeen(new Error('other'))).toBeNull();
    await writeSeen(real.env.client, real.worker.taskQueue, unwritten);
    const back = await readSeen(real.env.client, seen.keys());
    expect(new Map([...back].sort())).toEqual(new Map([...seen].sort()));
  });

  it(`continues as new past ${PRESENCE_HISTORY_LIMIT} events, each run under the bound, the state carried and pruned of week-old devices`, async () => {
    const { client } = real.env;
    const taskQueue = real.worker.taskQueue;
    const shard = 20;
    const ids = devicesOfShard(shard, 3_000, 'can');
    const [stale, ...live] = ids;
    const week = 7 * 24 * 3600 * 1000;
    await writeSeen(client, taskQueue, new Map([[stale!, { at: iso(week + 3_600_000), digest: 'gone' }]]));
    const handle = client.workflow.getHandle(presenceWorkflowId(shard));
    const firstRun = (await handle.describe()).runId;
    expect(Object.keys(await handle.query(presenceOfQuery, { devices: [stale!] }))).toEqual([stale]);
    // One flush a signal, one after another, until the shard has moved to a new run (a signal is ~4 events).
    const STEP = 3;
    let sent = 0;
    while ((await handle.describe()).runId === firstRun) {
      expect(sent).toBeLessThan(live.length);
      const batch = new Map(live.slice(sent, sent + STEP).map((id) => [id, { at: iso(0), digest: String(sent) }]));
      await writeSeen(client, taskQueue, batch);
      sent += STEP;
    }
    expect(sent / STEP).toBeGreaterThan(PRESENCE_HISTORY_LIMIT / 8);
    const runs: Array<{ status: string; historyLength: number }> = [];
    for await (const w of client.workflow.list({ query: `WorkflowId = '${presenceWorkflowId(shard)}'` }))
      runs.push({ status: w.status.name, historyLength: w.historyLength });
    console.log(
      `presence shard over ${sent / STEP} flushes: history lengths ${runs.map((r) => r.historyLength).join(', ')}`,
    );
    expect(runs.some((r) => r.status === 'CONTINUED_AS_NEW')).toBe(true);
    for (const r of runs) expect(r.historyLength).toBeLessThan(PRESENCE_HISTORY_LIMIT + 200);
    const back = await until('the carried state', async () => {
      const answer = await readSeen(client, ids.slice(0, sent + 1));
      return answer.size === sent ? answer : undefined;
    });
    expect(back.has(stale!)).toBe(false);
    expect(back.get(live[0]!)).toMatchObject({ digest: '0' });
    expect(back.get(live[sent - 1]!)).toMatchObject({ digest: String(sent - STEP) });
  }, 300_000);
});
