import { createServer, connect, type Socket } from 'node:net';

/**
 * A TCP proxy on 127.0.0.1 in front of a server (a Temporal frontend), whose `cut(ms)` does what a
 * broken network path does to the clients behind it: every open connection is reset at once, and for
 * `ms` every new one is reset as it arrives; then it forwards again. For tests of clients that must
 * outlive a cut (test/e2e/wait-survives-cut.test.ts).
 */
export interface CutProxy {
  /** `127.0.0.1:<port>`: give it to the client instead of the server's address. */
  address: string;
  /** Reset every connection now and refuse new ones for `ms`; resolves when it forwards again. */
  cut(ms: number): Promise<void>;
  /** Connections reset by cuts so far (open ones and refused new ones). */
  readonly resets: number;
  close(): Promise<void>;
}

export async function startCutProxy(target: string): Promise<CutProxy> {
  const [host, port] = [target.slice(0, target.lastIndexOf(':')), Number(target.slice(target.lastIndexOf(':') + 1))];
  /** Each client connection and its upstream one. */
  const open = new Map<Socket, Socket>();
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
    const upstream = connect({ host, port });
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
  const { port: own } = server.address() as { port: number };
  return {
    address: `127.0.0.1:${own}`,
    async cut(ms) {
      cutting = true;
      for (const client of [...open.keys()]) reset(client);
      await new Promise((r) => setTimeout(r, ms));
      cutting = false;
    },
    get resets() {
      return resets;
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
