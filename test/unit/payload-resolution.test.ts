import { spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { applyToDevice, EnvelopeRejected, signedSteps, type RevisionSteps } from '../../device/steps';
import type { DeviceTarget } from '../../core/rollout-state';
import { parseRevision } from '../../core/revision';
import { keyPairFromSeed, parseTrust, pinOf, signRevision, type Trust } from '../../core/signing';
import { startFleet, type Fleet } from '../../sim';
import { scratchDir } from '../support/harness';
import { refusal, rejection as rejectionOf } from '../support/refusal';

/**
 * The worker finds a payload file by the signed revision's own entry, under its own profile's payload
 * directory, and refuses anything else before reading it: no path from the rollout input, no file
 * outside payload/, no link, FIFO or device, no file of another size; and a file whose digest does not
 * match is refused without printing the digest it has.
 */
describe('payload files: resolved by the signed entry under the worker payload directory only', () => {
  const scratch = scratchDir('payload');
  const profilesRoot = join(scratch.dir, 'profiles');
  const payloadDir = join(profilesRoot, 'pay', 'payload');
  const body = 'signed payload body\n';
  const digest = createHash('sha256').update(body).digest('hex');
  const key = keyPairFromSeed(new Uint8Array(randomBytes(32)));
  const trust: Trust = parseTrust({ threshold: 1, pins: [pinOf(key)] }, 'test trust');
  const now = Date.now();
  let fleet: Fleet;

  /** Steps of a signed revision whose one payload entry has this source, size and digest. */
  const signed = (source: string, opts: { size?: number; sha256?: string } = {}): RevisionSteps => {
    const revision = parseRevision(
      {
        profile: 'pay',
        revision: 2,
        apply: 'true',
        verify: 'false',
        risk: 'safe',
        payload: [{ name: 'file', sha256: opts.sha256 ?? digest, size: opts.size ?? body.length, source }],
      },
      'test revision',
    );
    const envelope = signRevision(revision, key, { now, validityDays: 30 });
    // What the rollout input says about the file's location is never used.
    return {
      profile: 'pay',
      revision: 2,
      apply: 'true',
      verify: 'false',
      payload: [{ name: 'file', sha256: digest, size: body.length, source: '/etc/passwd' }],
      envelope,
    };
  };
  const resolve = (steps: RevisionSteps) => signedSteps(steps, { trust, requireEnvelope: true, now, profilesRoot });
  const rejection = (fn: () => unknown) => refusal(fn, EnvelopeRejected);

  beforeAll(async () => {
    mkdirSync(join(payloadDir, 'sub'), { recursive: true });
    writeFileSync(join(payloadDir, 'good'), body);
    writeFileSync(join(payloadDir, 'longer'), `${body}and more\n`);
    writeFileSync(join(payloadDir, 'same-size'), body.replace('signed', 'forged'));
    writeFileSync(join(profilesRoot, 'pay', 'profile.yaml'), 'name: pay\n');
    symlinkSync(join(payloadDir, 'good'), join(payloadDir, 'link-inside'));
    symlinkSync('/etc/hostname', join(payloadDir, 'link-outside'));
    symlinkSync('/etc', join(payloadDir, 'etc-dir'));
    expect(spawnSync('mkfifo', [join(payloadDir, 'fifo')]).status).toBe(0);
    fleet = await startFleet({ devices: [{ id: 'digest' }], dir: join(scratch.dir, 'fleet') });
  });
  afterAll(async () => {
    await fleet?.stop();
    scratch.cleanup();
  });

  it('the file is the signed source under the worker profile directory, whatever path the rollout input names', () => {
    expect(resolve(signed('payload/good')).payload).toEqual([
      { name: 'file', sha256: digest, size: body.length, source: join(payloadDir, 'good') },
    ]);
  });

  it.each([
    ['a file of the profile beside payload/', 'profile.yaml'],
    ['an absolute path', '/dev/zero'],
    ['a path that climbs out', 'payload/../../../etc/passwd'],
    ['the payload directory itself', 'payload'],
  ])('a signed source outside payload/ (%s) is refused before anything is read', (_what, source) => {
    const err = rejection(() => resolve(signed(source)));
    expect(err.reason).toBe('PAYLOAD_OUTSIDE_ROOT');
    expect(err.message).toContain(`is not inside this worker's payload directory ${payloadDir}`);
  });

  it('a FIFO is refused as not a regular file at once, without opening it (it would block a reader forever)', () => {
    const err = rejection(() => resolve(signed('payload/fifo')));
    expect(err.reason).toBe('PAYLOAD_NOT_REGULAR');
    expect(err.message).toContain('is not a regular file');
  });

  it.each([
    ['to a file inside', 'payload/link-inside'],
    ['to a file outside', 'payload/link-outside'],
    ['through a linked directory', 'payload/etc-dir/hostname'],
  ])('a symbolic link (%s) is refused', (_what, source) => {
    const err = rejection(() => resolve(signed(source)));
    expect(err.reason).toBe('PAYLOAD_NOT_REGULAR');
    expect(err.message).toContain('is a symbolic link');
  });

  it('a file of another size than the signed one is refused before it is hashed', () => {
    const err = rejection(() => resolve(signed('payload/longer')));
    expect(err.reason).toBe('PAYLOAD_SIZE_MISMATCH');
    expect(err.message).toContain(`has ${body.length + 9} bytes, the signed revision says ${body.length}`);
  });

  it('a missing file is refused naming the signed source', () => {
    const err = rejection(() => resolve(signed('payload/sub/none')));
    expect(err.reason).toBe('PAYLOAD_MISSING');
    expect(err.message).toContain('source "payload/sub/none"');
  });

  it('a file of the signed size with another digest is refused before upload, and its local digest is never printed', async () => {
    const d = fleet.device('digest');
    const target: DeviceTarget = {
      id: 'digest',
      host: d.host,
      port: d.port,
      user: fleet.user,
      pool: 'p',
      class: 'server',
      ssh: { hostKey: d.hostKeyFingerprint, key: fleet.clientKeyPath },
    };
    // An unsigned worker still finds the file under its payload directory only, and still checks it.
    const steps: RevisionSteps = {
      profile: 'pay',
      revision: 2,
      apply: 'true',
      verify: 'false',
      payload: [{ name: 'file', sha256: digest, size: body.length, source: 'payload/same-size' }],
    };
    const err = await rejectionOf(
      applyToDevice(target, steps, { commandTimeoutMs: 10_000, profilesRoot: profilesRoot }),
      EnvelopeRejected,
    );
    expect(err).toBeInstanceOf(EnvelopeRejected);
    expect(err.reason).toBe('PAYLOAD_DIGEST_MISMATCH');
    const local = createHash('sha256').update(body.replace('signed', 'forged')).digest('hex');
    expect(err!.message).not.toContain(local);
    expect(err!.message).toContain(`does not have the signed sha256 ${digest}`);
    expect(fleet.sftpUploads('digest')).toBe(0);
  });

  it('an unsigned step naming a file outside the worker payload directory is refused (the worker reads no other file)', () => {
    const steps: RevisionSteps = {
      profile: 'pay',
      revision: 2,
      apply: 'true',
      verify: 'false',
      payload: [{ name: 'file', sha256: digest, size: 0, source: '/dev/zero' }],
    };
    const err = rejection(() => signedSteps(steps, { trust: undefined, requireEnvelope: false, now, profilesRoot }));
    expect(err.reason).toBe('PAYLOAD_OUTSIDE_ROOT');
  });
});
