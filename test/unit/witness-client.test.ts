import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { requestCosignature } from '../../audit/witness-client';
import { freePort } from '../../sim/ports';

/**
 * audit/witness-client.ts against a real HTTP server on loopback that answers as scripted: what is retried (a
 * network error, a 5xx) and what is not (a refusal), the bounds (answer size, the whole call's time), and the
 * values it returns. (Against the real `wavegate witness`: test/e2e/witness.test.ts.)
 */

const LINE = `— wavegate-witness ${Buffer.alloc(76, 7).toString('base64')}\n`;
let server: Server | undefined;
afterEach(async () => {
  server?.closeAllConnections();
  await new Promise((r) => (server ? server.close(r) : r(undefined)));
  server = undefined;
});

/** A server answering its n-th request (from 0) with `script(n, req, res)`; resolves with its URL and the asks. */
async function scripted(script: (n: number, req: IncomingMessage, res: ServerResponse, body: string) => void) {
  const bodies: string[] = [];
  server = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      bodies.push(body);
      script(bodies.length - 1, req, res, body);
    });
  });
  await new Promise<void>((r) => server!.listen(0, '127.0.0.1', () => r()));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, bodies };
}

const json = (res: ServerResponse, status: number, value: unknown) => {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(value));
};

describe('requestCosignature', () => {
  it('posts the note and the base64 proof to /v1/add-checkpoint, and returns the cosignature lines', async () => {
    let path = '';
    const { url, bodies } = await scripted((_, req, res) => {
      path = `${req.method} ${req.url}`;
      res.end(LINE);
    });
    const answer = await requestCosignature(url, 'note\n', [new Uint8Array(32).fill(1)]);
    expect(answer).toEqual({ ok: true, lines: [LINE] });
    expect(path).toBe('POST /v1/add-checkpoint');
    expect(JSON.parse(bodies[0]!)).toEqual({ checkpoint: 'note\n', proof: [Buffer.alloc(32, 1).toString('base64')] });
  });

  it('retries a 5xx with backoff, then succeeds', async () => {
    const { url, bodies } = await scripted((n, _, res) =>
      n < 2 ? json(res, 503, { code: 'BUSY', message: 'busy' }) : res.end(LINE),
    );
    const started = Date.now();
    expect(await requestCosignature(url, 'n\n', [], { backoffMs: 100 })).toEqual({ ok: true, lines: [LINE] });
    expect(bodies).toHaveLength(3);
    expect(Date.now() - started).toBeGreaterThanOrEqual(300); // 100 + 200
  });

  it('returns a refusal at once, not retried: 409 CONFLICT with the witness message, 403, 400', async () => {
    for (const [status, code, expected] of [
      [409, 'CONFLICT', 'CONFLICT'],
      [403, 'FORBIDDEN', 'INVALID_STATE'],
      [400, 'INVALID_INPUT', 'INVALID_INPUT'],
    ] as const) {
      const { url, bodies } = await scripted((_, __, res) => json(res, status, { code, message: 'wavegate/r: why' }));
      expect(await requestCosignature(url, 'n\n', [])).toEqual({
        ok: false,
        code: expected,
        status,
        witnessCode: code,
        message: `the witness refused (${status} ${code}): wavegate/r: why`,
      });
      expect(bodies).toHaveLength(1);
      server!.closeAllConnections();
      await new Promise((r) => server!.close(r));
    }
  });

  it('a network error is retried every attempt, then UNAVAILABLE naming the last error', async () => {
    const port = await freePort(); // nothing listens there
    const answer = await requestCosignature(`http://127.0.0.1:${port}`, 'n\n', [], { attempts: 3, backoffMs: 10 });
    expect(answer).toMatchObject({
      ok: false,
      code: 'UNAVAILABLE',
      message: expect.stringMatching(/no cosignature after 3 tries within 10000 ms \(last: ECONNREFUSED\)/),
    });
  });

  it('bounded: an answer above the limit is FAILED, a silent witness ends within the time given', async () => {
    const big = await scripted((_, __, res) => res.end(LINE.repeat(1000)));
    expect(await requestCosignature(big.url, 'n\n', [], { maxAnswerBytes: 4096 })).toMatchObject({
      ok: false,
      code: 'FAILED',
      message: expect.stringContaining('above 4096 bytes'),
    });
    server!.closeAllConnections();
    await new Promise((r) => server!.close(r));
    await scripted(() => {}); // never answers
    const started = Date.now();
    const silent = await requestCosignature(`http://127.0.0.1:${(server!.address() as AddressInfo).port}`, 'n\n', [], {
      timeoutMs: 600,
    });
    expect(silent).toMatchObject({ ok: false, code: 'UNAVAILABLE', message: expect.stringContaining('no answer') });
    expect(Date.now() - started).toBeLessThan(2_000);
  });

  it('a 200 that is not cosignature lines is FAILED; a URL that is not http(s) is INVALID_INPUT', async () => {
    const { url } = await scripted((_, __, res) => res.end('<html>proxy</html>'));
    expect(await requestCosignature(url, 'n\n', [])).toMatchObject({ ok: false, code: 'FAILED', status: 200 });
    expect(await requestCosignature('ftp://x', 'n\n', [])).toMatchObject({ ok: false, code: 'INVALID_INPUT' });
  });
});
