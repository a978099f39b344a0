import { connect, createServer, type Socket } from 'node:net';

/**
 * The simplest load balancer there is, for tests of several gateways serving one fleet
 * (test/e2e/gateway-fleet.test.ts): a TCP proxy on 127.0.0.1 that sends each new connection to the next
 * backend in turn, with no stickiness of any kind. It counts the connections each backend was given.
 */
export interface RoundRobinProxy {
  /** `http://127.0.0.1:<port>`: what the agents are given as their gateway. */
  url: string;
  /** Connections handed to each backend so far, in the order of `ports`. */
  readonly given: number[];
  close(): Promise<void>;
}

export async function startRoundRobinProxy(ports: number[]): Promise<RoundRobinProxy> {
  const given = ports.map(() => 0);
  /** Both sides of every open connection. */
  const open = new Set<Socket>();
  let next = 0;
  const server = createServer((inbound) => {
    const turn = next++ % ports.length;
    given[turn]!++;
    const outbound = connect({ host: '127.0.0.1', port: ports[turn]! });
    // Either side gone (closed, reset, refused): the other goes too, as a real balancer's would.
    const drop = () => {
      for (const side of [inbound, outbound]) {
        open.delete(side);
        side.destroy();
      }
    };
    for (const side of [inbound, outbound]) open.add(side.on('error', drop).on('close', drop));
    inbound.pipe(outbound);
    outbound.pipe(inbound);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${port}`,
    given,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        for (const side of open) side.destroy();
      }),
  };
}
