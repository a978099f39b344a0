import type { Duplex } from 'node:stream';
import { Client, type ClientChannel, type ConnectConfig } from 'ssh2';
import { WavegateError } from '../../core/errors';
import type { DeviceTarget, JumpHostTarget } from '../../core/rollout-state';
import { readText } from '../../intake/files';
import { knownHostFingerprints, revokedHostFingerprints, sshFingerprint } from '../../intake/known-hosts';
import { TransportError, type TransportErrorKind } from './errors';
import type { ConnectOptions, ExecOptions, ExecResult } from './types';

/**
 * The ssh connection: host keys pinned (an unknown or changed key is refused and never retried), key
 * file or agent, optional jump host (its own pinned key), one connection per device operation, command
 * timeouts with progress callbacks for activity heartbeats, and every failure classified so the
 * activity knows whether a retry can help. The DeviceSession on top of it is ./ssh-session.ts.
 */

export interface SshSession {
  exec(command: string, opts?: ExecOptions): Promise<ExecResult>;
  /** Upload bytes over SFTP to `remotePath` (relative paths are under the SFTP server's start directory). */
  upload(data: Buffer, remotePath: string, opts?: { timeoutMs?: number }): Promise<void>;
  close(): void;
}

/** `connectTimeoutMs` limits TCP connect + SSH handshake + authentication, per hop (default 10 s). */
export type OpenSshOptions = ConnectOptions;

const OUTPUT_LIMIT = 64 * 1024; // keep results small: they travel through workflow history
const DEFAULT_CONNECT_TIMEOUT_MS = 10_000;
const DEFAULT_PROGRESS_INTERVAL_MS = 5_000;

/** One SSH connection on the way to the device: the jump host or the device itself. */
interface Hop {
  /** How messages name it: the device id, or `<device> via jump host <host:port>`. */
  label: string;
  host: string;
  port: number;
  user: string;
  pins: string[];
  /** How an operator pins the key a re-keyed host presents (`<key>` stands for it), said in a mismatch. */
  repin: string;
}

type ClientError = Error & { level?: string; code?: string | number; reason?: number };

/** A target with its ssh settings: every SSH path needs them, and a target that is never dialled (transport: agent) has none. */
type SshTarget = DeviceTarget & { ssh: NonNullable<DeviceTarget['ssh']> };

function withSshSettings(target: DeviceTarget): SshTarget {
  if (!target.ssh)
    throw new TransportError(
      'config',
      `${target.id}: no ssh settings to dial it with (ssh.hostKey or ssh.knownHosts, and ssh.key or ssh.agent); set them on the device in the inventory`,
    );
  return target as SshTarget;
}

function devicePins(target: SshTarget): string[] {
  if (target.ssh.hostKey) return notRevoked(target, target.ssh.hostKey, target.host, target.port);
  if (target.ssh.knownHosts) return readKnownHosts(target, target.ssh.knownHosts, target.host, target.port);
  return [];
}

function jumpPins(target: SshTarget, jump: JumpHostTarget): string[] {
  if (jump.hostKey) return notRevoked(target, jump.hostKey, jump.host, jump.port);
  if (target.ssh.knownHosts) return readKnownHosts(target, target.ssh.knownHosts, jump.host, jump.port);
  return [];
}

/** A `hostKey` pin, unless the device's known_hosts file (when it has one) revokes that key for the host. */
function notRevoked(target: SshTarget, hostKey: string, host: string, port: number): string[] {
  if (!target.ssh.knownHosts) return [hostKey];
  return readKnownHosts(target, target.ssh.knownHosts, host, port, revokedHostFingerprints).has(hostKey)
    ? []
    : [hostKey];
}

function readKnownHosts(target: DeviceTarget, file: string, host: string, port: number): string[];
function readKnownHosts<T>(
  target: DeviceTarget,
  file: string,
  host: string,
  port: number,
  read: (file: string, host: string, port: number) => T,
): T;
function readKnownHosts(
  target: DeviceTarget,
  file: string,
  host: string,
  port: number,
  read: (file: string, host: string, port: number) => unknown = knownHostFingerprints,
): unknown {
  try {
    return read(file, host, port);
  } catch (err) {
    throw new TransportError('config', `${target.id}: ssh.knownHosts ${unreadableWhy(file, err)}`);
  }
}

