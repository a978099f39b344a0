/**
 * Fleet simulator: one real ssh2 SSH server per simulated device, all on 127.0.0.1.
 *
 * Used by tests, the demo (`wavegate dev --demo`) and benchmarks (up to ~1,000 devices in one
 * process), so each device is kept light: one shared client-key check, sandboxes created lazily on
 * first use, no per-device timers, and one plain `net.Server` per device that hands accepted
 * sockets to an (unlistened) ssh2 `Server` via `injectSocket`. That split lets us take a device
 * offline / back online on the same port, rotate its host key, and drop a connection abruptly.
 *
 * Conventions:
 *   - sandbox: `<dir>/<id>` (created on first exec / SFTP / setFaults, or via `ensureSandbox`);
 *     exec runs `/bin/sh -c <command>` there with env PATH=<sandbox>/.sim/bin:/usr/local/bin:/usr/bin:/bin,
 *     HOME=WAVEGATE_ROOT=<sandbox>, WAVEGATE_DEVICE_ID=<id>, LANG=C (nothing else is inherited).
 *   - `<sandbox>/.sim/bin/` holds:
 *       sim-runtime-health <name>...  exit 1 if any name is listed in .sim/unhealthy, else 0
 *                                     (prints "<name> healthy|unhealthy"; no args: exit 2)
 *       sim-error-rate                prints .sim/error_rate (default "0"); hangs while
 *                                     .sim/error_rate_hangs exists
 *       sim-device-info               id= pool= class= os= updateClass= and label.<k>=<v> lines
 *   - fault files in `<sandbox>/.sim/`, written by setFaults: `unhealthy` (one runtime name per line),
 *     `error_rate`, `error_rate_hangs` (exists => hang), `faults.json` (informational copy).
 *   - exec faults are matched against the exact command string; precedence dropConnection >
 *     failCommand > hangCommand; none of the three runs the command. latencyMs delays every exec.
 *   - SFTP: "/" is the sandbox; relative paths resolve from "/"; `..` stops at the sandbox root;
 *     an absolute path that already starts with the real sandbox path is accepted as-is. RENAME
 *     refuses to overwrite (OpenSSH v3 semantics); uid/gid in SETSTAT are ignored.
 *   - the generated client key lives at `<dir>/.sim-keys/id_ed25519` (+ `.pub`).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { timingSafeEqual } from 'node:crypto';
import { constants as fsc, promises as fsp } from 'node:fs';
import * as net from 'node:net';
import * as path from 'node:path';
import { sshFingerprint } from '../../activities/ssh';
import {
  Server as SshServer,
  utils as sshUtils,
  type Attributes,
  type AuthContext,
  type Connection,
  type FileEntry,
  type ParsedKey,
  type ServerChannel,
  type Session,
  type SFTPWrapper,
} from 'ssh2';

// ---------------------------------------------------------------------------------------------
// Public types
// ---------------------------------------------------------------------------------------------

export interface SimDeviceSpec {
  id: string;
  pool?: string;
  class?: string;
  os?: string;
  labels?: Record<string, string>;
  updateClass?: 'required' | 'best-effort' | 'left-behind';
}

export interface SimFaults {
  /** The device's port refuses connections (listener closed; reopened on the SAME port when cleared). */
  offline?: boolean;
  /** Delay before each exec starts. */
  latencyMs?: number;
  /** Regex source: matching exec commands exit 1 with stderr "simulated failure" and are NOT run. */
  failCommand?: string;
  /** Regex source: matching commands never finish (until the client closes the channel/connection); NOT run. */
  hangCommand?: string;
  /** Regex source: when an exec matches, the TCP connection is destroyed abruptly (no exit status); NOT run. */
  dropConnection?: string;
  /** Names for which `sim-runtime-health <name>` exits 1. */
  unhealthyRuntimes?: string[];
  /** Value printed by `sim-error-rate` (default 0). */
  errorRate?: number;
  /** `sim-error-rate` hangs forever (metrics source timing out). */
  errorRateHangs?: boolean;
}

export interface SimDevice {
  id: string;
  host: '127.0.0.1';
  port: number;
  /** OpenSSH style "SHA256:<base64 without padding>" of the host public key blob. */
  hostKeyFingerprint: string;
  /** OpenSSH one-line public key: "ssh-ed25519 AAAA..." (no comment). */
  hostPublicKey: string;
  sandbox: string;
  spec: SimDeviceSpec;
}

export interface SimCommandRecord {
  command: string;
  /** null while running, and for hung / dropped / killed (signal) commands. */
  exitCode: number | null;
  startedAt: number;
  endedAt?: number;
}

