import { promises as fsp } from 'node:fs';
import * as path from 'node:path';
import { utils as sshUtils, type ParsedKey } from 'ssh2';

export function parseOrThrow(data: string | Buffer, what: string): ParsedKey {
  const parsed = sshUtils.parseKey(data);
  if (parsed instanceof Error) throw new Error(`fleet-sim: cannot parse ${what}: ${parsed.message}`);
  // ssh2 may return an array for multi-key files at runtime (typed as ParsedKey | Error).
  const key = (Array.isArray(parsed) ? (parsed as ParsedKey[])[0] : parsed) as ParsedKey | undefined;
  if (!key) throw new Error(`fleet-sim: no key found in ${what}`);
  return key;
}

/**
 * `ssh2.utils.generateKeyPairSync('ed25519')` strips leading zero bytes from the raw public key, so
 * ~1/256 of the keys it returns are malformed and rejected by parseKey (mscdex/ssh2#1390, #1513).
 * Regenerate until both halves parse and the public blob has the full 32-byte key.
 */
export function generateEd25519(comment?: string): { private: string; public: string; parsed: ParsedKey } {
  for (let attempt = 0; attempt < 64; attempt++) {
    const kp = sshUtils.generateKeyPairSync('ed25519', comment ? { comment } : {});
    const priv = sshUtils.parseKey(kp.private);
    const pub = sshUtils.parseKey(kp.public);
    if (priv instanceof Error || pub instanceof Error) continue;
    const parsed = (Array.isArray(priv) ? (priv as ParsedKey[])[0] : priv) as ParsedKey | undefined;
    // "ssh-ed25519" blob: string(11) "ssh-ed25519" + string(32) key = 4 + 11 + 4 + 32 bytes
    if (parsed?.getPublicSSH().length !== 51 || !parsed.getPublicSSH().equals((pub as ParsedKey).getPublicSSH()))
      continue;
    return { private: kp.private, public: kp.public, parsed };
  }
  throw new Error('fleet-sim: could not generate a well-formed ed25519 key');
}

/** OpenSSH one-line public key without a comment. */
export function publicLine(key: ParsedKey): string {
  return `${key.type} ${key.getPublicSSH().toString('base64')}`;
}

export interface ClientKey {
  /** Path of the OpenSSH-format private key (mode 0600). */
  path: string;
  key: ParsedKey;
  publicLine: string;
}

/**
 * The one client key every device of a fleet accepts. With `given`, that file is reused (and generated
 * there if missing, so shards of one benchmark fleet share a key); otherwise a fresh key is written to
 * `<baseDir>/.sim-keys/id_ed25519` (+ `.pub`).
 */
export async function loadClientKey(baseDir: string, given: string | undefined): Promise<ClientKey> {
  let keyPath: string;
  let privatePem: string;
  if (given) {
    keyPath = path.resolve(given);
    try {
      privatePem = await fsp.readFile(keyPath, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      privatePem = generateEd25519('wavegate-fleet-sim').private;
      await fsp.mkdir(path.dirname(keyPath), { recursive: true });
      await fsp.writeFile(keyPath, privatePem, { mode: 0o600 });
    }
  } else {
    const keyDir = path.join(baseDir, '.sim-keys');
    await fsp.mkdir(keyDir, { recursive: true, mode: 0o700 });
    keyPath = path.join(keyDir, 'id_ed25519');
    privatePem = generateEd25519('wavegate-fleet-sim').private;
    await fsp.writeFile(keyPath, privatePem, { mode: 0o600 });
  }
  await fsp.chmod(keyPath, 0o600);
  const key = parseOrThrow(privatePem, `client key ${keyPath}`);
  const line = publicLine(key);
  if (!given) await fsp.writeFile(`${keyPath}.pub`, `${line}\n`, { mode: 0o644 });
  return { path: keyPath, key, publicLine: line };
}
