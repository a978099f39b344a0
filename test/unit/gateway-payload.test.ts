import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { Revision } from '../../core/revision';
import { keyPairFromSeed, signRevision } from '../../core/signing';
import { envelopeDigestOf, type TwinView } from '../../core/twin';
import { HttpRefusal } from '../../gateway/http';
import { payloadFor } from '../../gateway/payload';
import { scratchDir } from '../support/harness';
import { refusal as refusalOf } from '../support/refusal';

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
    const envelope = signRevision({ profile: 'app', revision, apply: 'true', verify: 'true', payload, risk: 'risky' }, pair, { now: Date.now() });
    const holder = { rollout: 'r', run: 'x', activity: '1', attempt: 1 };
    return {
      deviceId: 'dev-1',
      version: 1,
      desired: { app: { requestId: 'r:x:1', profile: 'app', revision, steps: { profile: 'app', revision, apply: '', verify: '', payload: [], envelope }, envelopeDigest: envelopeDigestOf(envelope), holder, rollout: 'r', fromRevision: null, setAt: '' } },
      report: null,
      lastSeenAt: null,
      reverify: false,
    };
  };
  const refusal = (fn: () => unknown): HttpRefusal => refusalOf(fn, HttpRefusal);

  it('serves the signed entry of the desired revision', () => {
    expect(payloadFor(viewWith([{ name: 'conf', sha256, size: body.length, source: 'payload/conf' }]), root, 'app', 2, 'conf')).toEqual(body);
  });

  it('403 for another revision, another profile, a name the envelope does not list, or no twin', () => {
    const view = viewWith([{ name: 'conf', sha256, size: body.length, source: 'payload/conf' }]);
    expect(refusal(() => payloadFor(view, root, 'app', 1, 'conf'))).toMatchObject({ status: 403, code: 'FORBIDDEN', message: expect.stringContaining('that is r2') });
    expect(refusal(() => payloadFor(view, root, 'other', 2, 'conf')).status).toBe(403);
    expect(refusal(() => payloadFor(view, root, 'app', 2, 'secret.txt')).status).toBe(403);
    expect(refusal(() => payloadFor(null, root, 'app', 2, 'conf')).status).toBe(403);
  });

  it('refuses a signed source outside payload/, and a local file that is not the signed one', () => {
    const outside = viewWith([{ name: 'conf', sha256, size: 13, source: 'secret.txt' }]);
    expect(refusal(() => payloadFor(outside, root, 'app', 2, 'conf'))).toMatchObject({ status: 409, code: 'PAYLOAD_OUTSIDE_ROOT' });
    const wrong = viewWith([{ name: 'conf', sha256: 'ab'.repeat(32), size: body.length, source: 'payload/conf' }]);
    expect(refusal(() => payloadFor(wrong, root, 'app', 2, 'conf'))).toMatchObject({ status: 409, code: 'PAYLOAD_DIGEST_MISMATCH' });
    const missing = viewWith([{ name: 'gone', sha256, size: body.length, source: 'payload/gone' }]);
    expect(refusal(() => payloadFor(missing, root, 'app', 2, 'gone'))).toMatchObject({ status: 404, code: 'PAYLOAD_MISSING' });
  });
});
