import { spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { WAVEGATE_BIN } from '../support/cli';
import { scratchDir } from '../support/harness';

/**
 * Commands load only what they use (cli/main.ts): the real CLI runs with a preload that records every
 * module it loaded, and the heavy ones a command does not need must not be among them. (Module lists, not
 * timings: bench/cli-startup.ts measures the time.)
 */
const scratch = scratchDir('lazy-load');
afterAll(() => scratch.cleanup());

function modulesLoadedBy(args: string[]): string[] {
  const record = join(scratch.dir, `modules-${args[0] ?? 'none'}.json`);
  const hook = join(scratch.dir, 'record-modules.js');
  writeFileSync(
    hook,
    `process.on('exit', () => require('node:fs').writeFileSync(${JSON.stringify(record)}, JSON.stringify(Object.keys(require.cache))));\n`,
  );
  // From the sources, whatever the test run's other processes run from (test/support/compiled-build.ts): the
  // module names below are the checkout's.
  const { WAVEGATE_RUN_FROM: _, ...env } = process.env;
  const run = spawnSync(process.execPath, ['--require', hook, WAVEGATE_BIN, ...args], {
    cwd: PROJECT_ROOT,
    encoding: 'utf8',
    timeout: 120_000,
    env,
  });
  expect(run.status, run.stderr).toBe(0);
  return JSON.parse(readFileSync(record, 'utf8')) as string[];
}

const loaded = (modules: string[], pattern: RegExp) => modules.filter((m) => pattern.test(m));

describe('lazy command loading', () => {
  it('wavegate --help loads no command group', () => {
    const modules = modulesLoadedBy(['--help']);
    expect(loaded(modules, /\/cli\/commands\//)).toEqual([]);
    expect(loaded(modules, /node_modules\/(@temporalio|zod|yaml|ssh2)\//)).toEqual([]);
  });

  it('wavegate plan loads its own group only, and neither the Temporal client nor the worker SDK nor SSH', () => {
    const modules = modulesLoadedBy([
      'plan',
      '--what-if',
      '-f',
      'examples/plan/phased.yaml',
      '--inventory',
      'examples/plan/fleet-20.yaml',
    ]);
    expect(loaded(modules, /\/cli\/commands\//).map((m) => m.replace(/.*\/cli\/commands\//, ''))).toEqual(['plan.ts']);
    expect(loaded(modules, /node_modules\/(@temporalio\/(client|worker|core-bridge)|ssh2|pg)\//)).toEqual([]);
  });
});
