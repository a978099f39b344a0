/**
 * The planner and `wavegate plan` at fleet scale (bench/README.md, "`plan-scale.ts`"; issue 26): for each
 * --devices count, a generated inventory (20 pools, four classes, three OSes, a tenth best-effort) and a
 * markers file (2% of the devices already at the target, 1% ahead of it; `--markers no` leaves it out), then
 *
 * - the planner alone: `planPhases` over those devices as `wavegate plan` hands them to it, in this process;
 * - `wavegate plan` of the demo rollout as a child process (`node bin/wavegate.js plan`, the tsx
 *   checkout flow): wall time and peak RSS (`/usr/bin/time`), each run reported.
 *
 * With --before-root, the same commands in a checkout of another commit, interleaved with this one's
 * so that they share the machine's noise:
 *
 *   git worktree add /tmp/wg-before <commit> && ln -s $PWD/node_modules /tmp/wg-before/node_modules
 *   npx tsx bench/plan-scale.ts --devices 1000,10000,100000 [--runs 2] [--format yaml|json] [--markers yes|no]
 *     [--before-root /tmp/wg-before]
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { stringify } from 'yaml';
import { PROJECT_ROOT } from '../intake/package-layout';
import { wholeFlag } from './flags';
import { scaleInventory } from './scale-inventory';

const { values: flags } = parseArgs({
  options: {
    devices: { type: 'string', default: '1000,10000,100000' },
    runs: { type: 'string', default: '2' },
    format: { type: 'string', default: 'yaml' },
    markers: { type: 'string', default: 'yes' },
    'before-root': { type: 'string' },
  },
});
const COUNTS = flags.devices.split(',').map((n) => wholeFlag('devices', n, 1, 100_000));
const RUNS = wholeFlag('runs', flags.runs, 1, 20);
if (flags.format !== 'yaml' && flags.format !== 'json')
  throw new Error(`--format: expected "yaml" or "json", got ${JSON.stringify(flags.format)}`);
const FORMAT = flags.format;
if (flags.markers !== 'yes' && flags.markers !== 'no')
  throw new Error(`--markers: expected "yes" or "no", got ${JSON.stringify(flags.markers)}`);
/** Whether `wavegate plan` is given the markers file (a mapping of every device id to its revision). */
const WITH_MARKERS = flags.markers === 'yes';
const TIME = '/usr/bin/time';
if (!existsSync(TIME)) throw new Error(`${TIME} is needed for the peak RSS of the child process`);

interface Variant {
  name: string;
  root: string;
}
const VARIANTS: Variant[] = [
  ...(flags['before-root'] ? [{ name: 'before', root: resolve(flags['before-root']) }] : []),
  { name: flags['before-root'] ? 'after' : 'this checkout', root: PROJECT_ROOT },
];
for (const v of VARIANTS)
  if (!existsSync(join(v.root, 'bin', 'wavegate.js'))) throw new Error(`--before-root ${v.root}: no bin/wavegate.js`);

/** Revision markers (the demo goes r1 → r2): every 50th device already at r2, every 100th ahead at r3, the rest at r1. */
function scaleMarkers(n: number): Record<string, number> {
  const markers: Record<string, number> = {};
  for (let i = 0; i < n; i++) markers[`dev-${String(i).padStart(6, '0')}`] = i % 100 === 3 ? 3 : i % 50 === 1 ? 2 : 1;
  return markers;
}

interface ChildSample {
  wallMs: number;
  maxRssMiB: number;
}

