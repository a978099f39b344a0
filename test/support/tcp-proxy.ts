import { connect, createServer, type Socket } from 'node:net';

/**
 * A TCP proxy on 127.0.0.1 in front of one or more servers, for tests of clients behind a network path:
 *   - each new connection goes to the next target in turn, with no stickiness (the simplest load balancer:
 *     several gateways serving one fleet, test/e2e/gateway-fleet.test.ts), and `given` counts them per target;
 *   - `cut(ms)` does what a broken path does: every open connection is reset at once, and for `ms` every new one
 *     is reset as it arrives; then it forwards again (test/e2e/wait-survives-failures.test.ts).
 * Either side of a connection gone (closed, reset, refused), the other goes too.
 */
export interface TcpProxy {
  /** `127.0.0.1:<port>`: give it to a client instead of a server's address. */
  address: string;
  /** `http://127.0.0.1:<port>`. */
  url: string;
  /** Connections handed to each target so far, in the order given. */
  readonly given: number[];
  /** Connections reset by cuts so far (open ones and refused new ones). */
  readonly resets: number;
  /** Reset every connection now and refuse new ones for `ms`; resolves when it forwards again. */
  cut(ms: number): Promise<void>;
  close(): Promise<void>;
}

/** `targets`: `host:port` or a port on 127.0.0.1. */
export async function startTcpProxy(targets: ReadonlyArray<string | number>): Promise<TcpProxy> {
  const upstreams = targets.map((t) =>
    typeof t === 'number'
      ? { host: '127.0.0.1', port: t }
      : { host: t.slice(0, t.lastIndexOf(':')), port: Number(t.slice(t.lastIndexOf(':') + 1)) },
  );
  const given = upstreams.map(() => 0);
  /** Each client connection and its upstream one. */
  const open = new Map<Socket, Socket>();
  let next = 0;
  let cutting = false;
  let resets = 0;
  const reset = (client: Socket) => {
    resets++;
    client.resetAndDestroy();
    open.get(client)?.destroy();
    open.delete(client);
  };
  const server = createServer((client) => {
    client.on('error', () => {});
    if (cutting) return reset(client);
    const turn = next++ % upstreams.length;
    given[turn]!++;
    const upstream = connect(upstreams[turn]!);
    upstream.on('error', () => {});
    open.set(client, upstream);
    client.once('close', () => {
      open.delete(client);
      upstream.destroy();
    });
    upstream.once('close', () => client.destroy());
    client.pipe(upstream);
    upstream.pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  return {
    address: `127.0.0.1:${port}`,
    url: `http://127.0.0.1:${port}`,
    given,
    get resets() {
      return resets;
    },
    async cut(ms) {
      cutting = true;
      for (const client of [...open.keys()]) reset(client);
      await new Promise((r) => setTimeout(r, ms));
      cutting = false;
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const [client, upstream] of open) {
          client.destroy();
          upstream.destroy();
        }
        server.close(() => resolve());
      }),
  };
}