export interface Fleet {
  /** Username the servers accept (default "wavegate"). */
  user: string;
  /** Path of the OpenSSH-format private key (mode 0600) the servers accept. */
  clientKeyPath: string;
  /** OpenSSH one-line public key of the accepted client key. */
  clientPublicKey: string;
  devices: SimDevice[];
  device(id: string): SimDevice;
  /** Replaces the device's faults (not a merge). */
  setFaults(id: string, faults: SimFaults): Promise<void>;
  /** Current faults of a device (a copy). */
  faults(id: string): SimFaults;
  /** New host key for that device (existing connections keep the old one). Updates device(id) in place. */
  rotateHostKey(id: string): void;
  /** Every exec the device ran, in order (including failed/hung/dropped ones). Records are live objects. */
  commands(id: string): SimCommandRecord[];
  /** How many execs matched (string = substring). */
  count(id: string, pattern: RegExp | string): number;
  totalCommands(): number;
  /** Bytes written through SFTP WRITE on that device since the last resetCounters(). */
  sftpWrites(id: string): number;
  /** Number of SFTP OPEN requests for writing on that device since the last resetCounters(). */
  sftpUploads(id: string): number;
  /** Currently open TCP connections to the device. */
  connections(id: string): number;
  /** Makes sure `<dir>/<id>` and its `.sim/` helpers exist (otherwise created on first use). */
  ensureSandbox(id: string): Promise<string>;
  resetCounters(): void;
  /** Closes every server and connection, kills every child process; idempotent. */
  stop(): Promise<void>;
}

export interface StartFleetOptions {
  devices: SimDeviceSpec[];
  /** Base directory; sandboxes at `<dir>/<id>`, generated client key at `<dir>/.sim-keys/`. */
  dir: string;
  user?: string;
  /** Reuse this private key file instead of generating one (generated and written there if missing). */
  clientKeyPath?: string;
  /** Optional fixed ports (index-aligned with `devices`; 0/undefined = ephemeral). */
  ports?: number[];
  /** ssh2 protocol debug output (very verbose), prefixed with the device id. */
  debug?: (line: string) => void;
}

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

const HOST = '127.0.0.1' as const;
const { STATUS_CODE } = sshUtils.sftp;

/** The transport's fingerprint function: one way to compute it (re-exported for existing callers). */
export { sshFingerprint };

function parseOrThrow(data: string | Buffer, what: string): ParsedKey {
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
    if (!parsed || parsed.getPublicSSH().length !== 51 || !parsed.getPublicSSH().equals((pub as ParsedKey).getPublicSSH())) continue;
    return { private: kp.private, public: kp.public, parsed };
  }
  throw new Error('fleet-sim: could not generate a well-formed ed25519 key');
}

function publicLine(key: ParsedKey): string {
  return `${key.type} ${key.getPublicSSH().toString('base64')}`;
}

function sameBytes(a: Buffer, b: Buffer): boolean {
  if (a.length !== b.length) {
    timingSafeEqual(a, a); // constant-ish time; we do not leak the length via an early return
    return false;
  }
  return timingSafeEqual(a, b);
}

function shQuote(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}

function compile(source: string | undefined, field: string): RegExp | undefined {
  if (source === undefined || source === '') return undefined;
  try {
    return new RegExp(source);
  } catch (err) {
    throw new Error(`fleet-sim: invalid ${field} regex ${JSON.stringify(source)}: ${(err as Error).message}`);
  }
}

function errCode(err: unknown): string | undefined {
  return typeof err === 'object' && err !== null && 'code' in err ? String((err as { code: unknown }).code) : undefined;
}

const DEVICE_ID_RE = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;

// ---------------------------------------------------------------------------------------------
// Per-device state
// ---------------------------------------------------------------------------------------------

interface CompiledFaults {
  raw: SimFaults;
  fail?: RegExp;
  hang?: RegExp;
  drop?: RegExp;
}

interface LiveExec {
  kill(): void;
}

interface DeviceState {
  dev: SimDevice;
  hostKey: ParsedKey;
  ssh: SshServer;
  listener: net.Server;
  listening: boolean;
  sockets: Set<net.Socket>;
  socketsByPort: Map<number, net.Socket>;
  faults: CompiledFaults;
  records: SimCommandRecord[];
  sftpBytes: number;
  sftpOpens: number;
  sandboxReady?: Promise<string>;
  /** serialises setFaults (offline/online transitions) */
  chain: Promise<void>;
}

// ---------------------------------------------------------------------------------------------
// startFleet
// ---------------------------------------------------------------------------------------------

