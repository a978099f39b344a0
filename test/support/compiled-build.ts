import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { defaultBuildId, type BuildInfo } from '../../workers/versioning';
import { prebuiltWorkflowBundle, writeWorkflowBundle } from '../../workers/workflow-bundle';

/** Set by global-setup.ts once dist/ is this run's fresh build: packing it needs no `prepack` build again. */
export const FRESH_DIST_ENV = 'WAVEGATE_TEST_FRESH_DIST';

/**
 * `npm pack`'s arguments for a test: the run's fresh dist/ as it is (`--ignore-scripts`: a `prepack` would
 * remove dist/ under the processes running from it, and build the same files again); outside such a run,
 * `prepack` builds it.
 */
export function packArgs(destination: string): string[] {
  return ['pack', '--pack-destination', destination, ...(process.env[FRESH_DIST_ENV] ? ['--ignore-scripts'] : [])];
}

/**
 * The checkout's dist/, as `npm run build` makes it (tsconfig.build.json, then dist/build-info.json), made
 * fresh before a test run so the `wavegate` processes the tests start (CLI commands, workers, gateways,
 * agents) run compiled JavaScript (`WAVEGATE_RUN_FROM=dist`): through tsx each of them loaded its modules
 * from TypeScript again, 0.2-0.6 s of CPU per process, and the suite starts hundreds of them. The tests
 * themselves still import the sources.
 *
 * Kept when the sources have not changed since the last test build (a hash of every file tsconfig.build.json
 * compiles, kept under node_modules/.cache). Built there with type-checking off (`npm test` type-checks
 * first; the emitted JavaScript is the same) and swapped in by renames, so a process running from the old
 * dist/ never reads a half-written file.
 */
export async function ensureCompiledBuild(root: string, log: (line: string) => void): Promise<boolean> {
  if (!compiledDist(root, log)) return false;
  // The workflow bundle the build ships (workers/workflow-bundle.ts), made from dist/ as it now stands:
  // the `wavegate worker` and `wavegate dev` processes the tests start load it instead of running webpack.
  const workflows = join(root, 'dist', 'workflows', 'index.js');
  if (prebuiltWorkflowBundle(workflows)) return true;
  const started = Date.now();
  try {
    await writeWorkflowBundle(workflows);
    log(`bundled the workflows in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  } catch (err) {
    // The workers then bundle at start, as from the sources.
    log(`bundling the workflows failed; each worker bundles its own: ${String(err)}`);
  }
  return true;
}

function compiledDist(root: string, log: (line: string) => void): boolean {
  const dist = join(root, 'dist');
  const cache = join(root, 'node_modules', '.cache');
  // Named by the checkout's path: a second work tree sharing node_modules keeps its own.
  const stampFile = join(
    cache,
    `wavegate-test-dist-${createHash('sha256').update(root).digest('hex').slice(0, 12)}.json`,
  );
  const hash = sourcesHash(root);
  const fresh =
    existsSync(join(dist, 'cli', 'main.js')) &&
    existsSync(join(dist, 'build-info.json')) &&
    existsSync(stampFile) &&
    (JSON.parse(readFileSync(stampFile, 'utf8')) as { hash?: string }).hash === hash;
  if (fresh) return true;
  mkdirSync(cache, { recursive: true });
  const building = join(cache, `wavegate-dist-${process.pid}`);
  const old = join(cache, `wavegate-dist-old-${process.pid}`);
  rmSync(building, { recursive: true, force: true });
  const started = Date.now();
  try {
    execFileSync(
      process.execPath,
      [
        join(root, 'node_modules', 'typescript', 'bin', 'tsc'),
        '-p',
        join(root, 'tsconfig.build.json'),
        '--noCheck',
        '--outDir',
        building,
      ],
      { cwd: root, stdio: 'pipe' },
    );
  } catch (err) {
    const out = (err as { stdout?: Buffer }).stdout?.toString() ?? String(err);
    log(`the compiled build failed; the tests' wavegate processes run from source:\n${out}`);
    rmSync(building, { recursive: true, force: true });
    return false;
  }
  const info: BuildInfo = { buildId: defaultBuildId() };
  writeFileSync(join(building, 'build-info.json'), `${JSON.stringify(info, null, 2)}\n`);
  if (existsSync(dist)) renameSync(dist, old);
  try {
    renameSync(building, dist);
  } catch (err) {
    // Another run's set-up swapped its build in between our two renames: its dist/ stands.
    if (!existsSync(join(dist, 'cli', 'main.js'))) throw err;
    rmSync(building, { recursive: true, force: true });
  }
  rmSync(old, { recursive: true, force: true });
  writeFileSync(stampFile, `${JSON.stringify({ hash })}\n`);
  log(`compiled dist/ in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  return true;
}

/** A hash of what decides dist/: every file under tsconfig.build.json's folders, the two tsconfigs, TypeScript's version. */
function sourcesHash(root: string): string {
  const build = JSON.parse(readFileSync(join(root, 'tsconfig.build.json'), 'utf8')) as { include: string[] };
  const typescript = JSON.parse(readFileSync(join(root, 'node_modules', 'typescript', 'package.json'), 'utf8'));
  const hash = createHash('sha256');
  hash.update(`typescript ${(typescript as { version: string }).version}\n`);
  const files = [
    join(root, 'tsconfig.json'),
    join(root, 'tsconfig.build.json'),
    ...build.include.flatMap((dir) => filesUnder(join(root, dir))),
  ];
  for (const file of files) {
    hash.update(`${relative(root, file)}\n`);
    hash.update(readFileSync(file));
  }
  return hash.digest('hex');
}

function filesUnder(dir: string): string[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { withFileTypes: true })
    .flatMap((e) => (e.isDirectory() ? filesUnder(join(dir, e.name)) : [join(dir, e.name)]))
    .sort();
}
