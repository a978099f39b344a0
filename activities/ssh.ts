import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { Client, type ClientChannel, type ConnectConfig } from 'ssh2';
import type { DeviceTarget } from '../core/rollout-state';

/**
 * The ssh transport (DESIGN §4): host keys pinned (an unknown or changed key is refused and never
 * retried), key file or agent, one connection per device operation, command timeouts.
 */
export type TransportErrorKind = 'host-key' | 'auth' | 'config' | 'connect' | 'timeout' | 'dropped';

export class TransportError extends Error {
  constructor(
    readonly kind: TransportErrorKind,
    message: string,
  ) {
    super(message);
    this.name = 'TransportError';
  }

  /** Connection trouble may pass; a wrong host key, a refused login or a bad config will not. */
  get retryable(): boolean {
    return this.kind === 'connect' || this.kind === 'timeout' || this.kind === 'dropped';
  }
}

/** OpenSSH-style fingerprint of a public key blob: `SHA256:<base64 without padding>`. */
export function sshFingerprint(keyBlob: Buffer): string {
  return `SHA256:${createHash('sha256').update(keyBlob).digest('base64').replace(/=+$/, '')}`;
}

/** Fingerprints pinned for host:port in a known_hosts file (plain, non-hashed entries). */
export function knownHostFingerprints(file: string, host: string, port: number): string[] {
  const names = port === 22 ? [host, `[${host}]:22`] : [`[${host}]:${port}`];
  const out: string[] = [];
  for (const line of readFileSync(file, 'utf8').split('\n')) {
    const parts = line.trim().split(/\s+/);
    if (parts.length < 3 || parts[0]!.startsWith('#')) continue;
    if (!parts[0]!.split(',').some((n) => names.includes(n))) continue;
    out.push(sshFingerprint(Buffer.from(parts[2]!, 'base64')));
  }
  return out;
}

export interface ExecResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

export interface SshSession {
  exec(command: string, opts?: { timeoutMs?: number; env?: Record<string, string> }): Promise<ExecResult>;
  /** Upload bytes over SFTP to `remotePath` (relative paths are under the login's home). */
  upload(data: Buffer, remotePath: string): Promise<void>;
  close(): void;
}

const OUTPUT_LIMIT = 64 * 1024; // keep results small: they travel through workflow history

function pinnedFingerprints(target: DeviceTarget): string[] {
  if (target.ssh.hostKey) return [target.ssh.hostKey];
  if (target.ssh.knownHosts) return knownHostFingerprints(target.ssh.knownHosts, target.host, target.port);
  return [];
}

export async function openSsh(target: DeviceTarget, opts: { connectTimeoutMs?: number } = {}): Promise<SshSession> {
  const pins = pinnedFingerprints(target);
  if (pins.length === 0) {
    throw new TransportError('host-key', `${target.id}: no pinned host key (set ssh.hostKey or ssh.knownHosts); refusing to trust an unknown key`);
  }
  const config: ConnectConfig = {
    host: target.host,
    port: target.port,
    username: target.user,
    readyTimeout: opts.connectTimeoutMs ?? 10_000,
    keepaliveInterval: 5_000,
    keepaliveCountMax: 3,
  };
  if (target.ssh.agent) {
    config.agent = process.env.SSH_AUTH_SOCK;
    if (!config.agent) throw new TransportError('config', `${target.id}: ssh.agent is set but SSH_AUTH_SOCK is empty`);
  } else if (target.ssh.key) {
    try {
      config.privateKey = readFileSync(target.ssh.key);
    } catch (err) {
      throw new TransportError('config', `${target.id}: cannot read key file ${target.ssh.key} (${(err as NodeJS.ErrnoException).code})`);
    }
  } else {
    throw new TransportError('config', `${target.id}: no ssh.key file or ssh.agent configured`);
  }
  let seenKey: string | undefined;
  config.hostVerifier = (key: Buffer) => {
    seenKey = sshFingerprint(key);
    return pins.includes(seenKey);
  };

  const client = new Client();
  await new Promise<void>((resolve, reject) => {
    client.once('ready', () => resolve());
    client.once('error', (err: Error & { level?: string; code?: string }) => {
      client.end();
      if (seenKey && !pins.includes(seenKey)) {
        reject(new TransportError('host-key', `${target.id}: host key ${seenKey} does not match the pinned ${pins.join(' or ')}; refusing to connect`));
      } else if (err.level === 'client-authentication') {
        reject(new TransportError('auth', `${target.id}: authentication as ${target.user} failed (${err.message})`));
      } else if (err.level === 'client-timeout') {
        reject(new TransportError('timeout', `${target.id}: connection to ${target.host}:${target.port} timed out`));
      } else {
        reject(new TransportError('connect', `${target.id}: cannot connect to ${target.host}:${target.port} (${err.code ?? err.message})`));
      }
    });
    client.connect(config);
  });
  // After `ready`, a late error (connection dropped) must not crash the process: the pending exec sees it.
  let dropped: Error | undefined;
  client.on('error', (err) => (dropped = err));

  return {
    exec(command, { timeoutMs = 60_000, env } = {}) {
      return new Promise<ExecResult>((resolve, reject) => {
        client.exec(command, { env }, (err, channel: ClientChannel) => {
          if (err) return reject(new TransportError('dropped', `${target.id}: exec failed: ${err.message}`));
          let stdout = '';
          let stderr = '';
          let code: number | null = null;
          let settled = false;
          const timer = setTimeout(() => {
            settled = true;
            channel.close();
            reject(new TransportError('timeout', `${target.id}: command timed out after ${timeoutMs} ms: ${command.slice(0, 80)}`));
          }, timeoutMs);
          channel.on('data', (chunk: Buffer) => (stdout = (stdout + chunk.toString('utf8')).slice(-OUTPUT_LIMIT)));
          channel.stderr.on('data', (chunk: Buffer) => (stderr = (stderr + chunk.toString('utf8')).slice(-OUTPUT_LIMIT)));
          channel.on('exit', (exitCode: number | null) => (code = exitCode));
          channel.on('close', () => {
            clearTimeout(timer);
            if (settled) return;
            settled = true;
            if (code === null) {
              reject(new TransportError('dropped', `${target.id}: connection lost while running: ${command.slice(0, 80)}${dropped ? ` (${dropped.message})` : ''}`));
            } else resolve({ code, stdout, stderr });
          });
        });
      });
    },
    upload(data, remotePath) {
      return new Promise<void>((resolve, reject) => {
        client.sftp((err, sftp) => {
          if (err) return reject(new TransportError('dropped', `${target.id}: sftp unavailable: ${err.message}`));
          sftp.writeFile(remotePath, data, (werr) => {
            sftp.end();
            if (werr) reject(new TransportError('dropped', `${target.id}: upload of ${remotePath} failed: ${werr.message}`));
            else resolve();
          });
        });
      });
    },
    close() {
      client.end();
    },
  };
}