export async function startFleet(opts: StartFleetOptions): Promise<Fleet> {
  const baseDir = path.resolve(opts.dir);
  const user = opts.user ?? 'wavegate';
  const userBuf = Buffer.from(user);

  const seen = new Set<string>();
  for (const spec of opts.devices) {
    if (!DEVICE_ID_RE.test(spec.id)) throw new Error(`fleet-sim: invalid device id ${JSON.stringify(spec.id)}`);
    if (seen.has(spec.id)) throw new Error(`fleet-sim: duplicate device id ${spec.id}`);
    seen.add(spec.id);
  }

  await fsp.mkdir(baseDir, { recursive: true });

  // ---- client key (shared by every device) ----
  let clientKeyPath: string;
  let clientPrivate: string;
  if (opts.clientKeyPath) {
    clientKeyPath = path.resolve(opts.clientKeyPath);
    try {
      clientPrivate = await fsp.readFile(clientKeyPath, 'utf8');
    } catch (err) {
      if (errCode(err) !== 'ENOENT') throw err;
      clientPrivate = generateEd25519('wavegate-fleet-sim').private;
      await fsp.mkdir(path.dirname(clientKeyPath), { recursive: true });
      await fsp.writeFile(clientKeyPath, clientPrivate, { mode: 0o600 });
    }
  } else {
    const keyDir = path.join(baseDir, '.sim-keys');
    await fsp.mkdir(keyDir, { recursive: true, mode: 0o700 });
    clientKeyPath = path.join(keyDir, 'id_ed25519');
    clientPrivate = generateEd25519('wavegate-fleet-sim').private;
    await fsp.writeFile(clientKeyPath, clientPrivate, { mode: 0o600 });
  }
  await fsp.chmod(clientKeyPath, 0o600);
  const clientKey = parseOrThrow(clientPrivate, `client key ${clientKeyPath}`);
  const clientBlob = clientKey.getPublicSSH();
  const clientPublicKey = publicLine(clientKey);
  if (!opts.clientKeyPath) await fsp.writeFile(clientKeyPath + '.pub', clientPublicKey + '\n', { mode: 0o644 });

  /** The one client-key check shared by every device. */
  const authenticate = (ctx: AuthContext): void => {
    const userOk = sameBytes(Buffer.from(ctx.username), userBuf);
    if (ctx.method !== 'publickey') return ctx.reject(['publickey']);
    const keyOk = sameBytes(ctx.key.data, clientBlob);
    if (!keyOk || !userOk) return ctx.reject(['publickey']);
    if (ctx.signature) {
      if (!ctx.blob || clientKey.verify(ctx.blob, ctx.signature, ctx.hashAlgo) !== true) return ctx.reject(['publickey']);
    }
    ctx.accept();
  };

  let stopped = false;
  let stopPromise: Promise<void> | undefined;
  const children = new Set<ChildProcess>();
  const pgids = new Set<number>();

  const states = new Map<string, DeviceState>();
  const ordered: DeviceState[] = [];

  // ---- per-device servers ----
  const makeSsh = (st: DeviceState, hostKeyPem: string): SshServer =>
    new SshServer(
      {
        hostKeys: [hostKeyPem],
        ident: 'wavegate-fleet-sim',
        ...(opts.debug ? { debug: (line: string) => opts.debug?.(`[${st.dev.id}] ${line}`) } : {}),
      },
      (conn, info) => onConnection(st, conn, info.port),
    );

  const newHostKey = (): { pem: string; parsed: ParsedKey } => {
    const kp = generateEd25519();
    return { pem: kp.private, parsed: kp.parsed };
  };

  const applyHostKey = (st: DeviceState, parsed: ParsedKey): void => {
    st.hostKey = parsed;
    st.dev.hostKeyFingerprint = sshFingerprint(parsed.getPublicSSH());
    st.dev.hostPublicKey = publicLine(parsed);
  };

  const listen = (st: DeviceState, port: number): Promise<void> =>
    new Promise<void>((resolve, reject) => {
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

  const unlisten = (st: DeviceState): Promise<void> =>
    new Promise<void>((resolve) => {
      if (!st.listening) {
        resolve();
      } else {
        st.listening = false;
        st.listener.close(() => resolve());
      }
      for (const s of st.sockets) s.destroy();
    });

  for (let i = 0; i < opts.devices.length; i++) {
    const spec = { ...opts.devices[i] };
    const { pem, parsed } = newHostKey();
    const dev: SimDevice = {
      id: spec.id,
      host: HOST,
      port: opts.ports?.[i] ?? 0,
      hostKeyFingerprint: '',
      hostPublicKey: '',
      sandbox: path.join(baseDir, spec.id),
      spec,
    };
    const st: DeviceState = {
      dev,
      hostKey: parsed,
      ssh: undefined as unknown as SshServer, // set right below (needs `st`)
      listener: net.createServer((sock) => {
        if (stopped || !st.listening) {
          sock.destroy();
          return;
        }
        sock.on('error', () => {});
        st.sockets.add(sock);
        const rport = sock.remotePort;
        if (rport !== undefined) st.socketsByPort.set(rport, sock);
        sock.once('close', () => {
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
      sftpBytes: 0,
      sftpOpens: 0,
      chain: Promise.resolve(),
    };
    applyHostKey(st, parsed);
    st.ssh = makeSsh(st, pem);
    st.listener.on('error', () => {});
    states.set(spec.id, st);
    ordered.push(st);
  }

  try {
    await Promise.all(ordered.map((st) => listen(st, st.dev.port)));
  } catch (err) {
    await Promise.all(ordered.map((st) => unlisten(st)));
    throw err;
  }

  // ---- sandbox ----
  const ensureSandbox = (st: DeviceState): Promise<string> => {
    if (!st.sandboxReady) {
      st.sandboxReady = writeSandbox(st.dev).catch((err: unknown) => {
        st.sandboxReady = undefined;
        throw err;
      });
    }
    return st.sandboxReady;
  };

  // ---- exec ----
  function onConnection(st: DeviceState, conn: Connection, remotePort: number): void {
    const live = new Set<LiveExec>();
    const sock = st.socketsByPort.get(remotePort);
    const killAll = (): void => {
      for (const l of live) l.kill();
      live.clear();
    };
    conn.on('error', () => {});
    conn.on('authentication', authenticate);
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
          runExec(st, channel, info.command, live, sock);
        });
        // Accept synchronously: OpenSSH's sftp pipelines SSH_FXP_INIT right behind the subsystem
        // request, and ssh2 drops channel data that arrives before accept(). Requests wait for the
        // (lazily created) sandbox inside serveSftp.
        session.on('sftp', (accept) => serveSftp(st, accept(), ensureSandbox(st)));
      });
    });
  }

  function runExec(st: DeviceState, channel: ServerChannel, command: string, live: Set<LiveExec>, sock: net.Socket | undefined): void {
    const rec: SimCommandRecord = { command, exitCode: null, startedAt: Date.now() };
    st.records.push(rec);
    const faults = st.faults;
    let finished = false;
    let child: ChildProcess | undefined;
    let timer: NodeJS.Timeout | undefined;

    const finish = (code: number | null): void => {
      if (finished) return;
      finished = true;
      rec.exitCode = code;
      rec.endedAt = Date.now();
      live.delete(handle);
    };
    const killGroup = (): void => {
      if (child?.pid !== undefined && child.exitCode === null && child.signalCode === null) {
        try {
          process.kill(-child.pid, 'SIGKILL');
        } catch {
          try {
            child.kill('SIGKILL');
          } catch {
            /* already gone */
          }
        }
      }
    };
    const handle: LiveExec = {
      kill: () => {
        if (timer) clearTimeout(timer);
        killGroup();
        finish(null);
      },
    };
    live.add(handle);
    channel.on('error', () => {});
    channel.on('close', () => handle.kill());

    // ssh2 emits a server channel's 'close' only once its readable side has been consumed, so any
    // path that does not pipe the channel into a child must drain it.
    const drain = (): void => {
      channel.resume();
    };
    // The peer closing the channel makes ssh2 end() our writable side: nothing else ends it early.
    const peerClosed = (): boolean => channel.writableEnded;

    const start = (): void => {
      timer = undefined;
      if (finished || stopped) return;
      if (peerClosed()) {
        drain();
        return handle.kill();
      }
      // Fault precedence: dropConnection, then failCommand, then hangCommand.
      if (faults.drop?.test(command)) {
        finish(null);
        if (sock) {
          if (typeof sock.resetAndDestroy === 'function') sock.resetAndDestroy();
          else sock.destroy();
        } else {
          channel.close();
        }
        return;
      }
      if (faults.fail?.test(command)) {
        drain();
        channel.stderr.write('simulated failure\n');
        void endChannel(channel, 1).then(() => finish(1));
        return;
      }
      if (faults.hang?.test(command)) {
        drain();
        return; // never finishes; handle.kill() runs on channel/connection close
      }
      void ensureSandbox(st).then(
        (sandbox) => spawnCommand(sandbox),
        (err: unknown) => {
          drain();
          channel.stderr.write(`fleet-sim: cannot prepare sandbox: ${(err as Error).message}\n`);
          void endChannel(channel, 255).then(() => finish(255));
        },
      );
    };

    const spawnCommand = (sandbox: string): void => {
      if (finished || stopped) return;
      if (peerClosed()) {
        drain();
        return handle.kill();
      }
      const c = spawn('/bin/sh', ['-c', command], {
        cwd: sandbox,
        env: {
          PATH: `${sandbox}/.sim/bin:/usr/local/bin:/usr/bin:/bin`,
          HOME: sandbox,
          WAVEGATE_DEVICE_ID: st.dev.id,
          WAVEGATE_ROOT: sandbox,
          LANG: 'C',
        },
        detached: true, // own process group, so we can kill the whole tree
        stdio: ['pipe', 'pipe', 'pipe'],
      });
      child = c;
      children.add(c);
      const pid = c.pid;
      if (pid !== undefined) pgids.add(pid);
      c.on('error', (err) => {
        channel.stderr.write(`fleet-sim: spawn failed: ${err.message}\n`);
      });
      c.stdin?.on('error', () => {});
      c.stdout?.on('error', () => {});
      c.stderr?.on('error', () => {});
      if (c.stdin) channel.pipe(c.stdin);
      c.stdout?.pipe(channel, { end: false });
      c.stderr?.pipe(channel.stderr, { end: false });
      c.on('exit', () => {
        children.delete(c);
      });
      c.on('close', (code, signal) => {
        children.delete(c);
        if (pid !== undefined) {
          try {
            process.kill(-pid, 0); // group still has members (backgrounded jobs): keep for stop()
          } catch {
            pgids.delete(pid);
          }
        }
        if (finished) return;
        if (c.stdin) channel.unpipe(c.stdin);
        drain();
        const status: number | string = code ?? (signal ? signal.replace(/^SIG/, '') : 255);
        void endChannel(channel, status).then(() => finish(typeof status === 'number' ? status : null));
      });
    };

    const latency = faults.raw.latencyMs ?? 0;
    if (latency > 0) timer = setTimeout(start, latency);
    else start();
  }

  // ---- fleet object ----
  const get = (id: string): DeviceState => {
    const st = states.get(id);
    if (!st) throw new Error(`fleet-sim: unknown device ${id}`);
    return st;
  };

  const setFaults = (id: string, faults: SimFaults): Promise<void> => {
    const st = get(id);
    const compiled: CompiledFaults = {
      raw: { ...faults, unhealthyRuntimes: faults.unhealthyRuntimes ? [...faults.unhealthyRuntimes] : undefined },
      fail: compile(faults.failCommand, 'failCommand'),
      hang: compile(faults.hangCommand, 'hangCommand'),
      drop: compile(faults.dropConnection, 'dropConnection'),
    };
    const run = async (): Promise<void> => {
      st.faults = compiled;
      if (stopped) return; // the sandbox directory may already be gone
      await writeFaultFiles(await ensureSandbox(st), compiled.raw);
      if (stopped) return;
      if (compiled.raw.offline) await unlisten(st);
      else if (!st.listening) await listen(st, st.dev.port);
    };
    const p = st.chain.then(run);
    st.chain = p.catch(() => {});
    return p;
  };

  const stop = (): Promise<void> => {
    if (stopPromise) return stopPromise;
    stopped = true;
    stopPromise = (async () => {
      await Promise.all(ordered.map((st) => st.chain));
      const closing = ordered.map((st) => unlisten(st));
      const exits = [...children].map(
        (c) =>
          new Promise<void>((resolve) => {
            if (c.exitCode !== null || c.signalCode !== null) return resolve();
            c.once('exit', () => resolve());
          }),
      );
      for (const pgid of pgids) {
        try {
          process.kill(-pgid, 'SIGKILL');
        } catch {
          /* group already empty */
        }
      }
      pgids.clear();
      let guard: NodeJS.Timeout | undefined;
      await Promise.race([
        Promise.all([...closing, ...exits]),
        new Promise<void>((resolve) => {
          guard = setTimeout(resolve, 5_000);
        }),
      ]);
      if (guard) clearTimeout(guard);
    })();
    return stopPromise;
  };

  const fleet: Fleet = {
    user,
    clientKeyPath,
    clientPublicKey,
    devices: ordered.map((st) => st.dev),
    device: (id) => get(id).dev,
    setFaults,
    faults: (id) => {
      const raw = get(id).faults.raw;
      return { ...raw, unhealthyRuntimes: raw.unhealthyRuntimes ? [...raw.unhealthyRuntimes] : undefined };
    },
    rotateHostKey: (id) => {
      const st = get(id);
      const { pem, parsed } = newHostKey();
      applyHostKey(st, parsed);
      st.ssh = makeSsh(st, pem);
    },
    commands: (id) => get(id).records.slice(),
    count: (id, pattern) => {
      const recs = get(id).records;
      if (typeof pattern === 'string') return recs.filter((r) => r.command.includes(pattern)).length;
      const re = new RegExp(pattern.source, pattern.flags.replace(/[gy]/g, ''));
      return recs.filter((r) => re.test(r.command)).length;
    },
    totalCommands: () => ordered.reduce((n, st) => n + st.records.length, 0),
    sftpWrites: (id) => get(id).sftpBytes,
    sftpUploads: (id) => get(id).sftpOpens,
    connections: (id) => get(id).sockets.size,
    ensureSandbox: (id) => ensureSandbox(get(id)),
    resetCounters: () => {
      for (const st of ordered) {
        st.records = [];
        st.sftpBytes = 0;
        st.sftpOpens = 0;
      }
    },
    stop,
  };
  return fleet;
}

