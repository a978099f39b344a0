import { describe, expect, it } from 'vitest';
import type { Client } from '@temporalio/client';
import { WavegateDesiredAt, WavegateTwinVersion } from '../../contracts/search-attributes';
import { TwinFeed, type TwinChange } from '../../clients/twin-feed';

/**
 * The feed's bookkeeping (clients/twin-feed.ts) over a stand-in list call: the real visibility is exercised in
 * test/workflow/twin-feed.test.ts; here, the order in which rows become visible is chosen.
 */
function standIn(rows: Array<{ device: string; at: number; version: number }>) {
  const asked: number[] = [];
  const client = {
    workflow: {
      list: ({ query }: { query: string }) => {
        const since = Date.parse(/> '([^']+)'/.exec(query)![1]!);
        asked.push(since);
        return (async function* () {
          for (const r of rows.filter((r) => r.at > since))
            yield {
              workflowId: `device:${r.device}`,
              typedSearchAttributes: {
                get: (key: unknown) =>
                  key === WavegateDesiredAt ? new Date(r.at) : key === WavegateTwinVersion ? r.version : undefined,
              },
            };
        })();
      },
    },
  } as unknown as Client;
  return { client, asked };
}

describe('TwinFeed', () => {
  it('delivers each change once, and a change that becomes visible late (stamped before the look-back) on the wide look', async () => {
    let now = 1_000_000;
    const rows = [{ device: 'a', at: now + 100, version: 1 }];
    const { client, asked } = standIn(rows);
    const got: TwinChange[] = [];
    const feed = new TwinFeed(client, 'desired', {
      onChanges: (c) => got.push(...c),
      overlapMs: 5_000,
      wideOverlapMs: 60_000,
      wideEveryMs: 10_000,
      now: () => now,
    });
    await feed.look();
    await feed.look();
    expect(got.map((c) => [c.deviceId, c.version])).toEqual([['a', 1]]);
    // A change stamped 20 s before the newest one seen, visible only now: out of the short look-back.
    now += 30_000;
    rows.push({ device: 'b', at: now, version: 3 });
    await feed.look();
    rows.push({ device: 'late', at: now - 20_000, version: 2 });
    now += 1_000;
    await feed.look();
    expect(got.map((c) => c.deviceId)).toEqual(['a', 'b']);
    now += 10_000;
    await feed.look();
    expect(got.map((c) => c.deviceId)).toEqual(['a', 'b', 'late']);
    // Short looks reach back 5 s past the newest change, wide ones 60 s.
    expect(asked.at(-2)).toBe(rows[1]!.at - 5_000);
    expect(asked.at(-1)).toBe(rows[1]!.at - 60_000);
    // How late each was seen: 'a' and 'b' in order, 'late' 20 s behind the newest listed before it.
    expect(feed.latenessSoFar()).toEqual({ inOrder: 2, upTo1s: 0, upTo2s: 0, upTo5s: 0, later: 1 });
    rows.push({ device: 'c', at: rows[1]!.at - 1_500, version: 4 });
    await feed.look();
    expect(feed.latenessSoFar()).toMatchObject({ upTo2s: 1, later: 1 });
  });

  it('a failed look says so once per run of failures and changes nothing delivered', async () => {
    const errors: string[] = [];
    let fail = true;
    const client = {
      workflow: {
        list: () =>
          (async function* () {
            if (fail) throw new Error('visibility unavailable');
            yield* [];
          })(),
      },
    } as unknown as Client;
    let now = 0;
    const feed = new TwinFeed(client, 'reported', {
      onChanges: () => {},
      onError: (e) => errors.push(e.message),
      now: () => now,
    });
    await feed.look();
    now = 4_000;
    await feed.look();
    expect(errors).toEqual(['visibility unavailable']);
    expect(feed.failingFor()).toBe(4_000);
    fail = false;
    await feed.look();
    expect(feed.failingFor()).toBe(0);
  });
});
