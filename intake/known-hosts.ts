import { createHash, createHmac } from 'node:crypto';
import { readText } from './files';

/*
 * Host keys as OpenSSH names and pins them: a key's fingerprint, and the keys a known_hosts file pins
 * or revokes for a host. Read by the SSH transport (device/transport/ssh.ts), by `init` and the
 * inventory's known_hosts pins (intake/inventory-pin.ts), and by the simulator.
 */

/** OpenSSH-style fingerprint of a public key blob: `SHA256:<base64 without padding>`. */
export function sshFingerprint(keyBlob: Buffer): string {
  return `SHA256:${createHash('sha256').update(keyBlob).digest('base64').replace(/=+$/, '')}`;
}

/** Does a known_hosts host field (`name,[name]:port,|1|salt|hash`) name one of `names`? */
function hostFieldMatches(field: string, names: string[]): boolean {
  for (const entry of field.split(',')) {
    if (entry.startsWith('|1|')) {
      // Hashed entry (HashKnownHosts yes): HMAC-SHA1 keyed by the salt over the host name.
      const [salt, hash] = entry.slice(3).split('|');
      if (!salt || !hash) continue;
      const key = Buffer.from(salt, 'base64');
      if (names.some((n) => createHmac('sha1', key).update(n).digest('base64') === hash)) return true;
    } else if (names.includes(entry)) {
      return true;
    }
  }
  return false;
}

/** An OpenSSH host pattern (`*` any run, `?` one character) as a whole-name matcher. */
function hostPattern(pattern: string): RegExp {
  return new RegExp(
    `^${pattern
      .replace(/[.+^${}()|[\]\\]/g, '\\$&')
      .replace(/\*/g, '.*')
      .replace(/\?/g, '.')}$`,
    'i',
  );
}

/**
 * Does a `@revoked` line's host field name one of `names`? Revocation reads the field as OpenSSH does,
 * wildcards and negations included (`*`, `*.example.com`, `10.0.0.?`, `!bastion`): a key revoked for
 * every host must not stay pinned for one of them because the pin names it exactly.
 */
function revokedFieldMatches(field: string, names: string[]): boolean {
  let matched = false;
  for (const entry of field.split(',')) {
    if (entry.startsWith('!')) {
      const negated = hostPattern(entry.slice(1));
      if (names.some((n) => negated.test(n))) return false;
    } else if (entry.startsWith('|1|')) {
      matched ||= hostFieldMatches(entry, names);
    } else {
      const pattern = hostPattern(entry);
      matched ||= names.some((n) => pattern.test(n));
    }
  }
  return matched;
}

/** Keys pinned for, and keys revoked for, host:port in a known_hosts file. */
function knownHostKeys(file: string, host: string, port: number): { pinned: string[]; revoked: Set<string> } {
  const names = port === 22 ? [host, `[${host}]:22`] : [`[${host}]:${port}`];
  const pinned: string[] = [];
  const revoked = new Set<string>();
  // A regular file of bounded size only: a FIFO or /dev/zero named here would stall or flood the worker.
  for (const line of readText(file).split('\n')) {
    let parts = line.trim().split(/\s+/);
    if (parts.length < 3 || parts[0]!.startsWith('#')) continue;
    const marker = parts[0]!.startsWith('@') ? parts[0] : undefined;
    if (marker) parts = parts.slice(1);
    if (parts.length < 3) continue;
    if (marker === '@revoked') {
      if (revokedFieldMatches(parts[0]!, names)) revoked.add(sshFingerprint(Buffer.from(parts[2]!, 'base64')));
    } else if (!marker && hostFieldMatches(parts[0]!, names)) {
      pinned.push(sshFingerprint(Buffer.from(parts[2]!, 'base64')));
    }
  }
  return { pinned, revoked };
}

/**
 * Fingerprints pinned for host:port in a known_hosts file (plain and hashed entries; pins name hosts
 * exactly). A key marked `@revoked` for any host pattern naming host:port is never pinned;
 * `@cert-authority` lines are not supported and ignored.
 */
export function knownHostFingerprints(file: string, host: string, port: number): string[] {
  const { pinned, revoked } = knownHostKeys(file, host, port);
  return pinned.filter((f) => !revoked.has(f));
}

/** Fingerprints a known_hosts file revokes for host:port: they stay refused even when pinned by `hostKey`. */
export function revokedHostFingerprints(file: string, host: string, port: number): Set<string> {
  return knownHostKeys(file, host, port).revoked;
}
