import type { IncomingMessage, ServerResponse } from 'node:http';

/**
 * The gateway's HTTP plumbing: bounded request bodies and one error shape, `{ code, message }`, for
 * every refusal (docs/formats.md, "Gateway HTTP API").
 */
export const MAX_BODY_BYTES = 256 * 1024;

export class HttpRefusal extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/**
 * The whole body, or HttpRefusal 413 past `max` bytes. What follows the limit is read and thrown away
 * (up to 16 times the limit, then the connection is cut), so the client can still read the 413.
 */
export function readBody(req: IncomingMessage, max = MAX_BODY_BYTES): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let refused = false;
    const refuse = (message: string) => {
      if (refused) return;
      refused = true;
      chunks.length = 0;
      reject(new HttpRefusal(413, 'TOO_LARGE', message));
    };
    const declared = Number(req.headers['content-length'] ?? '0');
    if (declared > max) refuse(`the request body is ${declared} bytes, above the limit of ${max}`);
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (refused) {
        if (size > 16 * max) req.destroy();
        return;
      }
      if (size > max) return refuse(`the request body is above the limit of ${max} bytes`);
      chunks.push(chunk);
    });
    req.on('end', () => {
      if (!refused) resolve(Buffer.concat(chunks));
    });
    req.on('error', (err) => {
      if (!refused) reject(err);
    });
  });
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

/** A JSON object body, or HttpRefusal 400 naming what is wrong. */
export function parseJsonObject(body: Buffer): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(body.toString('utf8') || '{}');
  } catch {
    throw new HttpRefusal(400, 'INVALID_INPUT', 'the request body is not JSON');
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    throw new HttpRefusal(400, 'INVALID_INPUT', 'the request body must be a JSON object');
  return value as Record<string, unknown>;
}
