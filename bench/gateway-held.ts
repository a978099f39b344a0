/**
 * What a gateway's memory costs per device (bench/README.md, "Gateway memory per held long-poll"): a gateway HTTP
 * server in its own process (test/support/gateway-child.ts, its Temporal client a stand-in that answers every twin
 * read with an empty twin and takes every write), and N devices, each with its own pinned key, signing like
 * `wavegate agent`. Measured in the gateway's process after a full GC (RSS, and heap + external):
 *   - before any device,
 *   - after each device's first sync (the gateway now holds its twin record; its report written),
 *   - with every device holding one long-poll (the gateway's memory: a timer and a callback, plus the connection).
 *
 *   npx tsx bench/gateway-held.ts --devices 1000,10000
 *
 * Needs `ulimit -n` above 2 x N + 100 (each held long-poll is one connection on each side).
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { gatewayClient } from '../agent/gateway-client';
import { keyPairFromSeed } from '../core/signing';
import type { AgentReport } from '../core/twin';
import { mapLimit } from '../core/map-limit';
import { startGatewayChild, type GatewayChild } from '../test/support/gateway-flood';
import { wholeFlag } from './flags';

const MB = 1024 * 1024;
const report: AgentReport = {
  profiles: {},
  health: [{ name: 'motd', ok: true, kind: 'runtime' }],
  healthAt: null,
  agentVersion: 'bench',
};

async function footprint(gateway: GatewayChild): Promise<{ rss: number; heap: number }> {
  const m = await gateway.mem();
  return { rss: m.rss, heap: m.heapUsed + m.external + m.arrayBuffers };
}

async function measure(devices: number): Promise<void> {
  const keys = Array.from({ length: devices }, (_, i) => ({
    id: `held-${String(i).padStart(6, '0')}`,
    key: keyPairFromSeed(randomBytes(32)),
  }));
  const gateway = await startGatewayChild({
    devices: Object.fromEntries(keys.map((k) => [k.id, Buffer.from(k.key.publicKey).toString('base64')])),
    limits: {
      maxConnections: devices + 1_000,
      maxConnectionsPerSource: devices + 1_000,
      maxRequests: devices + 1_000,
      maxRequestsPerSource: devices + 1_000,
      maxLongPolls: devices + 1_000,
    },
  });
  try {
    const empty = await footprint(gateway);
    const clients = keys.map((k) => gatewayClient({ url: gateway.url, device: k.id, secretKey: k.key.secretKey }));
    await mapLimit(clients, 200, (c) => c.sync({ report, knownVersion: 0, waitMs: 0 }));
    const known = await footprint(gateway);
    const stop = new AbortController();
    const failed = new Map<string, number>();
    const held = clients.map((c) =>
      c.sync({ report, knownVersion: 0, waitMs: 30_000 }, stop.signal).catch((err: Error) => {
        if (stop.signal.aborted) return;
        const why = err.message.replace(/\d+/g, 'N').slice(0, 100);
        failed.set(why, (failed.get(why) ?? 0) + 1);
      }),
    );
    // Until every poll is held, or the count has not moved for 3 s (a client-side failure is counted below).
    let last = -1;
    let still = 0;
    for (let i = 0; i < 250 && still < 30; i++) {
      const stats = (await gateway.stats()) as { views?: { held: number } } | null;
      const now = stats?.views?.held ?? 0;
      if (now >= devices) break;
      still = now === last ? still + 1 : 0;
      last = now;
      await sleep(100);
    }
    const holding = await footprint(gateway);
    const stats = (await gateway.stats()) as { views?: { held: number } } | null;
    if (failed.size) console.log(`  held syncs that failed: ${JSON.stringify(Object.fromEntries(failed))}`);
    if ((stats?.views?.held ?? 0) < devices * 0.9) {
      console.log(`  gateway stats: ${JSON.stringify(stats)}`);
      console.log(`  gateway log (last lines):\n    ${(await gateway.logs()).slice(-8).join('\n    ')}`);
    }
    stop.abort();
    await Promise.all(held);
    const per = (a: number, b: number) => `${((b - a) / devices / 1024).toFixed(1)} KB`;
    console.log(
      [
        `${devices} devices (held at once: ${stats?.views?.held ?? '?'}; the others' requests failed on the client side, above)`,
        `  gateway at start:            RSS ${(empty.rss / MB).toFixed(0)} MB, heap+external ${(empty.heap / MB).toFixed(0)} MB`,
        `  every device known:          RSS ${(known.rss / MB).toFixed(0)} MB, heap+external ${(known.heap / MB).toFixed(0)} MB: ${per(empty.rss, known.rss)} RSS, ${per(empty.heap, known.heap)} heap per device`,
        `  every device holding a poll: RSS ${(holding.rss / MB).toFixed(0)} MB, heap+external ${(holding.heap / MB).toFixed(0)} MB: ${per(known.rss, holding.rss)} RSS, ${per(known.heap, holding.heap)} heap per held long-poll`,
      ].join('\n'),
    );
  } finally {
    await gateway.stop();
  }
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { devices: { type: 'string', default: '1000,10000' } } });
  for (const n of values.devices.split(',')) await measure(wholeFlag('devices', n, 1, 20_000));
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