/** Why a file the inventory names could not be read: the reader's own words, or the system's code. */
function unreadableWhy(file: string, err: unknown): string {
  return err instanceof WavegateError
    ? err.message
    : `${file}: cannot read file (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`;
}

/** Key file or agent: the same credentials log in to the jump host and the device. */
function credentials(target: SshTarget): Pick<ConnectConfig, 'privateKey' | 'agent'> {
  if (target.ssh.agent) {
    const agent = process.env.SSH_AUTH_SOCK;
    if (!agent)
      throw new TransportError(
        'config',
        `${target.id}: ssh.agent is true but SSH_AUTH_SOCK is not set in the worker's environment`,
      );
    return { agent };
  }
  if (target.ssh.key) {
    try {
      return { privateKey: readText(target.ssh.key) };
    } catch (err) {
      throw new TransportError('config', `${target.id}: ssh.key ${unreadableWhy(target.ssh.key, err)}`);
    }
  }
  throw new TransportError('config', `${target.id}: neither ssh.key nor ssh.agent is set; one is required`);
}

/** Classify a connection that ended before it was ready, from everything ssh2 reported on the way. */
function connectFailure(
  hop: Hop,
  errors: ClientError[],
  seenKey: string | undefined,
  timeoutMs: number,
): TransportError {
  const where = `${hop.host}:${hop.port}`;
  if (seenKey && !hop.pins.includes(seenKey)) {
    return new TransportError(
      'host-key',
      `${hop.label}: host key ${seenKey} at ${where} does not match the pinned ${hop.pins.join(' or ')}; refusing to connect. If the host was re-keyed on purpose, check the new key on the host itself, then ${hop.repin.replace('<key>', seenKey)}`,
    );
  }
  const auth = errors.find((e) => e.level === 'client-authentication');
  if (auth) {
    const agent = errors.find((e) => e.level === 'agent');
    return new TransportError(
      'auth',
      `${hop.label}: authentication as ${hop.user} at ${where} failed (${auth.message}${agent ? `; agent: ${agent.message}` : ''})`,
    );
  }
  if (errors.some((e) => e.level === 'client-timeout')) {
    return new TransportError(
      'timeout',
      `${hop.label}: connection to ${where} timed out after ${timeoutMs} ms (no SSH handshake)`,
    );
  }
  if (errors.some((e) => e.level === 'handshake')) {
    // No common algorithm and the like: the same configuration fails the same way next time.
    const e = errors.find((x) => x.level === 'handshake')!;
    return new TransportError('config', `${hop.label}: SSH handshake with ${where} failed (${e.message})`);
  }
  const first = errors[0];
  const detail = first ? String(first.code ?? first.message) : 'connection closed before the SSH session was ready';
  return new TransportError('connect', `${hop.label}: cannot connect to ${where} (${detail})`);
}

/**
 * One pinned, authenticated SSH connection. Every 'error' ssh2 emits lands in a listener that stays
 * for the client's lifetime: ssh2 emits late errors (after close, after a failed auth), and an
 * 'error' without a listener would crash the worker.
 */
