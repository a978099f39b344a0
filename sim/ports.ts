import { createServer } from 'node:net';

/*
 * Free local TCP ports, for the simulator's servers (sim/openssh.ts), the dev server
 * (workers/dev-server.ts) and the tests: kept in sim/, which workers/ may import and which imports
 * nothing from workers/.
 */

/** Whether `port` on 127.0.0.1 is free right now. */
export async function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.once('error', () => resolve(false));
    srv.listen(port, '127.0.0.1', () => srv.close(() => resolve(true)));
  });
}

/** A TCP port free on 127.0.0.1 right now (the servers and tests pick their ports with it). */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => resolve(port));
    });
  });
}
