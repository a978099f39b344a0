/**
 * CLI start-up: `wavegate --help`, `wavegate plan` and `wavegate start --wait` (a 1-device simulated
 * fleet), as ratios to `node -e 0`, for a "before" checkout (run from source through tsx, as it was) and
 * this checkout from source (tsx, the development flow) and compiled (dist/, what the installed package
 * runs), in one run, the variants interleaved so that they share the machine's noise.
 *
 *   npm run build                      # dist/ for the compiled variant
 *   git worktree add /tmp/wg-before <commit> && ln -s $PWD/node_modules /tmp/wg-before/node_modules
 *   npx tsx bench/cli-startup.ts --before-root /tmp/wg-before [--runs 5]
 *
 * Reported per command and variant: the median wall time, the median CPU (user + system of the process
 * and its children, from /usr/bin/time), and both as multiples of `node -e 0`'s.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { startDevServer, type DevServer } from '../workers/dev-server';
import { freePort } from '../sim/ports';
import { PROJECT_ROOT } from '../intake/package-layout';
import { demoDevices, startFleet, writeFleetInventory, type Fleet } from '../sim';
import { wholeFlag } from './flags';

const { values: flags } = parseArgs({
  options: {
    'before-root': { type: 'string' },
    runs: { type: 'string', default: '5' },
  },
});
const RUNS = wholeFlag('runs', flags.runs, 1, 50);
if (!flags['before-root'])
  throw new Error(
    '--before-root DIR: a checkout of the commit to compare with (see the header of bench/cli-startup.ts)',
  );
const BEFORE_ROOT = resolve(flags['before-root']);
if (!existsSync(join(BEFORE_ROOT, 'bin', 'wavegate.js')))
  throw new Error(`--before-root ${BEFORE_ROOT}: no bin/wavegate.js there`);
if (!existsSync(join(PROJECT_ROOT, 'dist', 'build-info.json')))
  throw new Error(`${PROJECT_ROOT}/dist is not built: run \`npm run build\` first`);
const TIME = existsSync('/usr/bin/time') ? '/usr/bin/time' : undefined;

interface Variant {
  name: string;
  root: string;
  env: NodeJS.ProcessEnv;
}
const VARIANTS: Variant[] = [
  { name: 'before (tsx)', root: BEFORE_ROOT, env: {} },
  { name: 'after (tsx, checkout)', root: PROJECT_ROOT, env: {} },
  { name: 'after (dist, installed)', root: PROJECT_ROOT, env: { WAVEGATE_RUN_FROM: 'dist' } },
];

interface Sample {
  wallMs: number;
  cpuMs: number;
}

/**
 * One process to completion: its wall time, and its CPU with its children's (`/usr/bin/time`). Async:
 * the simulated fleet answers SSH from this process, so its event loop must keep running meanwhile.
 */
