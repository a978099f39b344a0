import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BUNDLE_FILE, CODE_CACHE_ENV } from '../../cli/group-bundle';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { bundleCli } from '../../scripts/bundle-cli';
import { ensureTools } from '../../workers/toolchain';
import { ensureCompiledBuild, FRESH_DIST_ENV } from './compiled-build';
import { TEST_RUN_DIR_ENV } from './run-dir';

/**
 * Before any test file: the pinned Temporal binaries; a fresh dist/ that the `wavegate` processes the tests
 * start run from, with the workflow bundle and the CLI bundle it ships (compiled-build.ts, ensureCliBundle;
 * `WAVEGATE_RUN_FROM=dist`) and a code cache for the latter (`$WAVEGATE_CODE_CACHE`, in the run's directory); and the
 * run's own directory (`$WAVEGATE_TEST_RUN_DIR`, run-dir.ts) for what the test files build once and share
 * (the bundle of the workflow sources, for the workers the test files start in their own process).
 * Variables set here reach every test process vitest forks after it, and so every process a test starts.
 * Each project of vitest.config.mts runs this setup: the first one does the work, and removes the directory at the end.
 */
export default async function setup(): Promise<(() => void) | undefined> {
  const log = (line: string) => process.stderr.write(`[global-setup] ${line}\n`);
  ensureTools(log);
  // Set by scripts/test.sh, which prepared the build once for the two vitest runs it starts.
  if (process.env[TEST_RUN_DIR_ENV]) return undefined;
  if (await prepareBuild(log)) {
    process.env.WAVEGATE_RUN_FROM = 'dist';
    process.env[FRESH_DIST_ENV] = '1';
  }
  const dir = mkdtempSync(join(tmpdir(), 'wavegate-test-run-'));
  process.env[TEST_RUN_DIR_ENV] = dir;
  // V8's code cache of the CLI bundle, for this run: each command group is compiled once, not in every process.
  process.env[CODE_CACHE_ENV] = join(dir, 'code-cache');
  return () => {
    rmSync(dir, { recursive: true, force: true });
    delete process.env[TEST_RUN_DIR_ENV];
    delete process.env[CODE_CACHE_ENV];
  };
}

/**
 * A fresh dist/ with its workflow and CLI bundles; false when it cannot be built (the processes the tests start
 * then run from the sources). Also run by test/support/run-setup.ts, before `npm test`'s two vitest runs.
 */
export async function prepareBuild(log: (line: string) => void): Promise<boolean> {
  if (!(await ensureCompiledBuild(PROJECT_ROOT, log))) return false;
  await ensureCliBundle(log);
  return true;
}

/**
 * The build's one-file bundle of the CLI's command groups (scripts/bundle-cli.ts), as `npm run build` makes
 * it: a dist/ made fresh by ensureCompiledBuild has none yet; one kept from an earlier run has its own.
 */
async function ensureCliBundle(log: (line: string) => void): Promise<void> {
  if (existsSync(join(PROJECT_ROOT, BUNDLE_FILE))) return;
  const started = Date.now();
  try {
    await bundleCli(PROJECT_ROOT);
    log(`bundled the CLI's command groups in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  } catch (err) {
    // The commands then load each group's own modules, as from a build without the bundle.
    log(`bundling the CLI's command groups failed; commands load their modules one by one: ${String(err)}`);
  }
}
