import { demoDevices, generateEd25519, startFleet, type Fleet, type SimDevice } from '../../sim';
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { Client, type ClientChannel, type ConnectConfig } from 'ssh2';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

interface ExecResult {
  code: number | null;
  signal?: string;
  stdout: string;
  stderr: string;
  timedOut: boolean;
}

function fingerprint(blob: Buffer): string {
  return `SHA256:${createHash('sha256').update(blob).digest('base64').replace(/=+$/, '')}`;
}

function connect(dev: SimDevice, fleet: Fleet, extra: Partial<ConnectConfig> = {}): Promise<Client> {
  return new Promise((resolve, reject) => {
    const c = new Client();
    c.once('ready', () => resolve(c));
    c.once('error', (err) => {
      c.end();
      reject(err);
    });
    c.connect({
      host: dev.host,
      port: dev.port,
      username: fleet.user,
      privateKey: fs.readFileSync(fleet.clientKeyPath),
      readyTimeout: 5_000,
      hostVerifier: (key: Buffer) => fingerprint(key) === dev.hostKeyFingerprint,
      ...extra,
    });
  });
}

function exec(conn: Client, command: string, timeoutMs = 5_000, input?: string): Promise<ExecResult> {
  return new Promise((resolve, reject) => {
    conn.exec(command, (err, stream: ClientChannel) => {
      if (err) return reject(err);
      if (input !== undefined) stream.end(input);
      const res: ExecResult = { code: null, stdout: '', stderr: '', timedOut: false };
      const timer = setTimeout(() => {
        res.timedOut = true;
        stream.close();
      }, timeoutMs);
      stream.on('exit', (code: number | null, signal?: string) => {
        res.code = code;
        if (signal) res.signal = signal;
      });
      stream.on('data', (d: Buffer) => (res.stdout += d.toString()));
      stream.stderr.on('data', (d: Buffer) => (res.stderr += d.toString()));
      stream.on('close', () => {
        clearTimeout(timer);
        resolve(res);
      });
    });
  });
}

async function waitFor(cond: () => boolean, timeoutMs = 3_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > end) throw new Error('waitFor: timed out');
    await new Promise((r) => setTimeout(r, 20));
  }
}

