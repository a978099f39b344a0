/**
 * Real OpenSSH `sshd` processes on 127.0.0.1, one per device: the fleet that proves the transport against
 * the real thing (test/support/sshd.ts) and the one the side-by-side benchmark runs on
 * (bench/sshd-compare.ts). Debian packages: `openssh-server` (and `openssh-client` for ssh-keygen).
 *
 * Each device gets its own directory with its own host key, authorized_keys, config, pid file and log,
 * and its own HOME: sshd logs in as a real user (the current one; root here), so `SetEnv HOME=<dir>`
 * gives every device a separate home for markers, staging and payload, and the login shell finds no
 * rc file there (root's real ~/.bashrc runs `pyenv rehash`, which takes a global lock: sessions must
 * not read it). sshd still starts each session (and internal-sftp) in the user's passwd home, which is
 * why the transport uploads to absolute `$HOME` paths. A per-device `bin/` first on PATH holds the
 * helpers the caller names (the demo profile's health helpers, for instance).
 *
 * Every sshd runs in its own process group and logs to its own file (`-E`), not to a pipe of ours. The
 * groups end with the process that started the fleet, whatever ends it (sim/reaper.ts), unless the fleet
 * is started with `detach`: then it outlives that process (the benchmark's `--keep`).
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import * as net from 'node:net';
import { userInfo } from 'node:os';
import { join, resolve } from 'node:path';
import { sshFingerprint } from '../intake/known-hosts';
import { freePort } from '../sim/ports';
import { endWithThisProcess } from '../sim/reaper';

export const SSHD_PATH = '/usr/sbin/sshd';

export interface OpenSshDevice {
  id: string;
  host: '127.0.0.1';
  port: number;
  /** The login user (the user running the fleet). */
  user: string;
  /** This device's $HOME in every session: markers land under it. */
  home: string;
  /** `SHA256:...` of the host key, as `ssh-keygen -lf` prints it. */
  hostKeyFingerprint: string;
  /** `ssh-ed25519 AAAA...` */
  hostPublicKey: string;
  hostKeyPubPath: string;
  /** This device's sshd pid (the listener). */
  pid: number;
  /** sshd's own log file (LogLevel as asked). */
  log(): string;
}

export interface OpenSshFleet {
  user: string;
  clientKeyPath: string;
  devices: OpenSshDevice[];
  device(id: string): OpenSshDevice;
  /** `[127.0.0.1]:port key` lines for every device, for an OpenSSH client's UserKnownHostsFile. */
  knownHosts(): string;
  /** Stops every sshd (listener process groups) and waits until each is gone; idempotent. */
  stop(): Promise<void>;
  /** Stops one device's sshd (it is offline: its port refuses connections) and waits until it is gone. */
  stopDevice(id: string): Promise<void>;
  /** Starts a stopped device's sshd again, on its port, with its keys, home and authorized keys as they were. */
  startDevice(id: string): Promise<void>;
}

export interface OpenSshFleetOptions {
  dir: string;
  ids: string[];
  /** Device i listens on basePort + i (keep it below 32768, the kernel's ephemeral range); a free port if unset. */
  basePort?: number;
  /** Executables put in each device's bin/ (first on PATH): name → script body. */
  helpers?: Record<string, string>;
  /** sshd LogLevel (default DEBUG1: each direct-tcpip tunnel is logged, which the jump-host test reads). */
  logLevel?: 'ERROR' | 'INFO' | 'VERBOSE' | 'DEBUG1';
  /** sshd started at once (default 16). */
  concurrency?: number;
  /** Leave the sshd running when this process ends without stop() (default: they end with it, by any cause). */
  detach?: boolean;
  /**
   * Keep each device's authorized keys where a real login's are, `<home>/.ssh/authorized_keys` (default: beside its
   * config, outside the home): what a login key rotation edits through the device's own shell.
   */
  authorizedKeysInHome?: boolean;
}

function run(cmd: string, args: string[]): string {
  const res = spawnSync(cmd, args, { encoding: 'utf8' });
  if (res.error) throw new Error(`openssh fleet: cannot run ${cmd}: ${res.error.message}`);
  if (res.status !== 0)
    throw new Error(`openssh fleet: ${cmd} ${args.join(' ')} exited ${res.status}: ${res.stderr.trim()}`);
  return res.stdout;
}

