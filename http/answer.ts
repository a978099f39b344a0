import type { ServerResponse } from 'node:http';

/**
 * One answer shape for both servers: JSON, never cached, and every refusal `{ code, message }`
 * (docs/formats.md, "Gateway HTTP API"; docs/cli.md, the board).
 */

/** A request refused: its status, a code and a message naming the field and the value (never a secret). */
export class HttpRefusal extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

export function sendJson(res: ServerResponse, status: number, value: unknown): void {
  const body = Buffer.from(JSON.stringify(value));
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': body.length,
    'cache-control': 'no-store',
  });
  res.end(body);
}

export function sendError(
  res: ServerResponse,
  status: number,
  code: string,
  message: string,
  headers: Record<string, string> = {},
): void {
  for (const [k, v] of Object.entries(headers)) res.setHeader(k, v);
  sendJson(res, status, { code, message });
}