function probe(port: number): Promise<'open' | string> {
  return new Promise((resolve) => {
    const s = net.connect({ host: '127.0.0.1', port });
    s.once('connect', () => {
      s.destroy();
      resolve('open');
    });
    s.once('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message));
  });
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe('fleet simulator', () => {
  let dir: string;
  let fleet: Fleet;
  let a: SimDevice;
  let b: SimDevice;
  let c: SimDevice;

  beforeAll(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wavegate-fleet-sim-'));
    fleet = await startFleet({ devices: demoDevices(3), dir });
    [a, b, c] = fleet.devices;
  });

  afterAll(async () => {
    await fleet?.stop();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  it('demoDevices: 12 by default, 2 pools, 8 servers / 4 desktops', () => {
    const d = demoDevices();
    expect(d).toHaveLength(12);
    expect(d[0].id).toBe('edge-01');
    expect(new Set(d.map((x) => x.pool))).toEqual(new Set(['pool-a', 'pool-b']));
    expect(d.filter((x) => x.class === 'server')).toHaveLength(8);
    expect(d.filter((x) => x.class === 'desktop')).toHaveLength(4);
    expect(d.every((x) => x.os === 'linux')).toBe(true);
    expect(fleet.devices.map((x) => x.id)).toEqual(['edge-01', 'edge-02', 'edge-03']);
    expect(fs.statSync(fleet.clientKeyPath).mode & 0o777).toBe(0o600);
    expect(fleet.clientPublicKey).toMatch(/^ssh-ed25519 AAAA/);
    expect(a.hostPublicKey).toMatch(/^ssh-ed25519 AAAA\S+$/);
    expect(new Set(fleet.devices.map((x) => x.port)).size).toBe(3);
  });

  it('runs execs in the sandbox with the device env, propagates exit codes and counts them', async () => {
    fleet.resetCounters();
    const conn = await connect(a, fleet);
    try {
      const r = await exec(conn, 'echo $WAVEGATE_DEVICE_ID; pwd; echo "$HOME|$WAVEGATE_ROOT|$LANG"');
      expect(r.code).toBe(0);
      const [id, pwd, envLine] = r.stdout.trim().split('\n');
      expect(id).toBe('edge-01');
      expect(fs.realpathSync(pwd)).toBe(fs.realpathSync(a.sandbox));
      expect(envLine).toBe(`${a.sandbox}|${a.sandbox}|C`);

      const e = await exec(conn, 'echo oops >&2; exit 3');
      expect(e.code).toBe(3);
      expect(e.stderr).toBe('oops\n');

      const info = await exec(conn, 'sim-device-info');
      expect(info.stdout).toContain('id=edge-01\n');
      expect(info.stdout).toContain('pool=pool-a\n');
      expect(info.stdout).toContain('class=server\n');
      expect(info.stdout).toContain('os=linux\n');

      // stdin reaches the command; larger outputs arrive intact before the exit status
      const piped = await exec(conn, 'cat > from-stdin.txt && wc -c < from-stdin.txt', 5_000, 'hello stdin\n');
      expect(piped).toMatchObject({ code: 0 });
      expect(piped.stdout.trim()).toBe('12');
      expect(fs.readFileSync(path.join(a.sandbox, 'from-stdin.txt'), 'utf8')).toBe('hello stdin\n');
      const big = await exec(conn, 'head -c 300000 /dev/zero | tr "\\0" x');
      expect(big.code).toBe(0);
      expect(big.stdout.length).toBe(300000);

      expect(fleet.count(a.id, 'echo')).toBe(2);
      expect(fleet.count(a.id, /^sim-device-info$/)).toBe(1);
      expect(fleet.commands(a.id).map((x) => x.exitCode)).toEqual([0, 3, 0, 0, 0]);
      expect(fleet.commands(a.id)[1].endedAt).toBeGreaterThanOrEqual(fleet.commands(a.id)[1].startedAt);
      expect(fleet.totalCommands()).toBe(5);
      expect(fleet.commands(b.id)).toEqual([]);
      fleet.resetCounters();
      expect(fleet.totalCommands()).toBe(0);
    } finally {
      conn.end();
    }
  });

  it('failCommand / hangCommand / dropConnection / latency', async () => {
    fleet.resetCounters();
    await fleet.setFaults(b.id, { failCommand: '^touch ', hangCommand: 'deploy-slow', dropConnection: 'kaboom' });
    const conn = await connect(b, fleet);
    try {
      const f = await exec(conn, 'touch marker');
      expect(f.code).toBe(1);
      expect(f.stderr).toContain('simulated failure');
      expect(fs.existsSync(path.join(b.sandbox, 'marker'))).toBe(false);

      const h = await exec(conn, 'echo deploy-slow', 300);
      expect(h.timedOut).toBe(true);
      expect(h.code).toBeNull();
      await waitFor(() => fleet.commands(b.id)[1]?.endedAt !== undefined);
      expect(fleet.commands(b.id)[1]).toMatchObject({ command: 'echo deploy-slow', exitCode: null });

      const ok = await exec(conn, 'echo fine');
      expect(ok).toMatchObject({ code: 0, stdout: 'fine\n' });
    } finally {
      conn.end();
    }

    const conn2 = await connect(b, fleet);
    const closed = new Promise<void>((resolve) => conn2.once('close', () => resolve()));
    conn2.on('error', () => {});
    const d = await exec(conn2, 'echo kaboom');
    await closed;
    expect(d.code).toBeNull();
    expect(d.stdout).toBe('');
    expect(fleet.count(b.id, 'kaboom')).toBe(1);
    expect(fleet.commands(b.id).at(-1)?.exitCode).toBeNull();
    expect(fleet.commands(b.id)).toHaveLength(4);

    await fleet.setFaults(b.id, { latencyMs: 250 });
    const conn3 = await connect(b, fleet);
    try {
      const t0 = Date.now();
      const r = await exec(conn3, 'touch marker');
      expect(r.code).toBe(0); // faults replaced: failCommand cleared
      expect(Date.now() - t0).toBeGreaterThanOrEqual(240);
      expect(fs.existsSync(path.join(b.sandbox, 'marker'))).toBe(true);
    } finally {
      conn3.end();
    }
    await fleet.setFaults(b.id, {});
  });

  it('a client disconnect kills the running command', async () => {
    const conn = await connect(c, fleet);
    conn.on('error', () => {});
    const running = exec(conn, 'echo $$ > .running-pid; exec sleep 30', 20_000);
    const pidFile = path.join(c.sandbox, '.running-pid');
    await waitFor(() => fs.existsSync(pidFile) && fs.readFileSync(pidFile, 'utf8').trim() !== '');
    const pid = Number(fs.readFileSync(pidFile, 'utf8').trim());
    expect(alive(pid)).toBe(true);
    conn.end();
    await running;
    await waitFor(() => !alive(pid));
    await waitFor(() => fleet.commands(c.id).at(-1)?.endedAt !== undefined);
    expect(fleet.commands(c.id).at(-1)?.exitCode).toBeNull();
  });

  it('offline refuses connections, and comes back on the same port', async () => {
    const port = c.port;
    const conn = await connect(c, fleet);
    const dropped = new Promise<void>((resolve) => conn.once('close', () => resolve()));
    conn.on('error', () => {});
    await fleet.setFaults(c.id, { offline: true });
    await dropped; // open connections are torn down
    expect(fleet.connections(c.id)).toBe(0);
    await expect(connect(c, fleet)).rejects.toMatchObject({ code: 'ECONNREFUSED' });
    await fleet.setFaults(c.id, {});
    expect(c.port).toBe(port);
    const again = await connect(c, fleet);
    try {
      expect((await exec(again, 'echo back')).stdout).toBe('back\n');
    } finally {
      again.end();
    }
  });

  it('unhealthyRuntimes and errorRate are visible through the sim commands', async () => {
    const conn = await connect(a, fleet);
    try {
      expect((await exec(conn, 'sim-runtime-health nginx')).code).toBe(0);
      expect((await exec(conn, 'sim-error-rate')).stdout.trim()).toBe('0');

      await fleet.setFaults(a.id, { unhealthyRuntimes: ['nginx'], errorRate: 0.25 });
      const h = await exec(conn, 'sim-runtime-health nginx');
      expect(h.code).toBe(1);
      expect((await exec(conn, 'sim-runtime-health redis')).code).toBe(0);
      expect((await exec(conn, 'sim-error-rate')).stdout.trim()).toBe('0.25');
      expect(fs.readFileSync(path.join(a.sandbox, '.sim', 'unhealthy'), 'utf8')).toBe('nginx\n');

      await fleet.setFaults(a.id, { errorRateHangs: true });
      const hung = await exec(conn, 'sim-error-rate', 400);
      expect(hung.timedOut).toBe(true);
      await waitFor(() => fleet.commands(a.id).at(-1)?.endedAt !== undefined);
      expect(fleet.commands(a.id).at(-1)).toMatchObject({ command: 'sim-error-rate', exitCode: null });
      expect((await exec(conn, 'sim-runtime-health nginx')).code).toBe(0);
      await fleet.setFaults(a.id, {});
      expect((await exec(conn, 'sim-error-rate')).stdout.trim()).toBe('0');
    } finally {
      conn.end();
    }
  });

  it('rejects a wrong client key, a wrong user, and passwords', async () => {
    const other = generateEd25519().private;
    await expect(connect(a, fleet, { privateKey: other })).rejects.toMatchObject({ level: 'client-authentication' });
    await expect(connect(a, fleet, { username: 'root' })).rejects.toMatchObject({ level: 'client-authentication' });
    await expect(connect(a, fleet, { privateKey: undefined, password: 'wavegate' })).rejects.toMatchObject({
      level: 'client-authentication',
    });
  });

  it('host key fingerprint matches what the client sees; rotateHostKey changes it', async () => {
    let seen = '';
    const conn = await connect(a, fleet, {
      hostVerifier: (key: Buffer) => {
        seen = fingerprint(key);
        return true;
      },
    });
    conn.end();
    expect(seen).toBe(a.hostKeyFingerprint);
    expect(fingerprint(Buffer.from(a.hostPublicKey.split(' ')[1], 'base64'))).toBe(a.hostKeyFingerprint);

    const pinned = a.hostKeyFingerprint;
    fleet.rotateHostKey(a.id);
    expect(fleet.device(a.id).hostKeyFingerprint).not.toBe(pinned);
    // a client that pinned the old key refuses the device now
    await expect(connect(a, fleet, { hostVerifier: (key: Buffer) => fingerprint(key) === pinned })).rejects.toThrow();
    const fresh = await connect(a, fleet); // verifies against the new fingerprint
    fresh.end();
  });

  it('SFTP is rooted at the sandbox; uploads land there and are counted separately', async () => {
    fleet.resetCounters();
    const conn = await connect(b, fleet);
    try {
      const sftp = await new Promise<import('ssh2').SFTPWrapper>((res, rej) =>
        conn.sftp((e, s) => (e ? rej(e) : res(s))),
      );
      const call = <T>(fn: (cb: (err: Error | null | undefined, v?: T) => void) => void): Promise<T> =>
        new Promise<T>((res, rej) => fn((err, v) => (err ? rej(err) : res(v as T))));

      expect(await call<string>((cb) => sftp.realpath('.', cb))).toBe('/');
      await call((cb) => sftp.mkdir('/profiles', cb));
      const body = 'revision: 7\nchecksum: abc\n';
      await call((cb) => sftp.writeFile('/profiles/rev-7.yaml', body, cb));
      expect(fs.readFileSync(path.join(b.sandbox, 'profiles', 'rev-7.yaml'), 'utf8')).toBe(body);
      await call((cb) => sftp.writeFile('../../../escape.txt', 'x', cb));
      expect(fs.readFileSync(path.join(b.sandbox, 'escape.txt'), 'utf8')).toBe('x');
      // real sandbox paths are accepted too
      await call((cb) => sftp.writeFile(path.join(b.sandbox, 'abs.txt'), 'y', cb));
      expect(fs.readFileSync(path.join(b.sandbox, 'abs.txt'), 'utf8')).toBe('y');

      await call((cb) => sftp.chmod('/profiles/rev-7.yaml', 0o600, cb));
      expect(fs.statSync(path.join(b.sandbox, 'profiles', 'rev-7.yaml')).mode & 0o777).toBe(0o600);
      const st = await call<import('ssh2').Stats>((cb) => sftp.stat('/profiles/rev-7.yaml', cb));
      expect(st.size).toBe(Buffer.byteLength(body));
      const list = await call<import('ssh2').FileEntry[]>((cb) => sftp.readdir('/profiles', cb));
      expect(list.map((x) => x.filename)).toEqual(['rev-7.yaml']);
      expect((await call<Buffer>((cb) => sftp.readFile('/profiles/rev-7.yaml', cb))).toString()).toBe(body);
      await call((cb) => sftp.rename('/escape.txt', '/moved.txt', cb));
      await call((cb) => sftp.unlink('/moved.txt', cb));
      await expect(call((cb) => sftp.stat('/moved.txt', cb))).rejects.toMatchObject({ code: 2 });

      expect(fleet.sftpWrites(b.id)).toBe(Buffer.byteLength(body) + 2);
      expect(fleet.commands(b.id)).toHaveLength(0);
      // and exec sees the uploaded file
      expect((await exec(conn, 'cat profiles/rev-7.yaml')).stdout).toBe(body);
    } finally {
      conn.end();
    }
  });

  it('rejects pty/shell requests', async () => {
    const conn = await connect(c, fleet);
    try {
      await expect(new Promise((res, rej) => conn.shell((err, s) => (err ? rej(err) : res(s))))).rejects.toThrow();
    } finally {
      conn.end();
    }
  });

  it('stop() closes every port and kills running commands; idempotent', async () => {
    const conn = await connect(c, fleet);
    conn.on('error', () => {});
    const running = exec(conn, 'echo $$ > .pid; exec sleep 30', 20_000);
    const pidFile = path.join(c.sandbox, '.pid');
    await waitFor(() => fs.existsSync(pidFile) && fs.readFileSync(pidFile, 'utf8').trim() !== '');
    const pid = Number(fs.readFileSync(pidFile, 'utf8').trim());
    expect(alive(pid)).toBe(true);

    await Promise.all([fleet.stop(), fleet.stop()]);
    await fleet.stop();
    const r = await running;
    expect(r.code).toBeNull();
    await waitFor(() => !alive(pid));
    for (const d of fleet.devices) expect(await probe(d.port)).toBe('ECONNREFUSED');
  });
});
