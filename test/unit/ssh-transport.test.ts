import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createHash, createHmac, randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import * as net from 'node:net';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DeviceTarget } from '../../core/rollout-state';
import { applyToDevice, type RevisionSteps } from '../../device/steps';
import { connectDevice, TransportError, type TransportErrorKind } from '../../device/transport';
import { channelFor } from '../../device/channel';
import { knownHostFingerprints, sshFingerprint } from '../../intake/known-hosts';
import { generateEd25519, startFleet, type Fleet, type SimDevice } from '../../sim';
import { scratchDir } from '../support/harness';
import { rejection } from '../support/refusal';

/** The rejection of `promise`, which must be a TransportError of `kind`. */
/** The TransportError `promise` rejects with, of this kind. */
async function refused(promise: Promise<unknown>, kind: TransportErrorKind): Promise<TransportError> {
  const err = await rejection(promise, TransportError);
  expect(err.kind, err.message).toBe(kind);
  return err;
}

/** Wait until `check` holds (the simulator records a killed command a moment after the client gives up). */
async function eventually(check: () => boolean, ms = 3_000): Promise<void> {
  const until = Date.now() + ms;
  while (!check()) {
    if (Date.now() > until) throw new Error('condition not reached in time');
    await new Promise((r) => setTimeout(r, 20));
  }
}