function connectHop(
  hop: Hop,
  auth: Pick<ConnectConfig, 'privateKey' | 'agent'>,
  timeoutMs: number,
  sock?: Duplex,
): Promise<{ client: Client; lastError: () => ClientError | undefined }> {
  const client = new Client();
  const errors: ClientError[] = [];
  client.on('error', (err: ClientError) => errors.push(err));
  let seenKey: string | undefined;
  const config: ConnectConfig = {
    ...auth,
    host: hop.host,
    port: hop.port,
    username: hop.user,
    readyTimeout: timeoutMs,
    // Straight to the one method configured: ssh2's default asks 'none' first, a round trip and two
    // packets per connection that no device of ours answers with anything but "try publickey".
    authHandler: auth.agent ? ['agent'] : ['publickey'],
    keepaliveInterval: 5_000,
    keepaliveCountMax: 3,
    hostVerifier: (key: Buffer) => {
      seenKey = sshFingerprint(key);
      return hop.pins.includes(seenKey);
    },
    ...(sock ? { sock: sock as ConnectConfig['sock'] } : {}),
  };
  return new Promise((resolve, reject) => {
    let settled = false;
    // ssh2 always closes a failed connection, but a guard makes sure a missing 'close' cannot hang us.
    const guard = setTimeout(() => fail(), timeoutMs + 2_000);
    const fail = (): void => {
      if (settled) return;
      settled = true;
      clearTimeout(guard);
      client.destroy();
      if (errors.length === 0) errors.push(Object.assign(new Error('timed out'), { level: 'client-timeout' }));
      reject(connectFailure(hop, errors, seenKey, timeoutMs));
    };
    client.once('ready', () => {
      if (settled) return;
      settled = true;
      clearTimeout(guard);
      resolve({ client, lastError: () => errors[errors.length - 1] });
    });
    client.once('close', fail);
    try {
      client.connect(config);
    } catch (err) {
      // Synchronous refusals: an unparsable key file, a bad option.
      settled = true;
      clearTimeout(guard);
      client.destroy();
      reject(
        new TransportError(
          'config',
          `${hop.label}: cannot start an SSH connection to ${hop.host}:${hop.port} (${(err as Error).message})`,
        ),
      );
    }
  });
}

/** A tunnel from the jump host to the device (`direct-tcpip`), with its own deadline. */
function forwardThrough(jump: Client, target: DeviceTarget, label: string, timeoutMs: number): Promise<ClientChannel> {
  return new Promise((resolve, reject) => {
    let settled = false;
    const timer = setTimeout(() => {
      settled = true;
      reject(
        new TransportError(
          'timeout',
          `${label}: the jump host did not open a tunnel to ${target.host}:${target.port} within ${timeoutMs} ms`,
        ),
      );
    }, timeoutMs);
    try {
      jump.forwardOut('127.0.0.1', 0, target.host, target.port, (err, stream) => {
        clearTimeout(timer);
        if (settled) {
          stream?.close();
          return;
        }
        settled = true;
        if (err) {
          // RFC 4254 reason 1: the jump host forbids forwarding (a setting, not a passing fault).
          const reason = (err as ClientError).reason;
          const kind: TransportErrorKind = reason === 1 ? 'config' : 'connect';
          return reject(
            new TransportError(
              kind,
              `${label}: the jump host cannot reach ${target.host}:${target.port} (${err.message})`,
            ),
          );
        }
        stream.on('error', () => {}); // the device connection sees the loss as its own close
        resolve(stream);
      });
    } catch (err) {
      clearTimeout(timer);
      settled = true;
      reject(
        new TransportError(
          'dropped',
          `${label}: jump host connection lost before the tunnel opened (${(err as Error).message})`,
        ),
      );
    }
  });
}

/**
 * Open one pinned SSH session to a device, through its jump host when it has one. Throws
 * TransportError; `retryable` tells whether another attempt can help.
 */
export async function openSsh(given: DeviceTarget, opts: OpenSshOptions = {}): Promise<SshSession> {
  const target = withSshSettings(given);
  const timeoutMs = opts.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS;
  const pins = devicePins(target);
  if (pins.length === 0) {
    throw new TransportError(
      'host-key',
      `${target.id}: no pinned host key for ${target.host}:${target.port} (set ssh.hostKey or list it in ssh.knownHosts); refusing to trust an unknown key`,
    );
  }
  const auth = credentials(target);
  const jumpTarget = target.ssh.jumpHost;
  let jump: Client | undefined;
  let sock: ClientChannel | undefined;
  let label = target.id;
  if (jumpTarget) {
    const jumpLabel = `${target.id} via jump host ${jumpTarget.host}:${jumpTarget.port}`;
    const jPins = jumpPins(target, jumpTarget);
    if (jPins.length === 0) {
      throw new TransportError(
        'host-key',
        `${jumpLabel}: no pinned host key for the jump host (set ssh.jumpHost.hostKey or list it in ssh.knownHosts); refusing to trust an unknown key`,
      );
    }
    ({ client: jump } = await connectHop(
      {
        label: jumpLabel,
        host: jumpTarget.host,
        port: jumpTarget.port,
        user: jumpTarget.user,
        pins: jPins,
        repin: `set ${target.id}'s ssh.jumpHost.hostKey to <key> in the inventory`,
      },
      auth,
      timeoutMs,
    ));
    label = `${target.id} (via ${jumpTarget.host}:${jumpTarget.port})`;
    try {
      sock = await forwardThrough(jump, target, label, timeoutMs);
    } catch (err) {
      jump.end();
      throw err;
    }
  }

  let connected: Awaited<ReturnType<typeof connectHop>>;
  try {
    connected = await connectHop(
      {
        label,
        host: target.host,
        port: target.port,
        user: target.user,
        pins,
        // fleet repin reads a host's key directly: a device behind a jump host is pinned by hand.
        repin: jumpTarget
          ? `set ${target.id}'s ssh.hostKey to <key> in the inventory (fleet repin cannot read a host behind a jump host)`
          : `pin it: wavegate fleet repin ${target.id} --inventory <fleet.yaml> --accept <key>`,
      },
      auth,
      timeoutMs,
      sock,
    );
  } catch (err) {
    jump?.end();
    throw err;
  }
  jump?.on('close', () => connected.client.destroy());
  return new ClientSession(connected.client, connected.lastError, label, jump);
}