// ---------------------------------------------------------------------------------------------
// Exec helpers
// ---------------------------------------------------------------------------------------------

/** Waits until everything queued on the channel (stdout and stderr) went out, then exit + close. */
function endChannel(channel: ServerChannel, status: number | string): Promise<void> {
  return new Promise<void>((resolve) => {
    let done = false;
    const finish = (): void => {
      if (done) return;
      done = true;
      channel.removeListener('close', finish);
      resolve();
    };
    channel.once('close', finish);
    let pending = 2;
    const flushed = (): void => {
      if (--pending > 0 || done) return;
      try {
        if (typeof status === 'number') channel.exit(status);
        else channel.exit(status, false, '');
      } catch {
        /* channel gone, or a signal name SSH does not know */
      }
      try {
        channel.end();
      } catch {
        /* channel already gone */
      }
      finish();
    };
    try {
      channel.write(Buffer.alloc(0), () => flushed());
      channel.stderr.write(Buffer.alloc(0), () => flushed());
    } catch {
      finish();
    }
  });
}

// ---------------------------------------------------------------------------------------------
// Sandbox and sim commands
// ---------------------------------------------------------------------------------------------

async function writeSandbox(dev: SimDevice): Promise<string> {
  const sandbox = dev.sandbox;
  const simDir = path.join(sandbox, '.sim');
  const binDir = path.join(simDir, 'bin');
  await fsp.mkdir(binDir, { recursive: true });
  const q = shQuote(simDir);
  const spec = dev.spec;
  const infoLines = [
    `id=${spec.id}`,
    `pool=${spec.pool ?? ''}`,
    `class=${spec.class ?? ''}`,
    `os=${spec.os ?? ''}`,
    `updateClass=${spec.updateClass ?? 'required'}`,
    ...Object.entries(spec.labels ?? {}).map(([k, v]) => `label.${k}=${v}`),
  ].map((l) => l.replace(/[\r\n]/g, ' '));

  const scripts: Record<string, string> = {
    'sim-runtime-health': `#!/bin/sh
# wavegate fleet simulator: exits 1 if any named runtime is listed in .sim/unhealthy
SIM=${q}
if [ $# -lt 1 ]; then echo "usage: sim-runtime-health <name>..." >&2; exit 2; fi
rc=0
for name in "$@"; do
  if [ -f "$SIM/unhealthy" ] && grep -Fqx -- "$name" "$SIM/unhealthy"; then
    echo "$name unhealthy"
    rc=1
  else
    echo "$name healthy"
  fi
done
exit $rc
`,
    'sim-error-rate': `#!/bin/sh
# wavegate fleet simulator: prints the device error rate (.sim/error_rate, default 0);
# hangs forever when .sim/error_rate_hangs exists (a metrics source timing out)
SIM=${q}
if [ -f "$SIM/error_rate_hangs" ]; then
  while :; do sleep 3600; done
fi
if [ -s "$SIM/error_rate" ]; then cat "$SIM/error_rate"; else echo 0; fi
`,
    'sim-device-info': `#!/bin/sh
# wavegate fleet simulator: device identity as key=value lines
cat <<'__WAVEGATE_SIM_EOF__'
${infoLines.join('\n')}
__WAVEGATE_SIM_EOF__
`,
  };
  await Promise.all(
    Object.entries(scripts).map(async ([name, body]) => {
      const p = path.join(binDir, name);
      await fsp.writeFile(p, body, { mode: 0o755 });
      await fsp.chmod(p, 0o755);
    }),
  );
  return sandbox;
}