/** An ed25519 key pair at `path` (and `path.pub`), unless one is there already. */
export function keygen(path: string, comment: string): void {
  if (!existsSync(path)) run('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-C', comment, '-f', path]);
}

function accepts(port: number): Promise<boolean> {
  return new Promise((done) => {
    const sock = net.connect({ host: '127.0.0.1', port });
    sock.once('connect', () => {
      sock.destroy();
      done(true);
    });
    sock.once('error', () => done(false));
  });
}

interface Running {
  child: ChildProcess;
  exited: Promise<void>;
}

/** Start one sshd and wait until its port accepts; undefined if it exited first because the port was taken. */
async function launch(config: string, logFile: string, port: number, detach: boolean): Promise<Running | undefined> {
  // Own process group, so stop() can signal the listener without touching anything else; the log goes
  // to a file, so only the watchdog (unless `detach`) ties sshd to this process.
  const child = spawn(SSHD_PATH, ['-D', '-f', config, '-E', logFile], { stdio: 'ignore', detached: true });
  if (!detach) endWithThisProcess(child);
  const exited = new Promise<void>((done) => child.once('exit', () => done()));
  let gone = false;
  void exited.then(() => (gone = true));
  const deadline = Date.now() + 15_000;
  while (!gone && Date.now() < deadline) {
    if (await accepts(port)) return { child, exited };
    await new Promise((r) => setTimeout(r, 25));
  }
  if (!gone && child.pid) process.kill(-child.pid, 'SIGKILL');
  await exited;
  const log = existsSync(logFile) ? readFileSync(logFile, 'utf8') : '';
  if (/Address already in use|Cannot bind/.test(log)) return undefined;
  throw new Error(`openssh fleet: ${SSHD_PATH} -f ${config} did not start:\n${log}`);
}

/**
 * Start one real sshd per id under `dir`, all accepting one generated client key for the current user.
 * Requires Debian `openssh-server`; run as root it also creates the privilege-separation dir /run/sshd.
 */
