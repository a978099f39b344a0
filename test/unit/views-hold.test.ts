import { describe, expect, it } from 'vitest';
import type { Client } from '@temporalio/client';
import { DeviceViews } from '../../gateway/views';
import { emptyView, type AgentReport, type TwinView } from '../../core/twin';
import type { TwinChange } from '../../clients/twin-feed';

/**
 * A held sync's wait counts from the sync's arrival (gateway/views.ts): an agent gives up its wait and a margin after
 * it asked, so the time the gateway spends reading the device's twin comes off the hold. A stand-in Temporal client
 * whose twin read takes `readMs` on the views' clock (the read of a first sync in a storm of them).
 */
function standIn(clock: { now: number }, readMs: number) {
  let reads = 0;
  const client = {
    workflow: {
      getHandle: () => ({
        query: async () => {
          reads++;
          clock.now += readMs;
          return null;
        },
      }),
      signalWithStart: async () => ({}),
      list: () => (async function* () {})(),
    },
  } as unknown as Client;
  return { client, reads: () => reads };
}

const report: AgentReport = { profiles: {}, health: [], healthAt: null, agentVersion: 'test' };

describe('a held sync', () => {
  it('holds only what is left of its wait after the read: none when the read took it all', async () => {
    const clock = { now: 1_000_000 };
    const twin = standIn(clock, 30_000);
    const views = new DeviceViews({ client: twin.client, taskQueue: 'q', now: () => clock.now });
    try {
      // The first sync's read took the whole 30 s wait: answered at once, never held.
      const view = await views.sync('d1', { report, knownVersion: 0, waitMs: 30_000 });
      expect(view.version).toBe(0);
      expect(twin.reads()).toBe(1);
      expect(views.stats().held).toBe(0);
      // The next sync reads nothing: it is held for its wait.
      const held = views.sync('d1', { report, knownVersion: 0, waitMs: 200 });
      await new Promise((r) => setTimeout(r, 20));
      expect(views.stats().held).toBe(1);
      await held;
      expect(views.stats().held).toBe(0);
      expect(twin.reads()).toBe(1);
    } finally {
      await views.close();
    }
  });
});

describe("a device's first sync", () => {
  it('reads its twin once when the enrolment hook asked nothing, and again when it asked', async () => {
    const clock = { now: 1_000_000 };
    for (const asked of [false, true]) {
      const twin = standIn(clock, 0);
      const hooked: string[] = [];
      const views = new DeviceViews({
        client: twin.client,
        taskQueue: 'q',
        now: () => clock.now,
        onFirstSync: async (device) => {
          hooked.push(device);
          return asked;
        },
      });
      try {
        await views.sync('d1', { report, knownVersion: 0, waitMs: 0 });
        expect(hooked).toEqual(['d1']);
        // Once to find no twin; a second time only to see what the hook asked of it.
        expect(twin.reads()).toBe(asked ? 2 : 1);
      } finally {
        await views.close();
      }
    }
  });
});