async function writeFaultFiles(sandbox: string, faults: SimFaults): Promise<void> {
  const simDir = path.join(sandbox, '.sim');
  const put = (name: string, content: string | undefined): Promise<void> =>
    content === undefined ? fsp.rm(path.join(simDir, name), { force: true }) : fsp.writeFile(path.join(simDir, name), content);
  const unhealthy = faults.unhealthyRuntimes ?? [];
  await Promise.all([
    put('unhealthy', unhealthy.length ? unhealthy.join('\n') + '\n' : undefined),
    put('error_rate', faults.errorRate !== undefined ? `${faults.errorRate}\n` : undefined),
    put('error_rate_hangs', faults.errorRateHangs ? '1\n' : undefined),
    put('faults.json', JSON.stringify(faults, null, 2) + '\n'),
  ]);
}

// ---------------------------------------------------------------------------------------------
// SFTP (rooted at the sandbox)
// ---------------------------------------------------------------------------------------------

type SftpHandle =
  | { kind: 'file'; fd: fsp.FileHandle; vpath: string }
  | { kind: 'dir'; real: string; vpath: string; entries?: FileEntry[]; pos: number };

const MAX_READ = 64 * 1024;

function toAttrs(st: import('node:fs').Stats): Attributes {
  return {
    mode: st.mode,
    uid: st.uid,
    gid: st.gid,
    size: st.size,
    atime: Math.floor(st.atimeMs / 1000),
    mtime: Math.floor(st.mtimeMs / 1000),
  };
}

