/**
 * The gateway under a flood of unauthenticated connections (bench/README.md, "Gateway under a flood"):
 * a gateway HTTP server in its own process (test/support/gateway-child.ts; the Temporal client a
 * stand-in, which no unauthenticated request reaches) and, from this process, N connections that each
 * send a request head signed by a key the gateway does not pin plus --body-kb of a body declared longer
 * (never finished), and N idle connections that send nothing. The gateway's own RSS and heap+external
 * (after a full GC) are sampled before, during (after --hold-ms) and after all connections closed.
 *
 *   npx tsx bench/gateway-flood.ts --connections 1000,4000 [--body-kb 200] [--hold-ms 3000] [--root /tmp/gw-old]
 *
 * --root runs another checkout's gateway/server.ts (the "before": `git worktree add /tmp/gw-old 9e149e4`
 * and `ln -s $PWD/node_modules /tmp/gw-old/node_modules`). Needs `ulimit -n` above 2 x N + 100.
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { ed25519 } from '@noble/curves/ed25519.js';
import { authorizationHeader } from '../core/agent-auth';
import { closeFlood, openFlood, startGatewayChild } from '../test/support/gateway-flood';
import { wholeFlag } from './flags';

const MB = 1024 * 1024;

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      connections: { type: 'string', default: '1000,4000' },
      'body-kb': { type: 'string', default: '200' },
      'hold-ms': { type: 'string', default: '3000' },
      root: { type: 'string' },
    },
  });
  const counts = values.connections.split(',').map((c) => wholeFlag('connections', c, 1, 20_000));
  const bodyKb = wholeFlag('body-kb', values['body-kb'], 0, 255);
  const holdMs = wholeFlag('hold-ms', values['hold-ms'], 0, 60_000);
  const seed = randomBytes(32);
  const stranger = randomBytes(32);
  const devices = { 'dev-1': Buffer.from(ed25519.getPublicKey(seed)).toString('base64') };
  // Well formed, for a pinned device, signed by another key: the gateway must run the signature check to refuse it.
  const head = () =>
    `POST /v1/sync HTTP/1.1\r\nhost: gateway\r\ncontent-type: application/json\r\nauthorization: ${authorizationHeader({ device: 'dev-1', method: 'POST', path: '/v1/sync', body: Buffer.from('{}'), now: Date.now(), nonce: randomBytes(16).toString('hex'), secretKey: stranger })}\r\n`;
  console.log(
    `gateway: ${values.root ?? 'this checkout'}; each flood connection sends a bad signature and ${bodyKb} KB of a ${bodyKb + 50} KB body, plus as many idle connections`,
  );
  console.log(
    'connections | RSS before | RSS during | RSS after | heap+ext before | during | after | answered 401 before the body ended',
  );
  for (const n of counts) {
    const gateway = await startGatewayChild({ ...(values.root ? { root: values.root } : {}), devices });
    try {
      await sleep(500);
      const before = await gateway.mem();
      const flood = await openFlood(gateway.port, n, head, bodyKb * 1024, (bodyKb + 50) * 1024);
      const idle = await openFlood(gateway.port, n, undefined, 0);
      await sleep(holdMs);
      const during = await gateway.mem();
      const answered = flood.filter((c) => c.received().startsWith('HTTP/1.1 401')).length;
      await closeFlood(flood);
      await closeFlood(idle);
      await sleep(1_000);
      const after = await gateway.mem();
      const mb = (v: number) => `${(v / MB).toFixed(0)} MB`;
      const he = (m: NodeJS.MemoryUsage) => m.heapUsed + m.external;
      console.log(
        `${n} + ${n} idle | ${mb(before.rss)} | ${mb(during.rss)} | ${mb(after.rss)} | ${mb(he(before))} | ${mb(he(during))} | ${mb(he(after))} | ${answered}/${n}`,
      );
    } finally {
      await gateway.stop();
    }
  }
}

main().catch((err) => {
  console.error(err);
  process.exitCode = 1;
});
