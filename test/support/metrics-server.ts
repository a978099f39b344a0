import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

/**
 * A real HTTP server on 127.0.0.1 for health-probe tests: each path answers with a configured
 * status and body, or hangs (accepts the request and never answers) until the server closes.
 * Also serves Prometheus text exposition at whatever path a test sets, for a real Prometheus to scrape.
 */
export type RouteAnswer = { status?: number; body?: string; contentType?: string } | 'hang';

export interface MetricsServer {
  /** `http://127.0.0.1:<port>` */
  url: string;
  /** `127.0.0.1:<port>`, as a Prometheus scrape target. */
  hostPort: string;
  /** Replace what a path answers (a path without a route answers 404). */
  route(path: string, answer: RouteAnswer): void;
  /** Requests received for a path (query string ignored). */
  hits(path: string): number;
  /** Headers of the last request for a path. */
  lastHeaders(path: string): IncomingMessage['headers'] | undefined;
  close(): Promise<void>;
}

/** Prometheus text exposition of gauges, e.g. `{ wavegate_error_ratio: 0.2 }`. */
export function exposition(gauges: Record<string, number>): string {
  return Object.entries(gauges)
    .map(([name, value]) => `# TYPE ${name} gauge\n${name} ${value}\n`)
    .join('');
}

export async function startMetricsServer(routes: Record<string, RouteAnswer> = {}): Promise<MetricsServer> {
  const table = new Map<string, RouteAnswer>(Object.entries(routes));
  const counts = new Map<string, number>();
  const headers = new Map<string, IncomingMessage['headers']>();
  const sockets = new Set<Socket>();
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const path = (req.url ?? '/').split('?')[0]!;
    counts.set(path, (counts.get(path) ?? 0) + 1);
    headers.set(path, req.headers);
    const answer = table.get(path);
    if (answer === 'hang') return; // the socket stays open until the client gives up or we close
    if (!answer) {
      res.writeHead(404, { 'content-type': 'text/plain' }).end(`no route ${path}\n`);
      return;
    }
    res
      .writeHead(answer.status ?? 200, { 'content-type': answer.contentType ?? 'text/plain; charset=utf-8' })
      .end(answer.body ?? '');
  });
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    hostPort: `127.0.0.1:${port}`,
    route: (path, answer) => void table.set(path, answer),
    hits: (path) => counts.get(path) ?? 0,
    lastHeaders: (path) => headers.get(path),
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}