const short = (command: string): string => (command.length > 80 ? `${command.slice(0, 77)}...` : command);

/**
 * The SshSession over one connected client (and its jump host, closed with it). A lost connection fails
 * every operation in flight as `dropped`, and any operation after it.
 */
class ClientSession implements SshSession {
  private closed = false;
  /** Rejecters of every operation in flight: a lost connection fails them all as `dropped`. */
  private readonly pending = new Set<() => void>();

  constructor(
    private readonly client: Client,
    private readonly lastError: () => ClientError | undefined,
    private readonly label: string,
    private readonly jump: Client | undefined,
  ) {
    client.on('close', () => {
      this.closed = true;
      for (const fail of [...this.pending]) fail();
    });
  }

  private lost(what: string): TransportError {
    const cause = this.lastError();
    return new TransportError('dropped', `${this.label}: connection lost ${what}${cause ? ` (${cause.message})` : ''}`);
  }

  exec(
    command: string,
    { timeoutMs = 60_000, env, onProgress, progressIntervalMs = DEFAULT_PROGRESS_INTERVAL_MS, stdin }: ExecOptions = {},
  ): Promise<ExecResult> {
    const { client, label, pending } = this;
    return new Promise<ExecResult>((resolve, reject) => {
      if (this.closed) return reject(this.lost(`before running: ${short(command)}`));
      const started = Date.now();
      let channel: ClientChannel | undefined;
      let settled = false;
      const finish = (err: TransportError | undefined, result?: ExecResult): void => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        if (progress) clearInterval(progress);
        pending.delete(onLost);
        if (err) reject(err);
        else resolve(result!);
      };
      const onLost = (): void => finish(this.lost(`while running: ${short(command)}`));
      pending.add(onLost);
      const timer = setTimeout(() => {
        finish(new TransportError('timeout', `${label}: command timed out after ${timeoutMs} ms: ${short(command)}`));
        if (channel) killChannel(channel);
      }, timeoutMs);
      const progress = onProgress ? progressTicker(onProgress, started, progressIntervalMs) : undefined;
      try {
        client.exec(command, env ? { env } : {}, (err, ch) => {
          if (err)
            return finish(
              this.closed
                ? this.lost(`before running: ${short(command)}`)
                : new TransportError(
                    'dropped',
                    `${label}: cannot open a channel for: ${short(command)} (${err.message})`,
                  ),
            );
          channel = ch;
          if (settled) return void ch.close(); // timed out while the channel was opening
          collectResult(ch, stdin, finish, () => this.lost(`while running: ${short(command)}`));
        });
      } catch (err) {
        finish(
          new TransportError(
            'dropped',
            `${label}: connection lost before running: ${short(command)} (${(err as Error).message})`,
          ),
        );
      }
    });
  }

  upload(data: Buffer, remotePath: string, { timeoutMs = 60_000 }: { timeoutMs?: number } = {}): Promise<void> {
    const { client, label, pending } = this;
    return new Promise<void>((resolve, reject) => {
      if (this.closed) return reject(this.lost(`before uploading ${remotePath}`));
      let settled = false;
      let sftpEnd: (() => void) | undefined;
      const finish = (err?: TransportError): void => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        pending.delete(onLost);
        try {
          sftpEnd?.();
        } catch {
          /* already closed */
        }
        if (err) reject(err);
        else resolve();
      };
      const onLost = (): void => finish(this.lost(`while uploading ${remotePath}`));
      pending.add(onLost);
      const timer = setTimeout(
        () =>
          finish(
            new TransportError(
              'timeout',
              `${label}: upload of ${remotePath} (${data.length} bytes) timed out after ${timeoutMs} ms`,
            ),
          ),
        timeoutMs,
      );
      try {
        client.sftp((err, sftp) => {
          if (err)
            return finish(
              this.closed
                ? this.lost(`before uploading ${remotePath}`)
                : new TransportError('dropped', `${label}: SFTP subsystem unavailable (${err.message})`),
            );
          sftp.on('error', () => {});
          sftpEnd = () => sftp.end();
          if (settled) return sftpEnd();
          sftp.writeFile(remotePath, data, (werr) => finish(werr ? this.uploadFailure(remotePath, werr) : undefined));
        });
      } catch (err) {
        finish(
          new TransportError(
            'dropped',
            `${label}: connection lost before uploading ${remotePath} (${(err as Error).message})`,
          ),
        );
      }
    });
  }

  /** Why a file's write failed: the device's refusal, or the connection's loss. */
  private uploadFailure(remotePath: string, werr: Error): TransportError {
    // A numeric code is an SFTP status from the server (no such directory, permission
    // denied): the device said no, and the same upload will be refused again.
    const status = (werr as ClientError).code;
    if (typeof status === 'number')
      return new TransportError(
        'config',
        `${this.label}: device refused the upload of ${remotePath} (SFTP status ${status}: ${werr.message})`,
      );
    return this.closed
      ? this.lost(`while uploading ${remotePath}`)
      : new TransportError('dropped', `${this.label}: upload of ${remotePath} failed (${werr.message})`);
  }

  close(): void {
    this.client.end();
    this.jump?.end();
  }
}

