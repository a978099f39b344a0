/**
 * The SSH side of a simulated device: one plain `net.Server` per device that hands accepted sockets to
 * an (unlistened) ssh2 `Server` via `injectSocket`. That split lets the fleet take a device offline and
 * back online on the same port, rotate its host key (a new ssh2 Server; open connections keep the old
 * one), and drop a connection abruptly (the exec handler gets the raw socket).
 *
 * Sessions: exec (exec.ts) and the sftp subsystem (sftp.ts); pty and shell are refused, env is
 * accepted and ignored. Authentication: public key only, the fleet's one user and client key, or the keys of the
 * device's own `.ssh/authorized_keys` when its sandbox has one.
 */
import { timingSafeEqual } from 'node:crypto';
import * as net from 'node:net';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  Server as SshServer,
  utils as sshUtils,
  type AuthContext,
  type Connection,
  type ParsedKey,
  type Session,
} from 'ssh2';
import { sshFingerprint } from '../intake/known-hosts';
import { HOST, type DeviceState, type FleetRuntime, type SimDevice } from './device';
import { runExec, type LiveExec } from './exec';
import { generateEd25519, publicLine } from './keys';
import { ensureSandbox } from './sandbox';
import { serveSftp } from './sftp';

function sameBytes(a: Buffer, b: Buffer): boolean {
  if (a.length !== b.length) {
    timingSafeEqual(a, a); // constant-ish time; we do not leak the length via an early return
    return false;
  }
  return timingSafeEqual(a, b);
}

/** The client-key check every device of a fleet shares: that user, that key, a valid signature. */
export function clientAuthenticator(user: string, clientKey: ParsedKey): (ctx: AuthContext) => void {
  const userBuf = Buffer.from(user);
  return (ctx) => answer(ctx, userBuf, [clientKey]);
}

/** Accept a public key login by `user` with one of `keys` (and, once signed, a valid signature); else refuse it. */
function answer(ctx: AuthContext, user: Buffer, keys: readonly ParsedKey[]): void {
  if (ctx.method !== 'publickey') {
    ctx.reject(['publickey']);
    return;
  }
  const userOk = sameBytes(Buffer.from(ctx.username), user);
  const key = keys.find((k) => sameBytes(ctx.key.data, k.getPublicSSH()));
  // Asked first without a signature (does this key do?), then signed: the signature must verify.
  const signed = !ctx.signature || (!!ctx.blob && key?.verify(ctx.blob, ctx.signature, ctx.hashAlgo) === true);
  if (key && userOk && signed) ctx.accept();
  else ctx.reject(['publickey']);
}

/** The keys of an authorized_keys text (options before a key and comments after it aside); unreadable lines skipped. */
function authorizedKeys(text: string): ParsedKey[] {
  const keys: ParsedKey[] = [];
  for (const line of text.split('\n')) {
    const fields = line.trim().split(/\s+/);
    const at = fields.findIndex((f) => /^(ssh-|ecdsa-|sk-)/.test(f));
    if (at < 0 || !fields[at + 1]) continue;
    const parsed = sshUtils.parseKey(`${fields[at]} ${fields[at + 1]}`);
    const key = Array.isArray(parsed) ? parsed[0] : parsed;
    if (key && !(key instanceof Error)) keys.push(key);
  }
  return keys;
}

/**
 * A device with `.ssh/authorized_keys` in its sandbox (its HOME) lets in exactly the keys listed there, as sshd
 * does, so a login key rotation can add and remove keys through the device's own shell; a device without one
 * lets in the fleet's one client key (the fleet's shared check, no file read beyond a missing one).
 */
function deviceAuthenticator(st: DeviceState, runtime: FleetRuntime): (ctx: AuthContext) => void {
  return (ctx) => {
    let text: string;
    try {
      text = readFileSync(join(st.dev.sandbox, '.ssh', 'authorized_keys'), 'utf8');
    } catch {
      return runtime.authenticate(ctx);
    }
    answer(ctx, Buffer.from(runtime.user), authorizedKeys(text));
  };
}

function makeSsh(st: DeviceState, hostKeyPem: string, runtime: FleetRuntime): SshServer {
  return new SshServer(
    {
      hostKeys: [hostKeyPem],
      ident: 'wavegate-fleet-sim',
      ...(runtime.debug ? { debug: (line: string) => runtime.debug?.(`[${st.dev.id}] ${line}`) } : {}),
    },
    (conn, info) => onConnection(st, conn, info.port, runtime),
  );
}

