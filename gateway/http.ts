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
 * (up to 16 times the limit, then the connection is cut), so the client can still read the 413. Once
 * settled, the listeners left on the request hold nothing of the body: a long-poll keeps its request for
 * up to a minute, and through them it kept the body (about 17 MiB at 10,000 held long-polls). With
 * `timeout`, a body that has not ended within `ms` (what is left of the bound, `boundMs`, counted from
 * the headers) is HttpRefusal 408 BODY_TIMEOUT (the caller closes the connection).
 */
export function readBody(
  req: IncomingMessage,
  max = MAX_BODY_BYTES,
  timeout?: { ms: number; boundMs: number },
): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    let chunks: Buffer[] = [];
    let settle: { resolve: (body: Buffer) => void; reject: (err: unknown) => void } | undefined = { resolve, reject };
    let size = 0;
    let refused = false;
    const timer =
      timeout === undefined
        ? undefined
        : setTimeout(
            () =>
              finish((s) =>
                s.reject(
                  new HttpRefusal(
                    408,
                    'BODY_TIMEOUT',
                    `the request body did not arrive within ${timeout.boundMs / 1000} s of its headers (${size} of ${req.headers['content-length'] ?? 'an undeclared number of'} bytes)`,
                  ),
                ),
              ),
            timeout.ms,
          );
    const finish = (outcome: (s: NonNullable<typeof settle>) => void) => {
      if (timer) clearTimeout(timer);
      if (settle) outcome(settle);
      settle = undefined;
      chunks = [];
    };
    const refuse = (message: string) => {
      if (refused) return;
      refused = true;
      finish((s) => s.reject(new HttpRefusal(413, 'TOO_LARGE', message)));
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
      const body = Buffer.concat(chunks);
      finish((s) => s.resolve(body));
    });
    req.on('error', (err) => finish((s) => s.reject(err)));
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

/**
 * That the agent closed its connection before its answer: a flag and the callbacks waiting on it. An AbortController
 * does the same through an EventTarget (two Maps and a listener record: about 1.2 KB a request), and a long-poll holds
 * its own for the whole wait (bench/README.md, "Gateway memory").
 */
export class AgentGone {
  aborted = false;
  private waiting: Array<() => void> | undefined;

  /** Run `callback` once when the agent goes (at once if it has); the function returned forgets it. */
  whenGone(callback: () => void): () => void {
    if (this.aborted) {
      callback();
      return () => {};
    }
    this.waiting ??= [];
    this.waiting.push(callback);
    return () => {
      const i = this.waiting?.indexOf(callback) ?? -1;
      if (i >= 0) this.waiting!.splice(i, 1);
    };
  }

  abort(): void {
    if (this.aborted) return;
    this.aborted = true;
    const waiting = this.waiting;
    this.waiting = undefined;
    for (const callback of waiting ?? []) callback();
  }
}
