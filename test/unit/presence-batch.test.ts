import { describe, expect, it } from 'vitest';
import type { Client } from '@temporalio/client';
import { readSeenOne } from '../../clients/presence';
import { presenceShardOf, presenceWorkflowId } from '../../core/presence';

/**
 * One-device presence reads are gathered (clients/presence.ts `readSeenOne`): readers asking within a few
 * milliseconds share one `presenceOf` query per shard, so a hundred applies in flight do not each query a shard.
 */
describe('readSeenOne', () => {
  it('devices asked together cost one query per shard, and each reader gets its own entry', async () => {
    const queries: Array<{ workflowId: string; devices: string[] }> = [];
    const client = {
      workflow: {
        getHandle: (workflowId: string) => ({
          query: async (_q: unknown, arg: { devices: string[] }) => {
            queries.push({ workflowId, devices: arg.devices });
            return Object.fromEntries(arg.devices.map((d) => [d, { at: `2026-12-05T00:00:00.000Z`, digest: d }]));
          },
        }),
      },
    } as unknown as Client;
    const ids = Array.from({ length: 100 }, (_, i) => `dev-${i}`);
    const entries = await Promise.all(ids.map((id) => readSeenOne(client, id)));
    expect(entries.map((e) => e?.digest)).toEqual(ids);
    const shards = new Set(ids.map(presenceShardOf));
    expect(queries.length).toBe(shards.size);
    expect(new Set(queries.map((q) => q.workflowId))).toEqual(new Set([...shards].map(presenceWorkflowId)));

    // Asked later: a batch of its own.
    await readSeenOne(client, 'dev-late');
    expect(queries.length).toBe(shards.size + 1);
  });

  it('a failed query fails the readers of that batch, not later ones', async () => {
    let fail = true;
    const client = {
      workflow: {
        getHandle: () => ({
          query: async (_q: unknown, arg: { devices: string[] }) => {
            if (fail) throw new Error('consistent query buffer is full');
            return Object.fromEntries(arg.devices.map((d) => [d, { at: '2026-12-05T00:00:00.000Z', digest: 'x' }]));
          },
        }),
      },
    } as unknown as Client;
    await expect(readSeenOne(client, 'a')).rejects.toThrow('consistent query buffer is full');
    fail = false;
    expect(await readSeenOne(client, 'a')).toMatchObject({ digest: 'x' });
  });

  it('a shard that does not answer fails its own devices only, not the others batched with them', async () => {
    const ids = Array.from({ length: 64 }, (_, i) => `dev-${i}`);
    const wedged = presenceWorkflowId(presenceShardOf(ids[0]!));
    const client = {
      workflow: {
        getHandle: (workflowId: string) => ({
          query: async (_q: unknown, arg: { devices: string[] }) => {
            if (workflowId === wedged) throw new Error('consistent query buffer is full');
            return Object.fromEntries(arg.devices.map((d) => [d, { at: '2026-12-05T00:00:00.000Z', digest: d }]));
          },
        }),
      },
    } as unknown as Client;
    const outcomes = await Promise.allSettled(ids.map((id) => readSeenOne(client, id)));
    ids.forEach((id, i) => {
      const outcome = outcomes[i]!;
      if (presenceWorkflowId(presenceShardOf(id)) === wedged)
        expect(outcome).toMatchObject({ status: 'rejected', reason: { message: 'consistent query buffer is full' } });
      else expect(outcome).toMatchObject({ status: 'fulfilled', value: { digest: id } });
    });
    expect(outcomes.filter((o) => o.status === 'fulfilled').length).toBeGreaterThan(0);
  });

  it('at most one query per shard at a time: devices asked while it is out share the next one', async () => {
    const ids = Array.from({ length: 400 }, (_, i) => `dev-${i}`);
    const shard = presenceShardOf(ids[0]!);
    const same = ids.filter((id) => presenceShardOf(id) === shard).slice(0, 6);
    let out = 0;
    let most = 0;
    const asked: string[][] = [];
    const client = {
      workflow: {
        getHandle: () => ({
          query: async (_q: unknown, arg: { devices: string[] }) => {
            out++;
            most = Math.max(most, out);
            asked.push(arg.devices);
            await new Promise((r) => setTimeout(r, 50));
            out--;
            return Object.fromEntries(arg.devices.map((d) => [d, { at: '2026-12-05T00:00:00.000Z', digest: d }]));
          },
        }),
      },
    } as unknown as Client;
    // One device now, the others one by one while its query is out.
    const reads = [readSeenOne(client, same[0]!)];
    for (const id of same.slice(1)) {
      await new Promise((r) => setTimeout(r, 25));
      reads.push(readSeenOne(client, id));
    }
    expect((await Promise.all(reads)).map((e) => e?.digest)).toEqual(same);
    expect(most).toBe(1);
    // Fewer queries than devices: those asked while a query was out went together into the next.
    expect(asked.length).toBeLessThan(same.length);
    expect(asked.flat().sort()).toEqual([...same].sort());
  });
});
