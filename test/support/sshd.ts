/**
 * Real OpenSSH `sshd` processes on 127.0.0.1, one per device, for the tests that must prove the
 * transport against the real thing, not only the simulator. Debian package: `openssh-server` (and
 * `openssh-client` for ssh-keygen).
 *
 * Each device gets its own directory with its own host key, authorized_keys, config and pid file, and
 * its own HOME: sshd logs in as a real user (the current one; root here), so `SetEnv HOME=<dir>`
 * gives every device a separate home for markers, staging and payload. sshd still starts each
 * session (and internal-sftp) in the user's passwd home, which is why the transport uploads to
 * absolute `$HOME` paths. A per-device `bin/` first on PATH provides the demo profile's health
 * helpers (`sim-runtime-health`, `sim-error-rate`) so the demo profile's gates run unchanged.
 */
import { endWithThisProcess } from '../../sim/reaper';
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { userInfo } from 'node:os';
import { join, resolve } from 'node:path';
import { sshFingerprint } from '../../intake/known-hosts';
import { freePort } from '../../sim/ports';
import { keygen, SSHD_PATH } from '../../sim/openssh';

export { SSHD_PATH };

export interface SshdDevice {
  id: string;
  host: '127.0.0.1';
  port: number;
  /** The login user (the user running the tests). */
  user: string;
  /** This device's $HOME in every session: markers land under it. */
  home: string;
  /** `SHA256:...` of the host key, as `ssh-keygen -lf` prints it. */
  hostKeyFingerprint: string;
  /** `ssh-ed25519 AAAA...` */
  hostPublicKey: string;
  hostKeyPubPath: string;
  /** sshd's own log (`-e`, DEBUG1): connections, auth results, forwarding. */
  log(): string;
}

export interface SshdFleet {
  user: string;
  clientKeyPath: string;
  devices: SshdDevice[];
  device(id: string): SshdDevice;
  /** Stops every sshd (listener process groups); idempotent. */
  stop(): Promise<void>;
}

const HEALTH_HELPERS: Record<string, string> = {
  'sim-runtime-health':
    '#!/bin/sh\n# every runtime of a real sshd device is healthy\nfor name in "$@"; do echo "$name healthy"; done\n',
  'sim-error-rate': '#!/bin/sh\necho 0\n',
};

interface Running {
  child: ChildProcess;
  exited: Promise<void>;
  output: () => string;
}

/** Start one sshd and wait for "Server listening"; undefined if it exited first (port taken). */
async function launch(config: string): Promise<Running | undefined> {
  // Own process group, so stop() can signal the listener without touching anything else.
  const child = spawn(SSHD_PATH, ['-D', '-e', '-f', config], { stdio: ['ignore', 'ignore', 'pipe'], detached: true });
  // A test process killed outright (a vitest timeout, SIGKILL) takes its sshd with it.
  endWithThisProcess(child);
  let output = '';
  const exited = new Promise<void>((done) => child.once('exit', () => done()));
  const listening = await new Promise<boolean>((done) => {
    const timer = setTimeout(() => done(false), 10_000);
    child.stderr!.on('data', (chunk: Buffer) => {
      output += chunk.toString('utf8');
      if (/Server listening on 127\.0\.0\.1 port \d+/.test(output)) {
        clearTimeout(timer);
        done(true);
      }
    });
    child.once('exit', () => {
      clearTimeout(timer);
      done(false);
    });
  });
  if (!listening) {
    if (child.exitCode === null && child.pid) process.kill(-child.pid, 'SIGKILL');
    await exited;
    if (/Address already in use|Cannot bind/.test(output)) return undefined;
    throw new Error(`sshd support: ${SSHD_PATH} -f ${config} did not start:\n${output}`);
  }
  return { child, exited, output: () => output };
}

/** A local user's uid and gid (`id`). */
function loginIds(login: string): { uid: number; gid: number } {
  const id = (flag: string) => Number(execFileSync('id', [flag, login]).toString().trim());
  return { uid: id('-u'), gid: id('-g') };
}

