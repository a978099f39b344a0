import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { ensureTools } from '../../workers/toolchain';
import { ensureCompiledBuild, FRESH_DIST_ENV } from './compiled-build';
import { TEST_RUN_DIR_ENV } from './run-dir';

/**
 * Before any test file: the pinned Temporal binaries; a fresh dist/ that the `wavegate` processes the tests
 * start run from, with the workflow bundle it ships (compiled-build.ts; `WAVEGATE_RUN_FROM=dist`); and the
 * run's own directory (`$WAVEGATE_TEST_RUN_DIR`, run-dir.ts) for what the test files build once and share
 * (the bundle of the workflow sources, for the workers the test files start in their own process).
 * Variables set here reach every test process vitest forks after it, and so every process a test starts.
 * Each project of vitest.config.mts runs this setup: the first one does the work, and removes the directory at the end.
 */
export default async function setup(): Promise<(() => void) | undefined> {
  const log = (line: string) => process.stderr.write(`[global-setup] ${line}\n`);
  ensureTools(log);
  if (process.env[TEST_RUN_DIR_ENV]) return undefined;
  if (await ensureCompiledBuild(PROJECT_ROOT, log)) {
    process.env.WAVEGATE_RUN_FROM = 'dist';
    process.env[FRESH_DIST_ENV] = '1';
  }
  const dir = mkdtempSync(join(tmpdir(), 'wavegate-test-run-'));
  process.env[TEST_RUN_DIR_ENV] = dir;
  return () => {
    rmSync(dir, { recursive: true, force: true });
    delete process.env[TEST_RUN_DIR_ENV];
  };
}
