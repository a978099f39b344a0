import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureAuditKeyFile } from '../../audit/file';
import { startDevServer, type DevServer } from '../../workers/dev-server';
import { freePort } from '../../sim/ports';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { runCli, WAVEGATE_BIN, type CliRun } from '../support/cli';
import { scratchDir } from '../support/harness';
import { startSshdFleet, type SshdFleet } from '../support/sshd';

/**
 * The README's "Your own fleet" section, literally: `wavegate init` over real OpenSSH sshd devices with
 * host keys pinned from a known_hosts file and the profiles root in a temp dir outside the checkout,
 * then every command init prints, in the order it prints them (keygen, trust, sign, cosign, plan, a
 * real `wavegate worker --profiles`, start --wait, fleet status), each exit 0, and every device at r2.
 */
describe('your own fleet: init, then the printed commands, over real sshd devices', () => {
  const scratch = scratchDir('own-fleet');
  const ids = ['web-1', 'web-2', 'web-3'];
  let sshd: SshdFleet;
  let server: DevServer;
  let worker: ChildProcess | undefined;
  let workerOutput = '';

  /** The CLI against this test's dev server only, never the machine's TEMPORAL_* settings. */
  const env = () => ({
    TEMPORAL_ADDRESS: server.address,
    TEMPORAL_PROFILE: '',
    TEMPORAL_CONFIG_FILE: join(scratch.dir, 'none.toml'),
    WAVEGATE_UI_URL: '',
  });
  const wg = (args: string[], timeoutMs = 180_000): Promise<CliRun> => runCli(args, { env: env(), timeoutMs });

  beforeAll(async () => {
    const port = await freePort();
    [sshd, server] = await Promise.all([
      startSshdFleet({ dir: join(scratch.dir, 'sshd'), ids }),
      startDevServer({
        dbFile: join(scratch.dir, 'temporal', 'db.sqlite'),
        logFile: join(scratch.dir, 'temporal.log'),
        port,
        uiPort: await freePort(),
      }),
    ]);
  });
  afterAll(async () => {
    if (worker && worker.exitCode === null) {
      const exited = new Promise((r) => worker!.once('exit', r));
      worker.kill('SIGINT');
      await exited;
    }
    await server?.stop();
    await sshd?.stop();
    scratch.cleanup();
  });

  /** `wavegate worker ...` as printed, in the background, until it polls. */
  function startWorker(args: string[]): Promise<void> {
    const auditKey = ensureAuditKeyFile(join(scratch.dir, 'audit.key'));
    worker = spawn(
      process.execPath,
      [WAVEGATE_BIN, ...args, '--audit-dir', join(scratch.dir, 'audit'), '--audit-key-file', auditKey],
      { cwd: PROJECT_ROOT, env: { ...process.env, ...env() } },
    );
    return new Promise((ready, fail) => {
      const timer = setTimeout(() => fail(new Error(`worker not polling in 60 s:\n${workerOutput}`)), 60_000);
      const onData = (chunk: Buffer) => {
        workerOutput += chunk.toString();
        if (/polling .*task queue/.test(workerOutput)) {
          clearTimeout(timer);
          ready();
        }
      };
      worker!.stdout!.on('data', onData);
      worker!.stderr!.on('data', onData);
      worker!.once('exit', (code) => fail(new Error(`worker exited ${code} before polling:\n${workerOutput}`)));
    });
  }

  it('init pins the known_hosts keys, and its printed commands sign, plan, start --wait (exit 0) and report every device at r2', async () => {
    const profiles = join(scratch.dir, 'srv', 'wavegate', 'profiles');
    const inventory = join(scratch.dir, 'srv', 'wavegate', 'fleet.yaml');
    expect(profiles.startsWith(PROJECT_ROOT)).toBe(false);
    // The operator's known_hosts: each device's real host key, as `ssh-keyscan` would have recorded it.
    const knownHosts = join(scratch.dir, 'known_hosts');
    writeFileSync(knownHosts, sshd.devices.map((d) => `[${d.host}]:${d.port} ${d.hostPublicKey}\n`).join(''));

    const init = await wg([
      'init',
      '--profiles',
      profiles,
      '--profile',
      'motd',
      '--inventory',
      inventory,
      ...sshd.devices.flatMap((d) => ['--host', `${d.id}=${d.user}@${d.host}:${d.port}`]),
      '--known-hosts',
      knownHosts,
      '--ssh-key',
      sshd.clientKeyPath,
      '--keys-dir',
      join(scratch.dir, 'keys'),
      '--gate',
      '1s',
    ]);
    expect(init.code, init.stderr).toBe(0);
    for (const d of sshd.devices) expect(readFileSync(inventory, 'utf8')).toContain(`hostKey: ${d.hostKeyFingerprint}`);
    const commands = init.stdout
      .split('\n')
      .filter((l) => /^ {2}(wavegate|mkdir) /.test(l))
      .map((l) => l.trim());
    expect(commands.map((c) => c.split(' ').slice(0, 2).join(' '))).toEqual([
      'mkdir -p',
      'wavegate keygen',
      'wavegate keygen',
      'wavegate trust',
      'wavegate sign',
      'wavegate cosign',
      'wavegate sign',
      'wavegate cosign',
      'wavegate plan',
      'wavegate worker',
      'wavegate start',
      'wavegate fleet',
    ]);

    for (const command of commands) {
      expect(command, 'paths without shell quoting in this test').not.toMatch(/['"]/);
      const [tool, ...args] = command.split(' ');
      if (tool === 'mkdir') {
        mkdirSync(args[args.length - 1]!, { recursive: true, mode: 0o700 });
        continue;
      }
      if (args[0] === 'worker') {
        await startWorker(args);
        continue;
      }
      const run = await wg(args);
      expect(run.code, `${command}\n${run.stdout}\n${run.stderr}\nworker:\n${workerOutput}`).toBe(0);
      if (args[0] === 'start') expect(run.stdout).toMatch(/completed/);
      if (args[0] === 'fleet') expect(run.stdout).toMatch(/applied +3/);
    }

    for (const d of sshd.devices) {
      expect(readFileSync(join(d.home, 'etc', 'motd.txt'), 'utf8'), d.id).toBe('motd revision 2\n');
      expect(readFileSync(join(d.home, '.wavegate', 'profiles', 'motd', 'revision'), 'utf8').trim(), d.id).toBe('2');
    }
    // Nothing of it landed in the checkout: the worker read pins and payload from the profiles root.
    expect(existsSync(join(PROJECT_ROOT, 'profiles', 'motd'))).toBe(false);
  }, 600_000);
});