/**
 * A command's channel: its input sent, its output kept (the last OUTPUT_LIMIT characters of each stream),
 * and at its close its result (an exit code, or the signal that killed it) or, with neither, `lost()`.
 */
function collectResult(
  ch: ClientChannel,
  stdin: Buffer | undefined,
  finish: (err: TransportError | undefined, result?: ExecResult) => void,
  lost: () => TransportError,
): void {
  let stdout = '';
  let stderr = '';
  let code: number | null = null;
  let signal: string | undefined;
  ch.on('error', () => {});
  if (stdin) ch.end(stdin);
  ch.on('data', (chunk: Buffer) => (stdout = (stdout + chunk.toString('utf8')).slice(-OUTPUT_LIMIT)));
  ch.stderr.on('data', (chunk: Buffer) => (stderr = (stderr + chunk.toString('utf8')).slice(-OUTPUT_LIMIT)));
  ch.on('exit', (exitCode: number | null, signalName?: string) => {
    code = exitCode;
    signal = signalName ?? undefined;
  });
  ch.on('close', () => {
    if (code !== null) return finish(undefined, { code, stdout, stderr });
    if (signal)
      return finish(undefined, {
        code: null,
        stdout,
        stderr: `${stderr}${stderr && !stderr.endsWith('\n') ? '\n' : ''}killed by signal ${signal}`,
      });
    finish(lost());
  });
}

/** Kill a timed-out command's channel. */
function killChannel(channel: ClientChannel): void {
  try {
    channel.signal('KILL'); // OpenSSH ≥ 7.9 delivers it; closing the channel covers the rest
  } catch {
    /* channel already gone */
  }
  channel.close();
}

/** Report the command's running time every `intervalMs`; a heartbeat problem must not fail the command. */
function progressTicker(onProgress: (elapsedMs: number) => void, started: number, intervalMs: number): NodeJS.Timeout {
  return setInterval(() => {
    try {
      onProgress(Date.now() - started);
    } catch {
      /* a heartbeat problem must not fail the command */
    }
  }, intervalMs);
}