function modeString(mode: number): string {
  const t = fsc.S_IFMT & mode;
  const type =
    t === fsc.S_IFDIR ? 'd' : t === fsc.S_IFLNK ? 'l' : t === fsc.S_IFCHR ? 'c' : t === fsc.S_IFBLK ? 'b' : t === fsc.S_IFIFO ? 'p' : t === fsc.S_IFSOCK ? 's' : '-';
  const bits = 'rwxrwxrwx';
  let perms = '';
  for (let i = 0; i < 9; i++) perms += mode & (1 << (8 - i)) ? bits[i] : '-';
  return type + perms;
}

function longname(name: string, st: import('node:fs').Stats): string {
  const d = st.mtime;
  const mon = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'][d.getMonth()];
  const date = `${mon} ${String(d.getDate()).padStart(2, ' ')} ${String(d.getHours()).padStart(2, '0')}:${String(d.getMinutes()).padStart(2, '0')}`;
  return `${modeString(st.mode)} ${String(st.nlink).padStart(3)} ${String(st.uid).padEnd(8)} ${String(st.gid).padEnd(8)} ${String(st.size).padStart(8)} ${date} ${name}`;
}

function statusFor(err: unknown): number {
  switch (errCode(err)) {
    case 'ENOENT':
    case 'ENOTDIR':
      return STATUS_CODE.NO_SUCH_FILE;
    case 'EACCES':
    case 'EPERM':
      return STATUS_CODE.PERMISSION_DENIED;
    default:
      return STATUS_CODE.FAILURE;
  }
}