/**
 * Start one real sshd per id under `dir`, all accepting one generated client key for the current user.
 * Requires Debian `openssh-server`; run as root it also creates the privilege-separation dir /run/sshd.
 */
export async function startSshdFleet(opts: {
  dir: string;
  ids: string[];
  /**
   * Log in as this user instead of the current one (root only): each device's home is that user's, and the
   * fleet's files sshd reads as that user (authorized_keys) are readable by it.
   */
  login?: string;
}): Promise<SshdFleet> {
  if (!existsSync(SSHD_PATH))
    throw new Error(`sshd support: ${SSHD_PATH} not found; install the Debian package openssh-server`);
  const base = resolve(opts.dir);
  mkdirSync(base, { recursive: true });
  if (process.getuid?.() === 0) mkdirSync('/run/sshd', { recursive: true, mode: 0o755 });
  const user = opts.login ?? userInfo().username;
  const owner = opts.login ? loginIds(opts.login) : undefined;
  // sshd reads authorized_keys as the login: every directory down to it must let the login through.
  if (owner) chmodSync(base, 0o711);
  const clientKeyPath = join(base, 'client_ed25519');
  keygen(clientKeyPath, 'wavegate-test-client');
  const clientPub = readFileSync(`${clientKeyPath}.pub`, 'utf8');

  const running: Running[] = [];
  const devices: SshdDevice[] = [];
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

  try {
    for (const id of opts.ids) {
      const dir = join(base, id);
      const home = join(dir, 'home');
      const bin = join(dir, 'bin');
      mkdirSync(home, { recursive: true });
      mkdirSync(bin, { recursive: true });
      if (owner) {
        chmodSync(dir, 0o711);
        chownSync(home, owner.uid, owner.gid);
      }
      for (const [name, body] of Object.entries(HEALTH_HELPERS)) writeFileSync(join(bin, name), body, { mode: 0o755 });
      const hostKey = join(dir, 'ssh_host_ed25519_key');
      keygen(hostKey, `wavegate-test-${id}`);
      writeFileSync(join(dir, 'authorized_keys'), clientPub, { mode: owner ? 0o644 : 0o600 });
      const [type, blob] = readFileSync(`${hostKey}.pub`, 'utf8').trim().split(/\s+/) as [string, string];

      let started: Running | undefined;
      let port = 0;
      for (let attempt = 0; attempt < 5 && !started; attempt++) {
        port = await freePort();
        const config = join(dir, 'sshd_config');
        writeFileSync(
          config,
          [
            `Port ${port}`,
            'ListenAddress 127.0.0.1',
            `HostKey ${hostKey}`,
            `PidFile ${join(dir, 'sshd.pid')}`,
            `AuthorizedKeysFile ${join(dir, 'authorized_keys')}`,
            `AllowUsers ${user}`,
            'PubkeyAuthentication yes',
            'PasswordAuthentication no',
            'KbdInteractiveAuthentication no',
            'PermitRootLogin prohibit-password',
            'StrictModes no',
            'UsePAM no',
            'AllowTcpForwarding yes',
            // DEBUG1 logs each direct-tcpip tunnel: the proof that a jump host was used.
            'LogLevel DEBUG1',
            `SetEnv HOME=${home} PATH=${bin}:/usr/local/bin:/usr/bin:/bin WAVEGATE_DEVICE_ID=${id}`,
            'Subsystem sftp internal-sftp',
            '',
          ].join('\n'),
        );
        started = await launch(config);
      }
      if (!started) throw new Error(`sshd support: no free port for ${id} after 5 attempts`);
      running.push(started);
      const output = started.output;
      devices.push({
        id,
        host: '127.0.0.1',
        port,
        user,
        home,
        hostKeyFingerprint: sshFingerprint(Buffer.from(blob, 'base64')),
        hostPublicKey: `${type} ${blob}`,
        hostKeyPubPath: `${hostKey}.pub`,
        log: output,
      });
    }
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
      if (!d) throw new Error(`sshd support: unknown device ${id}`);
      return d;
    },
    stop,
  };
}
