/**
 * What one twin change-feed look costs the Temporal server as the fleet grows (bench/README.md, "The feed's list
 * call"): N twin executions (started with their feed stamps, no worker), then LOOKS list calls as
 * `clients/twin-feed.ts` makes them (changes in the last 5 s, none of them matching, and in the last 60 s), with
 * the dev server's CPU per call from /proc.
 *
 *   npx tsx bench/feed-list-cost.ts --twins 1000,10000 --looks 50
 */
import { parseArgs } from 'node:util';
import { Client } from '@temporalio/client';
import { TypedSearchAttributes } from '@temporalio/common';
import { mapLimit } from '../core/map-limit';
import { listTwinChanges } from '../clients/twin-feed';
import { WavegateDesiredAt, WavegateReportedAt, WavegateTwinVersion } from '../contracts/search-attributes';
import { TWIN_WORKFLOW } from '../contracts/twin';
import { twinWorkflowId } from '../core/twin';
import { startDevServerEnv } from '../workers/dev-server';
import { childPid, processCpu } from './cpu-account';
import { wholeFlag } from './flags';

const { values: flags } = parseArgs({
  options: { twins: { type: 'string', default: '1000,10000' }, looks: { type: 'string', default: '50' } },
});
const SIZES = flags.twins!.split(',').map((n) => wholeFlag('twins', n, 1, 100_000));
const LOOKS = wholeFlag('looks', flags.looks!, 1, 10_000);

async function main(): Promise<void> {
  const env = await startDevServerEnv();
  const serverPid = childPid('start-dev');
  const client = new Client({ connection: env.connection, namespace: env.namespace ?? 'default' });
  let started = 0;
  try {
    for (const size of SIZES) {
      const old = new Date(Date.now() - 3_600_000);
      const ids = Array.from({ length: size - started }, (_, i) => `feed-cost-${String(started + i).padStart(6, '0')}`);
      const t0 = Date.now();
      await mapLimit(ids, 32, (id) =>
        client.workflow.start(TWIN_WORKFLOW, {
          workflowId: twinWorkflowId(id),
          taskQueue: 'feed-list-cost-no-worker',
          args: [{ deviceId: id }],
          typedSearchAttributes: new TypedSearchAttributes([
            { key: WavegateDesiredAt, value: old },
            { key: WavegateReportedAt, value: old },
            { key: WavegateTwinVersion, value: 1 },
          ]),
        }),
      );
      started = size;
      console.log(`${size} twins (${ids.length} started in ${((Date.now() - t0) / 1000).toFixed(1)} s)`);
      await new Promise((r) => setTimeout(r, 3_000));
      for (const [label, backMs] of [
        ['5 s look', 5_000],
        ['60 s look', 60_000],
      ] as const) {
        const cpu0 = serverPid ? processCpu(serverPid).own : 0;
        const w0 = Date.now();
        for (let i = 0; i < LOOKS; i++) await listTwinChanges(client, 'reported', Date.now() - backMs);
        const wall = (Date.now() - w0) / LOOKS;
        const cpu = ((serverPid ? processCpu(serverPid).own : 0) - cpu0) / LOOKS;
        console.log(
          `  ${label}: ${wall.toFixed(1)} ms a call (wall), the server's CPU ${(cpu * 1000).toFixed(1)} ms a call`,
        );
      }
    }
  } finally {
    await env.teardown();
  }
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