function serveSftp(st: DeviceState, sftp: SFTPWrapper, ready: Promise<string>): void {
  const sandbox = st.dev.sandbox;
  const handles = new Map<string, SftpHandle>();
  let nextHandle = 0;

  /** Virtual path ("/" = sandbox); `..` cannot climb above it; real sandbox paths are accepted as-is. */
  const toVirtual = (p: string): string => {
    const v = path.posix.resolve('/', p || '.');
    if (v === sandbox) return '/';
    if (v.startsWith(sandbox + '/')) return v.slice(sandbox.length);
    return v;
  };
  const toReal = (p: string): string => path.join(sandbox, toVirtual(p));

  const newHandle = (h: SftpHandle): Buffer => {
    const buf = Buffer.alloc(4);
    buf.writeUInt32BE(nextHandle++ >>> 0, 0);
    handles.set(buf.toString('hex'), h);
    return buf;
  };
  const lookup = (buf: Buffer): SftpHandle | undefined => handles.get(buf.toString('hex'));

  const safe = (reqId: number, fn: () => Promise<void>): void => {
    ready.then(fn).catch((err: unknown) => {
      try {
        sftp.status(reqId, statusFor(err), (err as Error).message);
      } catch {
        /* session gone */
      }
    });
  };
  const ok = (reqId: number): void => sftp.status(reqId, STATUS_CODE.OK);

  const applyAttrs = async (real: string, attrs: Partial<Attributes> | undefined, fd?: fsp.FileHandle): Promise<void> => {
    if (!attrs) return;
    if (typeof attrs.size === 'number') {
      if (fd) await fd.truncate(attrs.size);
      else await fsp.truncate(real, attrs.size);
    }
    if (typeof attrs.mode === 'number') {
      if (fd) await fd.chmod(attrs.mode & 0o7777);
      else await fsp.chmod(real, attrs.mode & 0o7777);
    }
    if (typeof attrs.atime === 'number' && typeof attrs.mtime === 'number') {
      if (fd) await fd.utimes(attrs.atime, attrs.mtime);
      else await fsp.utimes(real, attrs.atime, attrs.mtime);
    }
    // uid/gid: ignored (the simulator does not run as root)
  };

  sftp.on('error', () => {});
  // Client sent EOF (OpenSSH's sftp does this on exit and then waits for us): close the channel,
  // like sftp-server exiting would.
  sftp.on('end', () => {
    try {
      (sftp as SFTPWrapper & { end(): void }).end();
    } catch {
      /* already closed */
    }
  });
  sftp.on('close', () => {
    for (const h of handles.values()) if (h.kind === 'file') void h.fd.close().catch(() => {});
    handles.clear();
  });

  sftp.on('REALPATH', (reqId, p) => {
    safe(reqId, async () => {
      const v = toVirtual(p);
      sftp.name(reqId, [{ filename: v, longname: v, attrs: {} as Attributes }]);
    });
  });

  sftp.on('OPEN', (reqId, filename, flags, attrs) => {
    safe(reqId, async () => {
      const { OPEN_MODE } = sshUtils.sftp;
      const read = (flags & OPEN_MODE.READ) !== 0;
      const write = (flags & OPEN_MODE.WRITE) !== 0;
      let f = read && write ? fsc.O_RDWR : write ? fsc.O_WRONLY : fsc.O_RDONLY;
      if (flags & OPEN_MODE.APPEND) f |= fsc.O_APPEND;
      if (flags & OPEN_MODE.CREAT) f |= fsc.O_CREAT;
      if (flags & OPEN_MODE.TRUNC) f |= fsc.O_TRUNC;
      if (flags & OPEN_MODE.EXCL) f |= fsc.O_EXCL;
      const a = attrs as Partial<Attributes> | undefined;
      const mode = typeof a?.mode === 'number' ? a.mode & 0o7777 : 0o644;
      const real = toReal(filename);
      const fd = await fsp.open(real, f, mode);
      if (write) st.sftpOpens++;
      sftp.handle(reqId, newHandle({ kind: 'file', fd, vpath: toVirtual(filename) }));
    });
  });

  sftp.on('READ', (reqId, hbuf, offset, len) => {
    safe(reqId, async () => {
      const h = lookup(hbuf);
      if (!h || h.kind !== 'file') return sftp.status(reqId, STATUS_CODE.FAILURE, 'invalid handle');
      const buf = Buffer.alloc(Math.min(len, MAX_READ));
      const { bytesRead } = await h.fd.read(buf, 0, buf.length, offset);
      if (bytesRead === 0) return sftp.status(reqId, STATUS_CODE.EOF);
      sftp.data(reqId, buf.subarray(0, bytesRead));
    });
  });

  sftp.on('WRITE', (reqId, hbuf, offset, data) => {
    safe(reqId, async () => {
      const h = lookup(hbuf);
      if (!h || h.kind !== 'file') return sftp.status(reqId, STATUS_CODE.FAILURE, 'invalid handle');
      let written = 0;
      while (written < data.length) {
        const { bytesWritten } = await h.fd.write(data, written, data.length - written, offset + written);
        written += bytesWritten;
      }
      st.sftpBytes += written;
      ok(reqId);
    });
  });

  sftp.on('CLOSE', (reqId, hbuf) => {
    safe(reqId, async () => {
      const key = hbuf.toString('hex');
      const h = handles.get(key);
      if (!h) return sftp.status(reqId, STATUS_CODE.FAILURE, 'invalid handle');
      handles.delete(key);
      if (h.kind === 'file') await h.fd.close();
      ok(reqId);
    });
  });

  sftp.on('FSTAT', (reqId, hbuf) => {
    safe(reqId, async () => {
      const h = lookup(hbuf);
      if (!h) return sftp.status(reqId, STATUS_CODE.FAILURE, 'invalid handle');
      const s = h.kind === 'file' ? await h.fd.stat() : await fsp.stat(h.real);
      sftp.attrs(reqId, toAttrs(s));
    });
  });

  sftp.on('FSETSTAT', (reqId, hbuf, attrs) => {
    safe(reqId, async () => {
      const h = lookup(hbuf);
      if (!h) return sftp.status(reqId, STATUS_CODE.FAILURE, 'invalid handle');
      if (h.kind === 'file') await applyAttrs('', attrs, h.fd);
      else await applyAttrs(h.real, attrs);
      ok(reqId);
    });
  });

  sftp.on('STAT', (reqId, p) => safe(reqId, async () => sftp.attrs(reqId, toAttrs(await fsp.stat(toReal(p))))));
  sftp.on('LSTAT', (reqId, p) => safe(reqId, async () => sftp.attrs(reqId, toAttrs(await fsp.lstat(toReal(p))))));

  sftp.on('SETSTAT', (reqId, p, attrs) => {
    safe(reqId, async () => {
      await applyAttrs(toReal(p), attrs);
      ok(reqId);
    });
  });

  sftp.on('OPENDIR', (reqId, p) => {
    safe(reqId, async () => {
      const real = toReal(p);
      const s = await fsp.stat(real);
      if (!s.isDirectory()) return sftp.status(reqId, STATUS_CODE.FAILURE, 'not a directory');
      sftp.handle(reqId, newHandle({ kind: 'dir', real, vpath: toVirtual(p), pos: 0 }));
    });
  });

  sftp.on('READDIR', (reqId, hbuf) => {
    safe(reqId, async () => {
      const h = lookup(hbuf);
      if (!h || h.kind !== 'dir') return sftp.status(reqId, STATUS_CODE.FAILURE, 'invalid handle');
      if (!h.entries) {
        const names = ['.', '..', ...(await fsp.readdir(h.real)).sort()];
        const entries: FileEntry[] = [];
        for (const name of names) {
          const realChild = name === '..' && h.vpath === '/' ? h.real : path.join(h.real, name);
          try {
            const s = await fsp.lstat(realChild);
            entries.push({ filename: name, longname: longname(name, s), attrs: toAttrs(s) });
          } catch {
            /* vanished meanwhile */
          }
        }
        h.entries = entries;
      }
      if (h.pos >= h.entries.length) return sftp.status(reqId, STATUS_CODE.EOF);
      const batch = h.entries.slice(h.pos, h.pos + 64);
      h.pos += batch.length;
      sftp.name(reqId, batch);
    });
  });

  sftp.on('MKDIR', (reqId, p, attrs) => {
    safe(reqId, async () => {
      const a = attrs as Partial<Attributes> | undefined;
      await fsp.mkdir(toReal(p), { mode: typeof a?.mode === 'number' ? a.mode & 0o7777 : 0o755 });
      ok(reqId);
    });
  });

  sftp.on('RMDIR', (reqId, p) => {
    safe(reqId, async () => {
      if (toVirtual(p) === '/') return sftp.status(reqId, STATUS_CODE.PERMISSION_DENIED, 'cannot remove the root');
      await fsp.rmdir(toReal(p));
      ok(reqId);
    });
  });

  sftp.on('REMOVE', (reqId, p) => {
    safe(reqId, async () => {
      await fsp.unlink(toReal(p));
      ok(reqId);
    });
  });

  // Like OpenSSH's sftp-server (protocol v3): RENAME refuses to overwrite an existing target.
  // For an atomic replace, upload to a temp name and `mv -f` it over via exec.
  sftp.on('RENAME', (reqId, oldPath, newPath) => {
    safe(reqId, async () => {
      const from = toReal(oldPath);
      const to = toReal(newPath);
      const exists = await fsp.lstat(to).then(
        () => true,
        () => false,
      );
      if (exists) return sftp.status(reqId, STATUS_CODE.FAILURE, 'target exists');
      await fsp.rename(from, to);
      ok(reqId);
    });
  });
}

// ---------------------------------------------------------------------------------------------
// Demo fleet
// ---------------------------------------------------------------------------------------------

/**
 * Default 12 devices "edge-01".."edge-12": pools alternate pool-a / pool-b, two thirds "server"
 * (8 of 12) and one third "desktop" (every third device), os "linux", updateClass "required",
 * labels { site: site-1 (first half) | site-2, role: <class> }.
 */
export function demoDevices(n = 12): SimDeviceSpec[] {
  const width = Math.max(2, String(n).length);
  const out: SimDeviceSpec[] = [];
  for (let i = 1; i <= n; i++) {
    const cls = i % 3 === 0 ? 'desktop' : 'server';
    const pool = i % 2 === 1 ? 'pool-a' : 'pool-b';
    const spec: SimDeviceSpec = {
      id: `edge-${String(i).padStart(width, '0')}`,
      pool,
      class: cls,
      os: 'linux',
      labels: { site: i <= Math.ceil(n / 2) ? 'site-1' : 'site-2', role: cls },
      updateClass: 'required',
    };
    out.push(spec);
  }
  return out;
}
