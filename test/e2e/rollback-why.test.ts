import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse, stringify } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureAuditKeyFile } from '../../audit/file';
import { startDevServer, type DevServer } from '../../workers/dev-server';
import { freePort } from '../../sim/ports';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { runCli, WAVEGATE_BIN, type CliRun } from '../support/cli';
import { scratchDir } from '../support/harness';
import { startSshdFleet, type SshdFleet } from '../support/sshd';

/**
 * Issue 48: the first hour tells the truth. `wavegate init` over three real OpenSSH hosts, a signed
 * health check that fails on one of them: the rollout rolls back, and `start --wait` (with a line per
 * phase stage while it waits), `status` and `audit` each name the failing check, the device and its
 * output, and the failure ratio. Then an apply that fails on one host: the failure gate's ratio and the
 * device's error at the pause and after the abort, and the worker logs that failure in one line.
 */
describe('why a rollout rolled back, where the operator looks, over real sshd hosts', () => {
  const scratch = scratchDir('rollback-why');
  const ids = ['dev-01', 'dev-02', 'dev-03'];
  const auditDir = join(scratch.dir, 'audit');
  let sshd: SshdFleet;
  let server: DevServer;
  let worker: ChildProcess | undefined;
  let workerOutput = '';
  let start: string[] = [];
  let rolloutId = '';

  /** The CLI against this test's dev server only; it reads the worker's trail through $WAVEGATE_AUDIT_DIR. */
  const env = (over: NodeJS.ProcessEnv = {}) => ({
    TEMPORAL_ADDRESS: server.address,
    TEMPORAL_PROFILE: '',
    TEMPORAL_CONFIG_FILE: join(scratch.dir, 'none.toml'),
    WAVEGATE_UI_URL: '',
    WAVEGATE_AUDIT_DIR: auditDir,
    ...over,
  });
  const wg = (args: string[], over: NodeJS.ProcessEnv = {}): Promise<CliRun> =>
    runCli(args, { env: env(over), timeoutMs: 180_000 });
  const ok = (run: CliRun, code = 0) =>
    expect(run.code, `${run.stdout}\n${run.stderr}\nworker:\n${workerOutput}`).toBe(code);

  function startWorker(args: string[]): Promise<void> {
    const auditKey = ensureAuditKeyFile(join(scratch.dir, 'audit.key'));
    worker = spawn(process.execPath, [WAVEGATE_BIN, ...args, '--audit-dir', auditDir, '--audit-key-file', auditKey], {
      cwd: PROJECT_ROOT,
      env: { ...process.env, ...env() },
    });
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

  beforeAll(async () => {
    [sshd, server] = await Promise.all([
      startSshdFleet({ dir: join(scratch.dir, 'sshd'), ids }),
      startDevServer({
        dbFile: join(scratch.dir, 'temporal', 'db.sqlite'),
        logFile: join(scratch.dir, 'temporal.log'),
        port: await freePort(),
        uiPort: await freePort(),
      }),
    ]);
    const profiles = join(scratch.dir, 'srv', 'profiles');
    const inventory = join(scratch.dir, 'srv', 'fleet.yaml');
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
    ok(init);
    // The change under test: revision 2 signs a health check `healthz` (exit 1 with what it found on an
    // unhealthy host), and the bulk phase's health gate selects it.
    const revision = join(profiles, 'motd', 'revisions', '2.yaml');
    writeFileSync(
      revision,
      `${readFileSync(revision, 'utf8').trimEnd()}\n    - name: healthz\n      command: 'if [ -f "$HOME/unhealthy" ]; then echo "upstream pool exhausted" >&2; exit 1; fi'\n` +
        // The watch after promotion's own check (issue 46 item 2): a host that degrades after its phase passed.
        `    - name: steady\n      command: 'if [ -f "$HOME/degraded" ]; then echo "p99 latency 2.4s" >&2; exit 1; fi'\n`,
    );
    const spec = join(scratch.dir, 'srv', 'motd-rollout.yaml');
    const written = parse(readFileSync(spec, 'utf8')) as { rollout: { phases: Array<Record<string, unknown>> } };
    expect(Object.keys(written.rollout.phases[1]!)).toContain('bulk');
    written.rollout.phases[1]!.healthGate = ['devices-online', 'check: healthz'];
    writeFileSync(spec, stringify(written));
    const commands = init.stdout
      .split('\n')
      .filter((l) => /^ {2}(wavegate|mkdir) /.test(l))
      .map((l) => l.trim());
    for (const command of commands) {
      const [tool, ...args] = command.split(' ');
      if (tool === 'mkdir') mkdirSync(args[args.length - 1]!, { recursive: true, mode: 0o700 });
      else if (args[0] === 'worker') await startWorker(args);
      else if (args[0] === 'start') start = args;
      else if (args[0] !== 'fleet') ok(await wg(args));
    }
    expect(start).toContain('--wait');
  }, 300_000);
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

  it('a watch after promotion that fails (onFail revert): start --wait says watching, then puts back exactly the 3 hosts it changed and exits 1 naming the check, the host and its output', async () => {
    // Runs first: it ends with every host back at r1 and nothing left behind, as the tests below expect.
    const specAt = start.indexOf('-f') + 1;
    const watchSpec = join(scratch.dir, 'srv', 'motd-watch-rollout.yaml');
    const written = parse(readFileSync(start[specAt]!, 'utf8')) as { rollout: Record<string, unknown> };
    written.rollout.watch = { for: '10s', every: '5s', healthGate: ['check: steady'], onFail: 'revert' };
    writeFileSync(watchSpec, stringify(written));
    const degraded = join(sshd.device('dev-02').home, 'degraded');
    writeFileSync(degraded, '');
    try {
      const run = await wg([...start.slice(0, specAt), watchSpec, ...start.slice(specAt + 1), '--interval', '200']);
      ok(run, 1);
      const out = run.stdout.split('\n');
      const order = [
        /^phase 2\/2 bulk remainder: passed, 2\/2 at r2/,
        /^watch: watching: 0 of 2 checks done \(every 5s for 10s, onFail revert\)$/,
        /^watch: watch failed, reverted: watch check 1 of 2 at \+5s failed: check: steady: fail — unhealthy: dev-02\/steady exit 1: "?p99 latency 2\.4s"? \(devices: dev-02\)$/,
        /^rollback: putting back the 3 devices this rollout changed$/,
        /^why: watch failed, reverted: watch check 1 of 2 at \+5s failed: check: steady: fail/,
      ].map((re) => out.findIndex((l) => re.test(l)));
      expect(order.every((i) => i >= 0) && order.every((i, k) => k === 0 || i > order[k - 1]!), run.stdout).toBe(true);
      expect(out.filter(Boolean).at(-1)).toMatch(/^rollout rolled-back: 0\/3 applied.* — exit 1$/);
      // Every host is back at r1: the marker and the content r1 installs.
      for (const id of ids)
        expect(
          readFileSync(join(sshd.device(id).home, '.wavegate', 'profiles', 'motd', 'revision'), 'utf8').trim(),
        ).toBe('1');
    } finally {
      rmSync(degraded, { force: true });
    }
  }, 300_000);

  const CHECK = /^ {2}check: healthz: fail — unhealthy: dev-02\/healthz exit 1: "?upstream pool exhausted"?$/m;

  it('start --wait prints a line per phase stage, then the failing check, the device, its output and the ratio; status and audit say the same', async () => {
    writeFileSync(join(sshd.device('dev-02').home, 'unhealthy'), '');
    expect(workerOutput).toContain(`audit store: files in ${auditDir} (--audit-dir)`);

    const run = await wg([...start, '--interval', '200']);
    ok(run, 1);
    rolloutId = /^rollout (\S+) started$/m.exec(run.stdout)![1]!;
    const out = run.stdout.split('\n');
    // Progress while it waits, in order: each phase's stages as they came, then the rollback.
    const progress = [
      /^phase 1\/2 canary 1 device: applying [01]\/1$/,
      /^phase 1\/2 canary 1 device: gate 1s \(until \d\d:\d\d:\d\d\), then its health gate$/,
      /^phase 1\/2 canary 1 device: passed, 1\/1 at r2 \(health gate pass\)$/,
      /^phase 2\/2 bulk remainder: applying [012]\/2$/,
      /^phase 2\/2 bulk remainder: failed \(health gate fail\)$/,
      /^rollback: putting back the 3 devices this rollout changed$/,
    ].map((re) => out.findIndex((l) => re.test(l)));
    expect(progress.every((i) => i > 0) && progress.every((i, k) => k === 0 || i > progress[k - 1]!), run.stdout).toBe(
      true,
    );
    // Why, from the trail the worker wrote: the check whole, the device, the ratio; then the outcome.
    expect(run.stdout).toMatch(/^why: health gate of phase 2\/2 bulk remainder: fail \(audit record #\d+, \S+\)$/m);
    expect(run.stdout).toMatch(CHECK);
    expect(run.stdout).toMatch(/^ {4}failed on: dev-02$/m);
    expect(run.stdout).toMatch(/^ {2}failure ratio 0\.0% \(0 failed of a sample of 2; 2 succeeded\)$/m);
    expect(out.filter(Boolean).at(-1)).toMatch(/^rollout rolled-back: .* — exit 1$/);

    const status = await wg(['status', rolloutId, '--audit-dir', auditDir], { WAVEGATE_AUDIT_DIR: '' });
    ok(status, 1);
    expect(status.stdout).toMatch(
      /^ {2}why: health gate of phase 2\/2 bulk remainder: fail \(audit record #\d+, \S+\)$/m,
    );
    expect(status.stdout).toMatch(
      /^ {4}check: healthz: fail — unhealthy: dev-02\/healthz exit 1: "?upstream pool exhausted"?$/m,
    );
    expect(status.stdout).toMatch(/^ {6}failed on: dev-02$/m);
    expect(status.stdout).toMatch(/^ {4}failure ratio 0\.0% \(0 failed of a sample of 2; 2 succeeded\)$/m);
    // Without the trail the status alone still names the check, the device and its output, and says where the rest is.
    const blind = await wg(['status', rolloutId], { WAVEGATE_AUDIT_DIR: join(scratch.dir, 'elsewhere') });
    ok(blind, 1);
    expect(blind.stdout).toMatch(/^ {2}why: health gate of phase 2\/2 bulk remainder: fail$/m);
    expect(blind.stdout).toMatch(
      /^ {4}check: healthz: fail — unhealthy: dev-02\/healthz exit 1: "?upstream pool exhausted"?$/m,
    );
    expect(blind.stdout).toMatch(/not read here: .*`wavegate audit rollout:motd:\S+` with the worker's --audit-dir/);

    const audit = await wg(['audit', rolloutId, '--audit-dir', auditDir]);
    ok(audit);
    expect(audit.stdout).toMatch(/^why: health gate of phase bulk remainder: fail \(audit record #\d+, \S+\)$/m);
    expect(audit.stdout).toMatch(CHECK);
    expect(audit.stdout).toMatch(/^ {4}failed on: dev-02$/m);
    expect(audit.stdout).toMatch(/^ {2}failure ratio 0\.0% \(0 failed of a sample of 2; 2 succeeded\)$/m);
    // The rollback's reason in the table, whole: its row and the lines under its REASON column.
    const lines = audit.stdout.split('\n');
    const header = lines.findIndex((l) => l.startsWith('SEQ '));
    const [reasonAt, countsAt] = [lines[header]!.indexOf('REASON'), lines[header]!.indexOf('COUNTS')];
    const row = lines.findIndex((l) => /^\d+\s+\S+\s+rollback\.started\s/.test(l));
    const reason = [lines[row]!.slice(reasonAt, countsAt)];
    for (let i = row + 1; lines[i]?.startsWith(' '.repeat(reasonAt)); i++) reason.push(lines[i]!.slice(reasonAt));
    expect(reason.map((r) => r.trim()).join(' ')).toMatch(
      /^healthGate-fail: devices-online: pass — 3\/3 devices online; check: healthz: fail — unhealthy: dev-02\/healthz exit 1: "?upstream pool exhausted"?$/,
    );
  }, 300_000);

  it('an apply that fails on one host: the failure gate, its ratio and the error at the pause and after the abort; the worker logs it in one line', async () => {
    rmSync(join(sshd.device('dev-02').home, 'unhealthy'));
    // dev-03's motd.txt is a directory: its apply runs, and its verify fails reading it.
    const motd = join(sshd.device('dev-03').home, 'etc', 'motd.txt');
    rmSync(motd, { recursive: true, force: true });
    mkdirSync(motd, { recursive: true });

    const run = await wg([...start, '--interval', '200', '--exit-on-pause']);
    ok(run, 1);
    const id = /^rollout (\S+) started$/m.exec(run.stdout)![1]!;
    const phase = '(canary 1 device|bulk remainder)';
    const ratio = String.raw`failure ratio (100\.0% \(1 failed of a sample of 1; 0|50\.0% \(1 failed of a sample of 2; 1) succeeded\)`;
    const error = String.raw`dev-03 failed: dev-03: \S+ exited \d+: .*Is a directory`;
    expect(run.stdout).toMatch(
      new RegExp(`^paused: failure-gate: 1 of \\d devices failed in ${phase} \\(max ratio 0\\.05\\)`, 'm'),
    );
    // At the pause the trail may not hold the gate's record yet: the status says the gate, its ratio and the error.
    expect(run.stdout).toMatch(new RegExp(`^why: failure gate of phase [12]/2 ${phase}: fail`, 'm'));
    expect(run.stdout).toMatch(new RegExp(`^ {2}${ratio}$`, 'm'));
    expect(run.stdout).toMatch(new RegExp(`^ {2}${error}`, 'm'));

    ok(await wg(['abort', id, '--no-rollback', '--reason', 'seen enough']));
    const watched = await wg(['watch', id, '--interval', '200']);
    ok(watched, 1);
    // Closed, its trail is whole: the gate's record, its ratio and sample, the device's error.
    expect(watched.stdout).toMatch(
      new RegExp(`^why: failure gate of phase [12]/2 ${phase}: fail \\(audit record #\\d+, \\S+\\)$`, 'm'),
    );
    expect(watched.stdout).toMatch(new RegExp(`^ {2}${ratio}$`, 'm'));
    expect(watched.stdout).toMatch(new RegExp(`^ {2}${error}`, 'm'));
    expect(watched.stdout).toMatch(/^why: last control: abort by \S+ \("seen enough"\), accepted$/m);

    // One readable line for the device's failure: the SDK does not log it again as a WARN with the whole object.
    const failures = workerOutput.split('\n').filter((l) => /dev-03: \S+ exited \d+/.test(l));
    expect(failures, workerOutput).toHaveLength(1);
    expect(failures[0]).toMatch(/^apply r2 -> dev-03 failed: dev-03: \S+ exited \d+: /);
    expect(workerOutput).not.toContain('Activity failed');
  }, 300_000);
});