function measure(argv: string[], env: NodeJS.ProcessEnv, cwd: string, expectCode = 0): Promise<Sample> {
  const marker = '@@cpu';
  const command = TIME ? [TIME, '-f', `${marker} %U %S`, ...argv] : argv;
  const started = process.hrtime.bigint();
  return new Promise((resolveSample, reject) => {
    const child = spawn(command[0]!, command.slice(1), {
      cwd,
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), 120_000);
    child.once('exit', (code) => {
      clearTimeout(timer);
      const wallMs = Number(process.hrtime.bigint() - started) / 1e6;
      if (code !== expectCode) return reject(new Error(`${argv.join(' ')} exited ${code}:\n${stdout}\n${stderr}`));
      const cpu = new RegExp(`${marker} ([\\d.]+) ([\\d.]+)`).exec(stderr);
      resolveSample({ wallMs, cpuMs: cpu ? (Number(cpu[1]) + Number(cpu[2])) * 1000 : NaN });
    });
  });
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

/** Start a long-running CLI process and wait for its line. */
function startUntil(argv: string[], ready: RegExp, env: NodeJS.ProcessEnv): Promise<ChildProcess> {
  return new Promise((resolveReady, reject) => {
    const child = spawn(argv[0]!, argv.slice(1), {
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    const timer = setTimeout(() => reject(new Error(`${argv.join(' ')}: not ready in 120 s:\n${out}`)), 120_000);
    const onData = (c: Buffer) => {
      out += c.toString();
      if (ready.test(out)) {
        clearTimeout(timer);
        resolveReady(child);
      }
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    child.once('exit', (code) => reject(new Error(`${argv.join(' ')} exited ${code}:\n${out}`)));
  });
}

/** Per root: a dev server, that root's worker, the demo revisions registered; the stack `start --wait` runs on. */
interface Stack {
  server: DevServer;
  worker: ChildProcess;
  address: string;
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'wavegate-cli-startup-'));
  const stacks = new Map<string, Stack>();
  let fleet: Fleet | undefined;
  try {
    fleet = await startFleet({ devices: demoDevices(1), dir: join(dir, 'fleet') });
    const inventory = writeFleetInventory(fleet, join(dir, 'inventory.yaml'), { budgets: { 'pool-a': 1 } });
    const spec = join(dir, 'spec.yaml');
    writeFileSync(
      spec,
      'rollout:\n  profile: demo\n  fromRevision: 1\n  toRevision: 2\n  phases:\n    - canary: 1 device\n  gate: 0s\n  disruptionBudget:\n    pool-a: 1\n',
    );
    const connection = { TEMPORAL_ADDRESS: '', TEMPORAL_PROFILE: '', TEMPORAL_CONFIG_FILE: join(dir, 'none.toml') };

    // A dev server and worker per distinct root: the before and after code each run their own workflows.
    for (const root of new Set(VARIANTS.map((v) => v.root))) {
      const name = root === BEFORE_ROOT ? 'before' : 'after';
      const server = await startDevServer({
        dbFile: join(dir, name, 'temporal.db'),
        logFile: join(dir, `${name}-temporal.log`),
        port: await freePort(),
        uiPort: await freePort(),
      });
      const bin = join(root, 'bin', 'wavegate.js');
      const common = ['--address', server.address, '--task-queue', 'cli-startup'];
      const worker = await startUntil(
        [
          process.execPath,
          bin,
          'worker',
          ...common,
          '--profiles',
          join(root, 'profiles'),
          '--audit-dir',
          join(dir, name, 'audit'),
        ],
        /polling/,
        connection,
      );
      for (const n of [1, 2])
        await measure(
          [
            process.execPath,
            bin,
            'register',
            join(root, 'profiles', 'demo', 'envelopes', `${n}.json`),
            '--trust',
            join(root, 'profiles', 'demo', 'trust.yaml'),
            ...common,
          ],
          connection,
          dir,
        );
      stacks.set(root, { server, worker, address: server.address });
    }

    const commands: Array<{ name: string; argv: (v: Variant) => string[] }> = [
      { name: '--help', argv: () => ['--help'] },
      {
        name: 'plan',
        argv: () => [
          'plan',
          '-f',
          join(PROJECT_ROOT, 'examples', 'plan', 'phased.yaml'),
          '--inventory',
          join(PROJECT_ROOT, 'examples', 'plan', 'fleet-20.yaml'),
        ],
      },
      {
        name: 'start --wait (1 device)',
        argv: (v) => [
          'start',
          '-f',
          spec,
          '--inventory',
          inventory,
          '--profiles',
          join(v.root, 'profiles'),
          '--address',
          stacks.get(v.root)!.address,
          '--task-queue',
          'cli-startup',
          '--wait',
        ],
      },
    ];
    const samples = new Map<string, Sample[]>();
    const add = (key: string, s: Sample) => samples.set(key, [...(samples.get(key) ?? []), s]);
    const loads: number[] = [];
    for (let run = 0; run < RUNS; run++) {
      loads.push(loadavg()[0]!);
      add('node -e 0', await measure([process.execPath, '-e', '0'], {}, dir));
      for (const command of commands) {
        for (const v of VARIANTS)
          add(
            `${command.name}|${v.name}`,
            await measure(
              [process.execPath, join(v.root, 'bin', 'wavegate.js'), ...command.argv(v)],
              { ...connection, ...v.env },
              dir,
            ),
          );
      }
    }

    const base = samples.get('node -e 0')!;
    const baseWall = median(base.map((s) => s.wallMs));
    const baseCpu = median(base.map((s) => s.cpuMs));
    const row = (label: string, s: Sample[]) => {
      const wall = median(s.map((x) => x.wallMs));
      const cpu = median(s.map((x) => x.cpuMs));
      return `| ${label} | ${wall.toFixed(0)} ms | ${(wall / baseWall).toFixed(1)}x | ${cpu.toFixed(0)} ms | ${(cpu / baseCpu).toFixed(1)}x |`;
    };
    console.log(
      `\n${RUNS} runs each, medians; load average ${Math.min(...loads).toFixed(1)}-${Math.max(...loads).toFixed(1)}; before = ${BEFORE_ROOT}\n`,
    );
    console.log('| command | wall | × node -e 0 | CPU (user+sys) | × node -e 0 |');
    console.log('|---|---|---|---|---|');
    console.log(row('node -e 0', base));
    for (const command of commands)
      for (const v of VARIANTS)
        console.log(row(`\`${command.name}\` ${v.name}`, samples.get(`${command.name}|${v.name}`)!));
  } finally {
    for (const stack of stacks.values()) {
      stack.worker.kill('SIGTERM');
      await stack.server.stop();
    }
    await fleet?.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

main().then(
  () => process.exit(0),
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