/** `wavegate plan` of the demo rollout in `root`, its output discarded: wall time and peak RSS. */
function planChild(root: string, inventory: string, markers: string | undefined): Promise<ChildSample> {
  const argv = [
    TIME,
    '-f',
    '@@rss %M',
    process.execPath,
    join(root, 'bin', 'wavegate.js'),
    'plan',
    '-f',
    join(root, 'examples', 'demo-rollout.yaml'),
    '--inventory',
    inventory,
    ...(markers ? ['--markers', markers] : []),
    '--profiles',
    join(root, 'profiles'),
  ];
  const started = process.hrtime.bigint();
  return new Promise((done, fail) => {
    const child = spawn(argv[0]!, argv.slice(1), { cwd: root, stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    child.once('error', fail);
    child.once('exit', (code) => {
      const wallMs = Number(process.hrtime.bigint() - started) / 1e6;
      const rss = /@@rss (\d+)/.exec(stderr);
      if (code !== 0 || !rss) return fail(new Error(`wavegate plan in ${root} exited ${code}: ${stderr.slice(-2000)}`));
      done({ wallMs, maxRssMiB: Number(rss[1]) / 1024 });
    });
  });
}

/** The planner alone over the devices `wavegate plan` would give it, in `root`'s sources: each of RUNS runs. */
async function plannerMs(root: string, inventoryPath: string, markers: Record<string, number>): Promise<number[]> {
  const { readSpec } = await import(join(root, 'intake', 'prepare.ts'));
  const { loadInventory } = await import(join(root, 'intake', 'inventory.ts'));
  const { planDevices } = await import(join(root, 'intake', 'planner-input.ts'));
  const { plannerInputOf } = await import(join(root, 'core', 'rollout', 'plan.ts'));
  const { poolBudgetsOf } = await import(join(root, 'intake', 'rollout-input.ts'));
  const { planPhases } = await import(join(root, 'core', 'planner.ts'));
  const spec = readSpec(join(root, 'examples', 'demo-rollout.yaml'));
  const inventory = loadInventory(inventoryPath);
  const input = plannerInputOf(
    { rolloutId: 'rollout:demo', spec, poolBudgets: poolBudgetsOf(spec, inventory), risk: 'risky' },
    planDevices(inventory.devices, new Map(Object.entries(markers))),
  );
  const times: number[] = [];
  for (let run = 0; run < RUNS; run++) {
    const started = performance.now();
    planPhases(input);
    times.push(performance.now() - started);
  }
  return times;
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'plan-scale-'));
  try {
    console.log(
      `plan-scale: ${new Date().toISOString()}, load ${loadavg()
        .map((l) => l.toFixed(2))
        .join(' ')}, format ${FORMAT}, ${WITH_MARKERS ? 'with' : 'without'} --markers, ${RUNS} run(s) each`,
    );
    for (const n of COUNTS) {
      const inventory = join(dir, `inventory-${n}.${FORMAT}`);
      const document = scaleInventory(n);
      writeFileSync(inventory, FORMAT === 'json' ? JSON.stringify(document) : stringify(document));
      const markerValues = scaleMarkers(n);
      const markers = join(dir, `markers-${n}.${FORMAT}`);
      writeFileSync(markers, FORMAT === 'json' ? JSON.stringify(markerValues) : stringify(markerValues));
      for (const v of VARIANTS) {
        const times = await plannerMs(v.root, inventory, markerValues);
        console.log(
          `${String(n).padStart(7)} devices  ${v.name.padEnd(14)} planner alone ${times.map((t) => `${t.toFixed(0)} ms`).join(', ')}`,
        );
      }
      const samples = new Map<string, ChildSample[]>(VARIANTS.map((v) => [v.name, []]));
      const loads: number[] = [];
      for (let run = 0; run < RUNS; run++)
        for (const v of VARIANTS) {
          loads.push(loadavg()[0]!);
          samples.get(v.name)!.push(await planChild(v.root, inventory, WITH_MARKERS ? markers : undefined));
        }
      for (const v of VARIANTS) {
        const runs = samples.get(v.name)!;
        console.log(
          `${String(n).padStart(7)} devices  ${v.name.padEnd(14)} wavegate plan ${runs.map((s) => `${(s.wallMs / 1000).toFixed(2)} s`).join(', ')}  peak RSS ${runs.map((s) => `${s.maxRssMiB.toFixed(0)} MiB`).join(', ')}`,
        );
      }
      console.log(
        `${String(n).padStart(7)} devices  load (1 min) during the runs: ${loads.map((l) => l.toFixed(2)).join(', ')}`,
      );
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

void main();