function newHostKey(): { pem: string; parsed: ParsedKey } {
  const kp = generateEd25519();
  return { pem: kp.private, parsed: kp.parsed };
}

function applyHostKey(st: DeviceState, parsed: ParsedKey): void {
  st.hostKey = parsed;
  st.dev.hostKeyFingerprint = sshFingerprint(parsed.getPublicSSH());
  st.dev.hostPublicKey = publicLine(parsed);
}

/** A device with a fresh host key, not listening yet (`listen` opens its port). */
export function createDevice(dev: SimDevice, runtime: FleetRuntime): DeviceState {
  const { pem, parsed } = newHostKey();
  const st: DeviceState = {
    dev,
    hostKey: parsed,
    ssh: undefined as unknown as SshServer, // set right below (needs `st`)
    listener: net.createServer((sock) => {
      if (runtime.isStopped() || !st.listening) {
        sock.destroy();
        return;
      }
      sock.on('error', () => {});
      st.sockets.add(sock);
      // When it opened and when the client let go (its FIN, or the close): the concurrency counters.
      const span: { openedAt: number; closedAt?: number } = { openedAt: Date.now() };
      st.connectionSpans.push(span);
      const closed = () => (span.closedAt ??= Date.now());
      sock.once('end', closed);
      const rport = sock.remotePort;
      if (rport !== undefined) st.socketsByPort.set(rport, sock);
      sock.once('close', () => {
        closed();
        st.sockets.delete(sock);
        if (rport !== undefined && st.socketsByPort.get(rport) === sock) st.socketsByPort.delete(rport);
      });
      st.ssh.injectSocket(sock);
    }),
    listening: false,
    sockets: new Set<net.Socket>(),
    socketsByPort: new Map<number, net.Socket>(),
    faults: { raw: {} },
    records: [],
    connectionSpans: [],
    sftpBytes: 0,
    sftpOpens: 0,
    chain: Promise.resolve(),
  };
  applyHostKey(st, parsed);
  st.ssh = makeSsh(st, pem, runtime);
  st.listener.on('error', () => {});
  return st;
}

/** New host key for the device; connections already open keep the old one. Updates st.dev in place. */
export function rotateHostKey(st: DeviceState, runtime: FleetRuntime): void {
  const { pem, parsed } = newHostKey();
  applyHostKey(st, parsed);
  st.ssh = makeSsh(st, pem, runtime);
}

/** Opens the device's port (0 = ephemeral; the port chosen is kept in st.dev.port for reopening). */
export function listen(st: DeviceState, port: number): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const onErr = (err: Error): void => reject(err);
    st.listener.once('error', onErr);
    st.listener.listen({ port, host: HOST }, () => {
      st.listener.removeListener('error', onErr);
      st.listening = true;
      const addr = st.listener.address();
      if (addr && typeof addr === 'object') st.dev.port = addr.port;
      resolve();
    });
  });
}

/** Closes the device's port and destroys its open connections (offline, or stop). */
export function unlisten(st: DeviceState): Promise<void> {
  return new Promise<void>((resolve) => {
    if (!st.listening) {
      resolve();
    } else {
      st.listening = false;
      st.listener.close(() => resolve());
    }
    for (const s of st.sockets) s.destroy();
  });
}

function onConnection(st: DeviceState, conn: Connection, remotePort: number, runtime: FleetRuntime): void {
  const live = new Set<LiveExec>();
  const sock = st.socketsByPort.get(remotePort);
  const killAll = (): void => {
    for (const l of live) l.kill();
    live.clear();
  };
  conn.on('error', () => {});
  conn.on('authentication', deviceAuthenticator(st, runtime));
  conn.on('close', killAll);
  conn.on('end', killAll);
  conn.on('ready', () => {
    conn.on('session', (acceptSession) => {
      const session: Session = acceptSession();
      session.on('pty', (_accept, reject) => reject?.());
      session.on('shell', (_accept, reject) => reject?.()); // reject is undefined when no reply was requested
      session.on('env', (accept) => accept?.()); // accepted and ignored
      session.on('exec', (accept, _reject, info) => {
        const channel = accept();
        runExec(st, channel, info.command, live, sock, runtime);
      });
      // Accept synchronously: OpenSSH's sftp pipelines SSH_FXP_INIT right behind the subsystem
      // request, and ssh2 drops channel data that arrives before accept(). Requests wait for the
      // (lazily created) sandbox inside serveSftp.
      session.on('sftp', (accept) => serveSftp(st, accept(), ensureSandbox(st)));
    });
  });
}