// The ssh transport, reached through the seam (connectDevice) as every activity reaches it.
describe('ssh transport against the fleet simulator', () => {
  const scratch = scratchDir('ssh-transport');
  let fleet: Fleet;
  const ids = [
    'plain',
    'rotated',
    'nopin',
    'wrongkey',
    'offline',
    'silent',
    'hang',
    'drop',
    'known',
    'agent',
    'apply',
    'slow',
  ];

  const target = (d: SimDevice, ssh: Partial<DeviceTarget['ssh']> = {}): DeviceTarget => ({
    id: d.id,
    host: d.host,
    port: d.port,
    user: fleet.user,
    pool: 'pool-a',
    class: 'server',
    ssh: { hostKey: d.hostKeyFingerprint, key: fleet.clientKeyPath, ...ssh },
  });

  beforeAll(async () => {
    fleet = await startFleet({ devices: ids.map((id) => ({ id })), dir: join(scratch.dir, 'fleet') });
  });
  afterAll(async () => {
    await fleet?.stop();
    scratch.cleanup();
  });

  it('runs a command over a pinned connection and returns exit code, stdout and stderr', async () => {
    const plain = target(fleet.device('plain'));
    // No transport named: the channel table picks ssh, as for snapshots recorded before the field existed.
    expect(plain).not.toHaveProperty('transport');
    expect(channelFor(plain).name).toBe('ssh');
    const session = await connectDevice(plain);
    try {
      const res = await session.exec('echo out; echo err >&2; exit 3');
      expect(res).toEqual({ code: 3, stdout: 'out\n', stderr: 'err\n' });
      expect(fleet.count('plain', 'echo out')).toBe(1);
    } finally {
      session.close();
    }
  });

  it('the session reads and writes the revision marker under the login home (none or garbage reads as null)', async () => {
    const dev = fleet.device('plain');
    const session = await connectDevice(target(dev));
    try {
      expect(await session.readMarker('marker-test', { timeoutMs: 5_000 })).toBeNull();
      await session.writeMarker('marker-test', 12, { timeoutMs: 5_000 });
      expect(readFileSync(join(dev.sandbox, '.wavegate/profiles/marker-test/revision'), 'utf8')).toBe('12\n');
      expect(await session.readMarker('marker-test', { timeoutMs: 5_000 })).toBe(12);
      writeFileSync(join(dev.sandbox, '.wavegate/profiles/marker-test/revision'), 'garbage\n');
      expect(await session.readMarker('marker-test', { timeoutMs: 5_000 })).toBeNull();
    } finally {
      session.close();
    }
  });

  it('a changed host key is refused as host-key, not retryable, and the device runs no command', async () => {
    const dev = fleet.device('rotated');
    const pinned = dev.hostKeyFingerprint;
    fleet.rotateHostKey('rotated');
    expect(dev.hostKeyFingerprint).not.toBe(pinned);
    const err = await refused(connectDevice(target(dev, { hostKey: pinned })), 'host-key');
    expect(err.retryable).toBe(false);
    expect(err.message).toContain(`host key ${dev.hostKeyFingerprint}`);
    expect(err.message).toContain(`pinned ${pinned}`);
    expect(fleet.commands('rotated')).toHaveLength(0);
  });

  it('a host-key mismatch names the fix: fleet repin with the key the host presents', async () => {
    const dev = fleet.device('rotated');
    const err = await refused(connectDevice(target(dev, { hostKey: 'SHA256:not-the-key' })), 'host-key');
    expect(err.message).toMatch(
      new RegExp(
        `refusing to connect\\. If the host was re-keyed on purpose, check the new key on the host itself, then pin it: wavegate fleet repin rotated --inventory <fleet\\.yaml> --accept ${dev.hostKeyFingerprint.replace(/[+/]/g, '\\$&')}$`,
      ),
    );
  });

  it('a device with no pinned key is refused before any connection is made', async () => {
    const dev = fleet.device('nopin');
    const err = await refused(connectDevice(target(dev, { hostKey: undefined })), 'host-key');
    expect(err.retryable).toBe(false);
    expect(err.message).toMatch(/no pinned host key .*refusing to trust an unknown key/);
    expect(fleet.connections('nopin')).toBe(0);
    expect(fleet.commands('nopin')).toHaveLength(0);
  });

  it('a client key the device does not accept fails as auth, not retryable', async () => {
    const otherKey = join(scratch.dir, 'other_ed25519');
    writeFileSync(otherKey, generateEd25519().private, { mode: 0o600 });
    const err = await refused(connectDevice(target(fleet.device('wrongkey'), { key: otherKey })), 'auth');
    expect(err.retryable).toBe(false);
    expect(err.message).toContain(`authentication as ${fleet.user}`);
    expect(fleet.commands('wrongkey')).toHaveLength(0);
  });

  it('a missing key file, or neither key nor agent, is a config error', async () => {
    const dev = fleet.device('wrongkey');
    const missing = join(scratch.dir, 'no-such-key');
    expect((await refused(connectDevice(target(dev, { key: missing })), 'config')).message).toContain(
      `ssh.key ${missing}: cannot read file (ENOENT)`,
    );
    expect((await refused(connectDevice(target(dev, { key: undefined })), 'config')).retryable).toBe(false);
    const garbage = join(scratch.dir, 'garbage-key');
    writeFileSync(garbage, 'not a key\n', { mode: 0o600 });
    expect((await refused(connectDevice(target(dev, { key: garbage })), 'config')).message).toContain(
      'cannot start an SSH connection',
    );
  });

  it('a key or known_hosts path that is a FIFO or a device is refused at once, never read: the worker neither stalls nor floods', async () => {
    const dev = fleet.device('wrongkey');
    const fifo = join(scratch.dir, 'key-fifo');
    spawnSync('mkfifo', [fifo]);
    for (const path of [fifo, '/dev/zero', scratch.dir]) {
      const started = Date.now();
      const key = await refused(connectDevice(target(dev, { key: path })), 'config');
      expect(key.message).toContain(`ssh.key ${path}: cannot read file (not a regular file)`);
      expect(key.retryable).toBe(false);
      const known = await refused(connectDevice(target(dev, { hostKey: undefined, knownHosts: path })), 'config');
      expect(known.message).toContain(`ssh.knownHosts ${path}: cannot read file (not a regular file)`);
      expect(Date.now() - started).toBeLessThan(5_000);
    }
    expect(fleet.commands('wrongkey')).toHaveLength(0);
  });

  it('an offline device (connection refused) is a retryable connect error', async () => {
    await fleet.setFaults('offline', { offline: true });
    try {
      const err = await refused(connectDevice(target(fleet.device('offline'))), 'connect');
      expect(err.retryable).toBe(true);
      expect(err.message).toContain('ECONNREFUSED');
    } finally {
      await fleet.setFaults('offline', {});
    }
    // Back online on the same port: the same target connects.
    const session = await connectDevice(target(fleet.device('offline')));
    session.close();
  });

  it('a port that accepts TCP but never speaks SSH is a retryable timeout within the connect limit', async () => {
    const held = new Set<net.Socket>();
    const silent = net.createServer((sock) => {
      held.add(sock);
      sock.on('error', () => {});
    });
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const port = (silent.address() as net.AddressInfo).port;
    try {
      const started = Date.now();
      const err = await refused(
        connectDevice({ ...target(fleet.device('silent')), port }, { connectTimeoutMs: 400 }),
        'timeout',
      );
      expect(Date.now() - started).toBeLessThan(3_000);
      expect(err.retryable).toBe(true);
      expect(err.message).toContain(`127.0.0.1:${port} timed out after 400 ms`);
    } finally {
      for (const s of held) s.destroy();
      silent.close();
    }
  });

  it('a hung command hits its timeout (retryable) and the command is killed on the device', async () => {
    await fleet.setFaults('hang', { hangCommand: 'sleep-forever' });
    const session = await connectDevice(target(fleet.device('hang')));
    try {
      const err = await refused(session.exec('sleep-forever', { timeoutMs: 300 }), 'timeout');
      expect(err.retryable).toBe(true);
      expect(err.message).toContain('command timed out after 300 ms: sleep-forever');
      // Closing the channel ends the command on the device: nothing is left running there.
      await eventually(() => fleet.commands('hang')[0]?.endedAt !== undefined);
      // The connection itself is still good for the next command.
      expect((await session.exec('echo still-here')).stdout).toBe('still-here\n');
    } finally {
      session.close();
    }
  });

  it('a connection dropped mid-command is a retryable dropped error, and later calls fail the same way without a crash', async () => {
    await fleet.setFaults('drop', { dropConnection: 'cut-me' });
    const session = await connectDevice(target(fleet.device('drop')));
    try {
      const err = await refused(session.exec('cut-me'), 'dropped');
      expect(err.retryable).toBe(true);
      expect(err.message).toContain('connection lost while running: cut-me');
      await refused(session.exec('echo after'), 'dropped');
      await refused(
        session.stage('never', [{ name: 'x', sha256: '0'.repeat(64), read: () => Buffer.from('x') }], {
          timeoutMs: 1_000,
        }),
        'dropped',
      );
      expect(fleet.count('drop', 'echo after')).toBe(0);
    } finally {
      session.close();
    }
  });

  it('pins through a known_hosts file: plain and hashed entries match, other keys and @revoked keys do not', async () => {
    const dev = fleet.device('known');
    const [type, blob] = dev.hostPublicKey.split(' ') as [string, string];
    const other = generateEd25519().parsed.getPublicSSH().toString('base64');
    const plain = join(scratch.dir, 'known_hosts');
    writeFileSync(
      plain,
      `# pinned by the test\n[127.0.0.1]:1 ${type} ${other}\n[127.0.0.1]:${dev.port} ${type} ${blob}\n`,
    );
    expect(knownHostFingerprints(plain, '127.0.0.1', dev.port)).toEqual([dev.hostKeyFingerprint]);
    const session = await connectDevice(target(dev, { hostKey: undefined, knownHosts: plain }));
    expect((await session.exec('echo pinned')).stdout).toBe('pinned\n');
    session.close();

    const salt = randomBytes(20);
    const hashedName = createHmac('sha1', salt).update(`[127.0.0.1]:${dev.port}`).digest('base64');
    const hashed = join(scratch.dir, 'known_hosts.hashed');
    writeFileSync(hashed, `|1|${salt.toString('base64')}|${hashedName} ${type} ${blob}\n`);
    expect(knownHostFingerprints(hashed, '127.0.0.1', dev.port)).toEqual([dev.hostKeyFingerprint]);

    const wrong = join(scratch.dir, 'known_hosts.wrong');
    writeFileSync(wrong, `[127.0.0.1]:${dev.port} ${type} ${other}\n`);
    const err = await refused(connectDevice(target(dev, { hostKey: undefined, knownHosts: wrong })), 'host-key');
    expect(err.message).toContain(`does not match the pinned ${sshFingerprint(Buffer.from(other, 'base64'))}`);

    const revoked = join(scratch.dir, 'known_hosts.revoked');
    writeFileSync(
      revoked,
      `[127.0.0.1]:${dev.port} ${type} ${blob}\n@revoked [127.0.0.1]:${dev.port} ${type} ${blob}\n`,
    );
    await refused(connectDevice(target(dev, { hostKey: undefined, knownHosts: revoked })), 'host-key');

    // Port 22 devices are listed by bare name too.
    writeFileSync(plain, `device.example,10.0.0.9 ${type} ${blob}\n`);
    expect(knownHostFingerprints(plain, '10.0.0.9', 22)).toEqual([dev.hostKeyFingerprint]);
    expect(knownHostFingerprints(plain, '10.0.0.9', 2222)).toEqual([]);

    await refused(
      connectDevice(target(dev, { hostKey: undefined, knownHosts: join(scratch.dir, 'missing_known_hosts') })),
      'config',
    );
  });

  it('a jump host without a pinned key is refused before anything is contacted', async () => {
    const dev = fleet.device('plain');
    const before = fleet.commands('plain').length;
    const err = await refused(
      connectDevice(target(dev, { jumpHost: { host: '127.0.0.1', port: dev.port, user: fleet.user } })),
      'host-key',
    );
    expect(err.message).toContain('no pinned host key for the jump host');
    expect(fleet.commands('plain')).toHaveLength(before);
  });

  describe('with a real ssh-agent', () => {
    let agent: ChildProcess | undefined;
    const sock = join(scratch.dir, 'agent.sock');
    const savedSock = process.env.SSH_AUTH_SOCK;

    beforeAll(async () => {
      agent = spawn('ssh-agent', ['-D', '-a', sock], { stdio: 'ignore' });
      await eventually(() => existsSync(sock), 5_000);
    });
    afterAll(() => {
      if (savedSock === undefined) delete process.env.SSH_AUTH_SOCK;
      else process.env.SSH_AUTH_SOCK = savedSock;
      if (agent?.pid) process.kill(agent.pid, 'SIGTERM');
    });

    const sshAdd = (...args: string[]) => {
      const res = spawnSync('ssh-add', args, { env: { ...process.env, SSH_AUTH_SOCK: sock }, encoding: 'utf8' });
      expect(res.status, res.stderr).toBe(0);
    };

    it('logs in with the key held by the agent at $SSH_AUTH_SOCK; an empty agent fails as auth; no socket is config', async () => {
      const dev = fleet.device('agent');
      sshAdd(fleet.clientKeyPath);
      process.env.SSH_AUTH_SOCK = sock;
      const session = await connectDevice(target(dev, { key: undefined, agent: true }));
      expect((await session.exec('echo via-agent')).stdout).toBe('via-agent\n');
      session.close();

      sshAdd('-D');
      const err = await refused(connectDevice(target(dev, { key: undefined, agent: true })), 'auth');
      expect(err.retryable).toBe(false);

      delete process.env.SSH_AUTH_SOCK;
      expect((await refused(connectDevice(target(dev, { key: undefined, agent: true })), 'config')).message).toContain(
        'SSH_AUTH_SOCK is not set',
      );
    });
  });

  describe('applyToDevice', () => {
    const payloadBody = 'wavegate transport test payload\n';
    // The worker's profiles directory: payload files are read from <profiles>/<profile>/payload/ only.
    const profilesRoot = join(scratch.dir, 'profiles');
    const payloadPath = join(profilesRoot, 'transport', 'payload', 'payload.txt');
    const steps = (apply: string): RevisionSteps => ({
      profile: 'transport',
      revision: 7,
      apply,
      verify: 'grep -qx "wavegate transport test payload" "$HOME/etc/payload.txt"',
      payload: [
        {
          name: 'payload.txt',
          sha256: createHash('sha256').update(payloadBody).digest('hex'),
          size: payloadBody.length,
          source: 'payload/payload.txt',
        },
      ],
    });

    beforeAll(() => {
      mkdirSync(dirname(payloadPath), { recursive: true });
      writeFileSync(payloadPath, payloadBody);
    });

    it('stages the payload over SFTP with a digest check, applies, verifies and writes the marker; again: verify only', async () => {
      const dev = fleet.device('apply');
      const install = 'mkdir -p "$HOME/etc" && cp "$WAVEGATE_STAGING/payload.txt" "$HOME/etc/payload.txt"';
      // streamPayloadMaxBytes 0: never streamed in the apply's command, so a device that lacks it gets it by SFTP.
      const first = await applyToDevice(target(dev), steps(install), {
        commandTimeoutMs: 10_000,
        profilesRoot: profilesRoot,
        streamPayloadMaxBytes: 0,
      });
      expect(first).toEqual({
        device: 'apply',
        outcome: 'applied',
        steps: ['verify', 'stage', 'apply', 'verify', 'marker'],
      });
      expect(fleet.sftpUploads('apply')).toBe(1);
      // The unit's script (stops: payload not staged), the upload's mkdir and device-side digest check, the script again.
      expect(fleet.commands('apply')).toHaveLength(4);
      expect(fleet.count('apply', /^cd "\$HOME\/\.wavegate\/staging\/transport\/7" && printf .* \| sha256sum -c/)).toBe(
        1,
      );
      expect(readFileSync(join(dev.sandbox, '.wavegate/staging/transport/7/payload.txt'), 'utf8')).toBe(payloadBody);
      expect(readFileSync(join(dev.sandbox, '.wavegate/profiles/transport/revision'), 'utf8')).toBe('7\n');

      const sent = fleet.commands('apply').length;
      const again = await applyToDevice(target(dev), steps(install), {
        commandTimeoutMs: 10_000,
        profilesRoot: profilesRoot,
      });
      expect(again).toEqual({ device: 'apply', outcome: 'already-applied', steps: ['verify', 'marker'] });
      expect(fleet.commands('apply').length - sent).toBe(1); // one script: verify first passed, marker, release
      expect(fleet.sftpUploads('apply')).toBe(1);
    });

    it('a long apply keeps heartbeating while it runs', async () => {
      const dev = fleet.device('slow');
      const beats: string[] = [];
      const install = 'sleep 1.2 && mkdir -p "$HOME/etc" && cp "$WAVEGATE_STAGING/payload.txt" "$HOME/etc/payload.txt"';
      const result = await applyToDevice(target(dev), steps(install), {
        commandTimeoutMs: 10_000,
        profilesRoot: profilesRoot,
        heartbeat: (d) => beats.push(d),
        heartbeatIntervalMs: 200,
      });
      expect(result.outcome).toBe('applied');
      const during = beats.filter((b) => /^apply running \d+s$/.test(b));
      expect(during.length, beats.join(', ')).toBeGreaterThanOrEqual(3);
      expect(beats.indexOf('apply')).toBeLessThan(beats.indexOf(during[0]!));
    });

    it('a hung apply fails as a retryable timeout after the command timeout', async () => {
      const dev = fleet.device('slow');
      await fleet.setFaults('slow', { hangCommand: 'hang-here' });
      try {
        await refused(
          applyToDevice(
            target(dev),
            { ...steps('hang-here'), revision: 8, verify: 'false' },
            { commandTimeoutMs: 500, profilesRoot: profilesRoot },
          ),
          'timeout',
        );
      } finally {
        await fleet.setFaults('slow', {});
      }
    });
  });
});
