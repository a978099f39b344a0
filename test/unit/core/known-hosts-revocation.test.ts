import { createHmac, generateKeyPairSync, randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { knownHostFingerprints, revokedHostFingerprints, sshFingerprint } from '../../../intake/known-hosts';

/** An ed25519 host key as a known_hosts line carries it: `ssh-ed25519 <base64 blob>`. */
function hostKey(): { line: string; fingerprint: string } {
  const raw = generateKeyPairSync('ed25519').publicKey.export({ format: 'der', type: 'spki' }).subarray(-32);
  const type = Buffer.from('ssh-ed25519');
  const blob = Buffer.concat([Buffer.from([0, 0, 0, type.length]), type, Buffer.from([0, 0, 0, 32]), raw]);
  return { line: `ssh-ed25519 ${blob.toString('base64')}`, fingerprint: sshFingerprint(blob) };
}

describe('known_hosts: @revoked applies to every host it names, wildcards included', () => {
  const dir = mkdtempSync(join(tmpdir(), 'wavegate-known-hosts-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const key = hostKey();
  const file = (name: string, text: string) => {
    const path = join(dir, name);
    writeFileSync(path, text);
    return path;
  };

  it('a key revoked for "*" is not pinned for a host listed by its exact name', () => {
    const path = file('star', `web-01.example.com ${key.line}\n@revoked * ${key.line}\n`);
    expect(knownHostFingerprints(path, 'web-01.example.com', 22)).toEqual([]);
  });

  it('a key revoked for "*.example.com" or "10.0.0.?" is not pinned for a host those patterns match, on any port', () => {
    const domain = file(
      'domain',
      `[web-01.example.com]:2222,10.0.0.7 ${key.line}\n@revoked *.example.com,[*.example.com]:*,10.0.0.? ${key.line}\n`,
    );
    expect(knownHostFingerprints(domain, 'web-01.example.com', 2222)).toEqual([]);
    expect(knownHostFingerprints(domain, '10.0.0.7', 22)).toEqual([]);
    // A pattern that does not name the host leaves its pin alone.
    const other = file('other', `web-01.example.com ${key.line}\n@revoked *.example.org ${key.line}\n`);
    expect(knownHostFingerprints(other, 'web-01.example.com', 22)).toEqual([key.fingerprint]);
  });

  it('a negated pattern exempts its host, as OpenSSH reads it', () => {
    const path = file('negated', `bastion ${key.line}\nweb-01 ${key.line}\n@revoked *,!bastion ${key.line}\n`);
    expect(knownHostFingerprints(path, 'bastion', 22)).toEqual([key.fingerprint]);
    expect(knownHostFingerprints(path, 'web-01', 22)).toEqual([]);
  });

  it('a hashed @revoked entry revokes the key for the host it hashes', () => {
    const salt = randomBytes(20);
    const hashed = `|1|${salt.toString('base64')}|${createHmac('sha1', salt).update('web-01').digest('base64')}`;
    const path = file('hashed', `web-01 ${key.line}\n@revoked ${hashed} ${key.line}\n`);
    expect(knownHostFingerprints(path, 'web-01', 22)).toEqual([]);
  });

  it('revokedHostFingerprints lists the key, so an ssh.hostKey pin of it is refused too', () => {
    const path = file('for-host-key', `@revoked * ${key.line}\n`);
    expect([...revokedHostFingerprints(path, '192.0.2.1', 22)]).toEqual([key.fingerprint]);
  });
});
