import type { IncomingMessage } from 'node:http';
import { HttpRefusal } from './answer';

/**
 * Request bodies, bounded: in size (413 TOO_LARGE) and, where a server asks, in time (408 BODY_TIMEOUT),
 * and read as the JSON object both servers speak (400 INVALID_INPUT when it is not one).
 */

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
  max: number,
  timeout?: { ms: number; boundMs: number },
  /**
   * Told of every chunk read, the ones past the limit too (the gateway counts the bytes it read). Through
   * here, not a 'data' listener of the caller's: one attached before readBody starts the body flowing, and
   * what flows before readBody listens is lost.
   */
  onChunk?: (chunk: Buffer) => void,
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
      onChunk?.(chunk);
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