describe("a report's write that outlasts its sync", () => {
  it('answers the sync with what is known, writes once while in flight, and the next sync finds it written', async () => {
    let writes = 0;
    let release: () => void = () => {};
    const inTwin = new Promise<void>((resolve) => {
      release = resolve;
    });
    const client = {
      workflow: {
        getHandle: () => ({ query: async () => null }),
        signalWithStart: async () => {
          writes++;
          await inTwin;
          return {};
        },
        list: () => (async function* () {})(),
      },
    } as unknown as Client;
    const views = new DeviceViews({ client, taskQueue: 'q', writeMarginMs: 100 });
    try {
      const started = Date.now();
      // The first report starts the twin: its write hangs, the sync is answered after its wait and the margin.
      const first = await views.sync('d1', { report, knownVersion: 0, waitMs: 50 });
      expect(first.version).toBe(0);
      expect(Date.now() - started).toBeLessThan(5_000);
      expect(views.stats()).toMatchObject({ writesOutlastingSyncs: 1, forwards: 0 });
      // A sync while that write is in flight waits for it and writes nothing again.
      await views.sync('d1', { report, knownVersion: 0, waitMs: 50 });
      expect(writes).toBe(1);
      release();
      await new Promise((r) => setTimeout(r, 20));
      expect(views.stats().forwards).toBe(1);
      // Written: the same report is now only a seen mark.
      const seenBefore = views.stats().seenMarks;
      await views.sync('d1', { report, knownVersion: 0, waitMs: 0 });
      expect(writes).toBe(1);
      expect(views.stats().seenMarks).toBe(seenBefore + 1);
    } finally {
      release();
      await views.close();
    }
  });

  it('writes the report again at the next sync when the late write failed', async () => {
    let writes = 0;
    let fail: (err: Error) => void = () => {};
    const client = {
      workflow: {
        getHandle: () => ({ query: async () => null }),
        signalWithStart: async () => {
          writes++;
          if (writes === 1)
            await new Promise<void>((_, reject) => {
              fail = reject;
            });
          return {};
        },
        list: () => (async function* () {})(),
      },
    } as unknown as Client;
    const lines: string[] = [];
    const views = new DeviceViews({ client, taskQueue: 'q', writeMarginMs: 50, log: (l) => lines.push(l) });
    try {
      await views.sync('d1', { report, knownVersion: 0, waitMs: 0 });
      expect(views.stats().writesOutlastingSyncs).toBe(1);
      fail(new Error('server overloaded'));
      await new Promise((r) => setTimeout(r, 20));
      expect(lines.join('\n')).toMatch(/d1: report not written to the twin \(server overloaded\)/);
      await views.sync('d1', { report, knownVersion: 0, waitMs: 0 });
      expect(writes).toBe(2);
      expect(views.stats().forwards).toBe(1);
    } finally {
      await views.close();
    }
  });
});

describe('writes to twins', () => {
  it('are bounded: past maxWrites at once they wait their turn, then each is made', async () => {
    let inFlight = 0;
    let most = 0;
    let writes = 0;
    const client = {
      workflow: {
        getHandle: () => ({ query: async () => null }),
        signalWithStart: async () => {
          inFlight++;
          most = Math.max(most, inFlight);
          await new Promise((r) => setTimeout(r, 30));
          inFlight--;
          writes++;
          return {};
        },
        list: () => (async function* () {})(),
      },
    } as unknown as Client;
    const views = new DeviceViews({ client, taskQueue: 'q', maxWrites: 2 });
    try {
      await Promise.all(
        ['d1', 'd2', 'd3', 'd4', 'd5'].map((d) => views.sync(d, { report, knownVersion: 0, waitMs: 0 })),
      );
      expect(writes).toBe(5);
      expect(most).toBe(2);
      expect(views.stats()).toMatchObject({ forwards: 5, writesOutlastingSyncs: 0 });
    } finally {
      await views.close();
    }
  });
});

describe('a desire listed by the feed while the device is being read', () => {
  it('is read again after that read (the feed lists a change once): the held sync is woken with it', async () => {
    let queries = 0;
    let release: () => void = () => {};
    let twin: TwinView | null = null;
    const client = {
      workflow: {
        getHandle: () => ({
          query: async () => {
            queries++;
            const seen = twin;
            // The first read was sent before the desire and answers what the twin was then.
            if (queries === 1) await new Promise<void>((resolve) => (release = resolve));
            return seen;
          },
        }),
        signalWithStart: async () => ({}),
        list: () => (async function* () {})(),
      },
    } as unknown as Client;
    const views = new DeviceViews({ client, taskQueue: 'q' });
    try {
      const answered = views.sync('d1', { report, knownVersion: 0, waitMs: 5_000 });
      await new Promise((r) => setTimeout(r, 20));
      twin = { ...emptyView('d1'), version: 1 };
      // What the twin change feed delivers (once) while the first read is in flight.
      (views as unknown as { onChanges(c: TwinChange[]): void }).onChanges([
        { deviceId: 'd1', atMs: Date.now(), version: 1 },
      ]);
      release();
      const view = await answered;
      expect(view.version).toBe(1);
      expect(queries).toBe(2);
    } finally {
      release();
      await views.close();
    }
  });
});
