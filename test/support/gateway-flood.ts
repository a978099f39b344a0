import { spawn, type ChildProcess } from 'node:child_process';
import { connect, type Socket } from 'node:net';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/**
 * The flooding side of test/e2e/gateway-limits.test.ts and bench/gateway-flood.ts: a gateway in its
 * own process (test/support/gateway-child.ts) and raw TCP connections against it.
 */
export interface GatewayChild {
  url: string;
  port: number;
  /** process.memoryUsage() of the gateway process, after a full GC. */
  mem(): Promise<NodeJS.MemoryUsage>;
  stats(): Promise<Record<string, number> | null>;
  logs(): Promise<string[]>;
  stop(): Promise<void>;
}

export async function startGatewayChild(config: {
  root?: string;
  devices?: Record<string, string>;
  limits?: Record<string, number>;
  acceptAgentsWithoutDigest?: boolean;
}): Promise<GatewayChild> {
  // Passed in a file: a fleet's pinned keys do not fit in an argument list.
  const configFile = join(mkdtempSync(join(tmpdir(), 'gateway-child-')), 'config.json');
  writeFileSync(configFile, JSON.stringify(config));
  const child: ChildProcess = spawn(
    process.execPath,
    ['--expose-gc', '--import', 'tsx', join(__dirname, 'gateway-child.ts'), `@${configFile}`],
    {
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      cwd: join(__dirname, '..'),
    },
  );
  const ask = <T>(cmd: string, key: string): Promise<T> =>
    new Promise((resolve) => {
      const on = (m: Record<string, unknown>) => {
        if (key in m) {
          child.off('message', on);
          resolve(m[key] as T);
        }
      };
      child.on('message', on);
      child.send({ cmd });
    });
  const url = await new Promise<string>((resolve, reject) => {
    child.once('message', (m: { url: string }) => resolve(m.url));
    child.once('exit', (code) => reject(new Error(`the gateway child exited ${code} before it was ready`)));
  });
  return {
    url,
    port: Number(new URL(url).port),
    mem: () => ask('mem', 'mem'),
    stats: () => ask('stats', 'stats'),
    logs: () => ask('logs', 'logs'),
    stop: async () => {
      if (child.exitCode !== null) return;
      const exited = new Promise<void>((r) => child.once('exit', () => r()));
      child.disconnect();
      const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
      await exited;
      clearTimeout(timer);
    },
  };
}

export interface FloodConnection {
  socket: Socket;
  /** What came back so far. */
  received(): string;
  closed: Promise<void>;
  isClosed(): boolean;
}

/**
 * `count` connections that each send a request head (`head(i)`, without the blank line's CRLF pair
 * closing it: added here) and then `bodyBytes` of a body declared as `declaredBytes` long: the body is
 * never finished, so a server that waits for it holds the connection and what it read. bodyBytes 0 and
 * head undefined: idle connections that send nothing.
 */
export async function openFlood(
  port: number,
  count: number,
  head: ((i: number) => string) | undefined,
  bodyBytes: number,
  declaredBytes = bodyBytes + 1,
): Promise<FloodConnection[]> {
  const body = Buffer.alloc(bodyBytes, 0x61);
  const out: FloodConnection[] = [];
  for (let i = 0; i < count; i++) {
    const socket = connect(port, '127.0.0.1');
    socket.setNoDelay(true);
    let got = '';
    socket.on('data', (c: Buffer) => {
      if (got.length < 4096) got += c.toString('latin1');
    });
    socket.on('error', () => {});
    let isClosed = false;
    const closed = new Promise<void>((r) =>
      socket.once('close', () => {
        isClosed = true;
        r();
      }),
    );
    await new Promise<void>((r) => {
      socket.once('connect', () => r());
      socket.once('close', () => r());
    });
    if (head && !socket.destroyed) {
      socket.write(`${head(i)}content-length: ${declaredBytes}\r\n\r\n`);
      if (bodyBytes > 0) socket.write(body);
    }
    out.push({ socket, received: () => got, closed, isClosed: () => isClosed });
  }
  return out;
}

export async function closeFlood(flood: FloodConnection[]): Promise<void> {
  for (const c of flood) c.socket.destroy();
  await Promise.all(flood.map((c) => c.closed));
}