export async function startOpenSshFleet(opts: OpenSshFleetOptions): Promise<OpenSshFleet> {
  if (!existsSync(SSHD_PATH))
    throw new Error(`openssh fleet: ${SSHD_PATH} not found; install the Debian package openssh-server`);
  const base = resolve(opts.dir);
  mkdirSync(base, { recursive: true });
  if (process.getuid?.() === 0) mkdirSync('/run/sshd', { recursive: true, mode: 0o755 });
  const user = userInfo().username;
  const clientKeyPath = join(base, 'client_ed25519');
  keygen(clientKeyPath, 'wavegate-fleet-client');
  const clientPub = readFileSync(`${clientKeyPath}.pub`, 'utf8');

  const running: Running[] = [];
  /** Each device's listener now, and how to start it again (stopDevice / startDevice). */
  const byId = new Map<string, { run: Running; relaunch: () => Promise<Running | undefined> }>();
  const devices: OpenSshDevice[] = new Array(opts.ids.length);
  let stopping: Promise<void> | undefined;
  const stop = (): Promise<void> => {
    stopping ??= (async () => {
      for (const r of running) {
        if (r.child.exitCode === null && r.child.pid) {
          try {
            process.kill(-r.child.pid, 'SIGTERM');
          } catch {
            /* already gone */
          }
        }
      }
      await Promise.all(running.map((r) => r.exited));
    })();
    return stopping;
  };

  async function startDevice(index: number): Promise<void> {
    const id = opts.ids[index]!;
    const dir = join(base, id);
    const home = join(dir, 'home');
    const bin = join(dir, 'bin');
    mkdirSync(home, { recursive: true });
    mkdirSync(bin, { recursive: true });
    for (const [name, body] of Object.entries(opts.helpers ?? {}))
      writeFileSync(join(bin, name), body, { mode: 0o755 });
    const hostKey = join(dir, 'ssh_host_ed25519_key');
    keygen(hostKey, `wavegate-fleet-${id}`);
    const authorizedKeys = opts.authorizedKeysInHome
      ? join(home, '.ssh', 'authorized_keys')
      : join(dir, 'authorized_keys');
    if (opts.authorizedKeysInHome) mkdirSync(join(home, '.ssh'), { recursive: true, mode: 0o700 });
    writeFileSync(authorizedKeys, clientPub, { mode: 0o600 });
    const [type, blob] = readFileSync(`${hostKey}.pub`, 'utf8').trim().split(/\s+/) as [string, string];
    const logFile = join(dir, 'sshd.log');

    let started: Running | undefined;
    let port = 0;
    for (let attempt = 0; attempt < 5 && !started; attempt++) {
      if (opts.basePort !== undefined && attempt > 0)
        throw new Error(`openssh fleet: port ${opts.basePort + index} for ${id} is taken`);
      port = opts.basePort !== undefined ? opts.basePort + index : await freePort();
      const config = join(dir, 'sshd_config');
      writeFileSync(
        config,
        [
          `Port ${port}`,
          'ListenAddress 127.0.0.1',
          `HostKey ${hostKey}`,
          `PidFile ${join(dir, 'sshd.pid')}`,
          `AuthorizedKeysFile ${authorizedKeys}`,
          `AllowUsers ${user}`,
          'PubkeyAuthentication yes',
          'PasswordAuthentication no',
          'KbdInteractiveAuthentication no',
          'PermitRootLogin prohibit-password',
          'StrictModes no',
          'UsePAM no',
          'UseDNS no',
          'PrintMotd no',
          'PrintLastLog no',
          // Many sessions open at once from one client (the benchmark's 50 in flight) must not be dropped.
          'MaxStartups 200:30:400',
          'MaxSessions 64',
          'AllowTcpForwarding yes',
          `LogLevel ${opts.logLevel ?? 'DEBUG1'}`,
          // HOME without rc files, so no session reads the machine's ~/.bashrc; BASH_ENV/ENV empty so a
          // non-interactive shell sources nothing either.
          `SetEnv HOME=${home} PATH=${bin}:/usr/local/bin:/usr/bin:/bin WAVEGATE_DEVICE_ID=${id} BASH_ENV= ENV= SHLVL=1`,
          'Subsystem sftp internal-sftp',
          '',
        ].join('\n'),
      );
      started = await launch(config, logFile, port, opts.detach === true);
    }
    if (!started) throw new Error(`openssh fleet: no free port for ${id} after 5 attempts`);
    running.push(started);
    const config = join(dir, 'sshd_config');
    const bound = port;
    byId.set(id, { run: started, relaunch: () => launch(config, logFile, bound, opts.detach === true) });
    devices[index] = {
      id,
      host: '127.0.0.1',
      port,
      user,
      home,
      hostKeyFingerprint: sshFingerprint(Buffer.from(blob, 'base64')),
      hostPublicKey: `${type} ${blob}`,
      hostKeyPubPath: `${hostKey}.pub`,
      pid: started.child.pid!,
      log: () => (existsSync(logFile) ? readFileSync(logFile, 'utf8') : ''),
    };
  }

  try {
    let next = 0;
    const worker = async () => {
      while (next < opts.ids.length) await startDevice(next++);
    };
    await Promise.all(Array.from({ length: Math.min(opts.concurrency ?? 16, opts.ids.length) }, worker));
  } catch (err) {
    await stop();
    throw err;
  }

  return {
    user,
    clientKeyPath,
    devices,
    device(id) {
      const d = devices.find((x) => x.id === id);
      if (!d) throw new Error(`openssh fleet: unknown device ${id}`);
      return d;
    },
    knownHosts: () => devices.map((d) => `[${d.host}]:${d.port} ${d.hostPublicKey}\n`).join(''),
    stop,
    ...deviceSwitch(byId, running, devices),
  };
}

/** Taking one device's sshd offline and back, on its port (a device that was away through a change). */
function deviceSwitch(
  byId: Map<string, { run: Running; relaunch: () => Promise<Running | undefined> }>,
  running: Running[],
  devices: OpenSshDevice[],
): Pick<OpenSshFleet, 'stopDevice' | 'startDevice'> {
  const entryOf = (id: string) => {
    const entry = byId.get(id);
    if (!entry) throw new Error(`openssh fleet: unknown device ${id}`);
    return entry;
  };
  return {
    async stopDevice(id) {
      const { child, exited } = entryOf(id).run;
      if (child.exitCode === null && child.pid) process.kill(-child.pid, 'SIGTERM');
      await exited;
    },
    async startDevice(id) {
      const entry = entryOf(id);
      if (entry.run.child.exitCode === null && entry.run.child.signalCode === null) return;
      const again = await entry.relaunch();
      if (!again) throw new Error(`openssh fleet: ${id}'s port was taken while it was stopped`);
      entry.run = again;
      running.push(again);
      devices.find((d) => d.id === id)!.pid = again.child.pid!;
    },
  };
}
