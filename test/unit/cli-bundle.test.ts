import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { BUNDLE_FILE, BUNDLE_STAMP, CODE_CACHE_ENV } from '../../cli/group-bundle';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { WAVEGATE_BIN } from '../support/cli';

/**
 * The compiled CLI loads its command groups from the build's one-file bundle (scripts/bundle-cli.ts,
 * cli/group-bundle.ts), which test/support/global-setup.ts makes with dist/: the same command as from the
 * sources, without loading the group's files or the Temporal client's, and with a code cache that V8 accepts.
 */
const scratch = mkdtempSync(join(tmpdir(), 'wavegate-cli-bundle-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

function run(args: string[], env: NodeJS.ProcessEnv) {
  const record = join(scratch, `modules-${process.hrtime.bigint()}.json`);
  const hook = join(scratch, 'record-modules.js');
  writeFileSync(
    hook,
    `process.on('exit', () => require('node:fs').writeFileSync(${JSON.stringify(record)}, JSON.stringify(Object.keys(require.cache))));\n`,
  );
  const { [CODE_CACHE_ENV]: _, ...inherited } = process.env;
  const result = spawnSync(process.execPath, ['--require', hook, WAVEGATE_BIN, ...args], {
    cwd: PROJECT_ROOT,
    encoding: 'utf8',
    timeout: 120_000,
    env: { ...inherited, ...env },
  });
  return { ...result, modules: JSON.parse(readFileSync(record, 'utf8')) as string[] };
}

/** The bundle's stamp now ('' while there is none). */
function stampNow(): string {
  try {
    const bundle = readFileSync(join(PROJECT_ROOT, BUNDLE_FILE), 'utf8');
    return bundle.slice(BUNDLE_STAMP.length, bundle.indexOf('\n'));
  } catch {
    return '';
  }
}

/**
 * `runs` with one bundle throughout: another test run in the same checkout may swap a new dist/ in meanwhile
 * (test/support/compiled-build.ts), which has no bundle until its set-up makes one. Then they run again, on
 * the new one (CI runs one test run at a time: there they run once).
 */
function withOneBundle<T>(runs: () => T): { result: T; stamp: string } {
  for (let attempt = 1; ; attempt++) {
    const before = stampNow();
    const result = runs();
    if ((before !== '' && stampNow() === before) || attempt === 5) return { result, stamp: before };
  }
}

describe('the compiled CLI and its bundle of command groups', () => {
  it('runs from the build made for the tests, which has the bundle', () => {
    expect(process.env.WAVEGATE_RUN_FROM, 'test/support/global-setup.ts built dist/').toBe('dist');
    expect(readFileSync(join(PROJECT_ROOT, BUNDLE_FILE), 'utf8').startsWith(BUNDLE_STAMP)).toBe(true);
  });

  it('a command answers as from the sources, loading neither its group files nor the Temporal client one by one', () => {
    const { result: bundled } = withOneBundle(() => run(['status', '--help'], { WAVEGATE_RUN_FROM: 'dist' }));
    const source = run(['status', '--help'], { WAVEGATE_RUN_FROM: '' });
    expect(bundled.status, bundled.stderr).toBe(0);
    expect(bundled.stdout).toBe(source.stdout);
    expect(bundled.modules.filter((m) => m.includes('/dist/cli/commands/'))).toEqual([]);
    expect(bundled.modules.filter((m) => /node_modules\/@temporalio\//.test(m))).toEqual([]);
    // The sources still load the group's own module.
    expect(source.modules.some((m) => m.endsWith('/cli/commands/rollout.ts'))).toBe(true);
    // A usage error is still exit 2 (main.ts and the bundle share commander's one copy).
    const usage = run(['status'], { WAVEGATE_RUN_FROM: 'dist' });
    expect(usage.status).toBe(2);
    expect(usage.stderr).toMatch(/missing required argument 'id'/);
  });

  it('with $WAVEGATE_CODE_CACHE the first process writes the code cache of its group, and the next one uses it as it is', () => {
    let attempt = 0;
    const { result, stamp } = withOneBundle(() => {
      const dir = join(scratch, `code-cache-${++attempt}`);
      const first = run(['status', '--help'], { WAVEGATE_RUN_FROM: 'dist', [CODE_CACHE_ENV]: dir });
      const files = existsSync(dir) ? readdirSync(dir) : [];
      const written = files.map((f) => statSync(join(dir, f)));
      const second = run(['status', '--help'], { WAVEGATE_RUN_FROM: 'dist', [CODE_CACHE_ENV]: dir });
      return { dir, first, files, written, second };
    });
    const { dir, first, files, written, second } = result;
    expect(first.status, first.stderr).toBe(0);
    const name = `groups-${stamp.slice(0, 32)}-rollout-v8-${process.versions.v8}.cache`;
    expect(files).toEqual([name]);
    expect(second.status, second.stderr).toBe(0);
    expect(second.stdout).toBe(first.stdout);
    // Rewritten only when missing or refused by V8: the same file means V8 took it.
    const after = statSync(join(dir, name));
    expect([after.ino, after.mtimeMs, after.size]).toEqual([written[0]!.ino, written[0]!.mtimeMs, written[0]!.size]);
  });
});
