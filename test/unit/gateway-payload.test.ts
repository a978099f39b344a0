import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { createServer, request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { Revision } from '../../core/revision';
import { keyPairFromSeed, signRevision } from '../../core/signing';
import { envelopeDigestOf, type TwinView } from '../../core/twin';
import { HttpRefusal } from '../../http/answer';
import { openPayload, payloadEntry, sendPayload, PAYLOAD_CHUNK_BYTES } from '../../gateway/payload';
import { scratchDir } from '../support/harness';
import { refusal as refusalOf, rejection as rejectionOf } from '../support/refusal';

/**
 * Which file the gateway serves a device (gateway/payload.ts): only a payload entry in the signed body
 * of that device's desired envelope for that profile and revision, found by the entry under the
 * gateway's profiles root with the worker's rules.
 */
describe('gateway payloads', () => {
  const scratch = scratchDir('gateway-payload');
  afterAll(() => scratch.cleanup());
  const root = join(scratch.dir, 'profiles');
  const body = Buffer.from('the signed bytes\n');
  const sha256 = createHash('sha256').update(body).digest('hex');
  mkdirSync(join(root, 'app', 'payload'), { recursive: true });
  writeFileSync(join(root, 'app', 'payload', 'conf'), body);
  writeFileSync(join(root, 'app', 'secret.txt'), 'not a payload');
  const pair = keyPairFromSeed(randomBytes(32));

  const viewWith = (payload: Revision['payload'], revision = 2): TwinView => {
    const envelope = signRevision(
      { profile: 'app', revision, apply: 'true', verify: 'true', payload, risk: 'risky' },
      pair,
      { now: Date.now() },
    );
    const holder = { rollout: 'r', run: 'x', activity: '1', attempt: 1 };
    return {
      deviceId: 'dev-1',
      version: 1,
      desired: {
        app: {
          requestId: 'r:x:1',
          profile: 'app',
          revision,
          steps: { profile: 'app', revision, apply: '', verify: '', payload: [], envelope },
          envelopeDigest: envelopeDigestOf(envelope),
          holder,
          rollout: 'r',
          fromRevision: null,
          setAt: '',
        },
      },
      report: null,
      lastSeenAt: null,
      reverify: false,
    };
  };
  const refusal = (fn: () => unknown): HttpRefusal => refusalOf(fn, HttpRefusal);
  const rejection = (p: Promise<unknown>): Promise<HttpRefusal> => rejectionOf(p, HttpRefusal);
  /** What payloadFor was: the entry, the file opened and checked, its chunks gathered. */
  const payloadFor = async (
    view: TwinView | null,
    root: string,
    profile: string,
    revision: number,
    name: string,
  ): Promise<Buffer> => {
    const opened = await openPayload(root, profile, payloadEntry(view, profile, revision, name));
    try {
      const chunks: Buffer[] = [];
      for await (const c of opened.chunks()) chunks.push(c);
      return Buffer.concat(chunks);
    } finally {
      await opened.close();
    }
  };

  it('serves the signed entry of the desired revision', async () => {
    expect(
      await payloadFor(
        viewWith([{ name: 'conf', sha256, size: body.length, source: 'payload/conf' }]),
        root,
        'app',
        2,
        'conf',
      ),
    ).toEqual(body);
  });

  it('403 for another revision, another profile, a name the envelope does not list, or no twin', () => {
    const view = viewWith([{ name: 'conf', sha256, size: body.length, source: 'payload/conf' }]);
    expect(refusal(() => payloadEntry(view, 'app', 1, 'conf'))).toMatchObject({
      status: 403,
      code: 'FORBIDDEN',
      message: expect.stringContaining('that is r2'),
    });
    expect(refusal(() => payloadEntry(view, 'other', 2, 'conf')).status).toBe(403);
    expect(refusal(() => payloadEntry(view, 'app', 2, 'secret.txt')).status).toBe(403);
    expect(refusal(() => payloadEntry(null, 'app', 2, 'conf')).status).toBe(403);
  });

  it('refuses a signed source outside payload/, and a local file that is not the signed one', async () => {
    const outside = viewWith([{ name: 'conf', sha256, size: 13, source: 'secret.txt' }]);
    expect(await rejection(payloadFor(outside, root, 'app', 2, 'conf'))).toMatchObject({
      status: 409,
      code: 'PAYLOAD_OUTSIDE_ROOT',
    });
    const wrong = viewWith([{ name: 'conf', sha256: 'ab'.repeat(32), size: body.length, source: 'payload/conf' }]);
    expect(await rejection(payloadFor(wrong, root, 'app', 2, 'conf'))).toMatchObject({
      status: 409,
      code: 'PAYLOAD_DIGEST_MISMATCH',
    });
    const missing = viewWith([{ name: 'gone', sha256, size: body.length, source: 'payload/gone' }]);
    expect(await rejection(payloadFor(missing, root, 'app', 2, 'gone'))).toMatchObject({
      status: 404,
      code: 'PAYLOAD_MISSING',
    });
    const bigger = viewWith([{ name: 'conf', sha256, size: body.length + 1, source: 'payload/conf' }]);
    expect(await rejection(payloadFor(bigger, root, 'app', 2, 'conf'))).toMatchObject({
      status: 409,
      code: 'PAYLOAD_SIZE_MISMATCH',
    });
  });

  it('streams a large file from disk in chunks, whole and exact, over a real HTTP answer', async () => {
    const big = randomBytes(5 * PAYLOAD_CHUNK_BYTES + 123);
    writeFileSync(join(root, 'app', 'payload', 'big.bin'), big);
    const entry = {
      name: 'big.bin',
      sha256: createHash('sha256').update(big).digest('hex'),
      size: big.length,
      source: 'payload/big.bin',
    };
    const opened = await openPayload(root, 'app', entry);
    let most = 0;
    const chunks: Buffer[] = [];
    for await (const c of opened.chunks()) {
      most = Math.max(most, c.length);
      chunks.push(c);
    }
    expect(Buffer.concat(chunks).equals(big)).toBe(true);
    // Never the whole file at once: the gateway holds a chunk, not the payload.
    expect(chunks.length).toBe(6);
    expect(most).toBeLessThanOrEqual(PAYLOAD_CHUNK_BYTES);
    await opened.close();
    const server = createServer((_req, res) => void openPayload(root, 'app', entry).then((p) => sendPayload(res, p)));
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    try {
      const got = await new Promise<Buffer>((resolve, reject) =>
        request({ host: '127.0.0.1', port: (server.address() as AddressInfo).port, path: '/' }, (res) => {
          const parts: Buffer[] = [];
          res.on('data', (c: Buffer) => parts.push(c));
          res.on('end', () => resolve(Buffer.concat(parts)));
          res.on('error', reject);
        })
          .on('error', reject)
          .end(),
      );
      expect(got.equals(big)).toBe(true);
    } finally {
      server.close();
    }
  });

  it('a file changed after it was checked is never sent whole: the last chunk is held until the digest matched', async () => {
    const original = randomBytes(3 * PAYLOAD_CHUNK_BYTES);
    const path = join(root, 'app', 'payload', 'swapped.bin');
    writeFileSync(path, original);
    const entry = {
      name: 'swapped.bin',
      sha256: createHash('sha256').update(original).digest('hex'),
      size: original.length,
      source: 'payload/swapped.bin',
    };
    const opened = await openPayload(root, 'app', entry);
    // Same size, other bytes, written in place after the open's check.
    const changed = Buffer.from(original);
    changed[changed.length - 1] ^= 0xff;
    writeFileSync(path, changed);
    const got: Buffer[] = [];
    const err = await rejectionOf(
      (async () => {
        for await (const c of opened.chunks()) got.push(c);
      })(),
      Error,
    );
    await opened.close();
    expect(err.message).toContain('PAYLOAD_DIGEST_MISMATCH');
    expect(Buffer.concat(got).length).toBeLessThan(original.length);
  });
});
