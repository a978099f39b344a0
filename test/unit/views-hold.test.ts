import { describe, expect, it } from 'vitest';
import type { Client } from '@temporalio/client';
import { DeviceViews } from '../../gateway/views';
import type { AgentReport } from '../../core/twin';

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
