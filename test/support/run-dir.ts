import { existsSync, openSync, closeSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** The variable global-setup.ts sets to the run's own directory (absent outside vitest: a benchmark). */
export const TEST_RUN_DIR_ENV = 'WAVEGATE_TEST_RUN_DIR';

/**
 * A file built once per test run and read by every test file after it: the first file to ask builds it
 * (holding `<name>.lock`), the others wait for it. Outside a run (no `$WAVEGATE_TEST_RUN_DIR`), or when the
 * builder has not written it within `waitMs` (it failed, or was killed), the caller builds its own copy.
 */
export async function builtOncePerRun(name: string, build: () => Promise<string>, waitMs = 180_000): Promise<string> {
  const dir = process.env[TEST_RUN_DIR_ENV];
  if (!dir || !existsSync(dir)) return build();
  const file = join(dir, name);
  if (existsSync(file)) return readFileSync(file, 'utf8');
  let lock: number | undefined;
  try {
    lock = openSync(`${file}.lock`, 'wx');
  } catch {
    // Another test file is building it.
  }
  if (lock !== undefined) {
    closeSync(lock);
    try {
      const content = await build();
      // Written whole, then renamed: a reader never sees half a file.
      writeFileSync(`${file}.${process.pid}`, content);
      renameSync(`${file}.${process.pid}`, file);
      return content;
    } catch (err) {
      rmSync(`${file}.lock`, { force: true });
      throw err;
    }
  }
  const deadline = Date.now() + waitMs;
  while (Date.now() < deadline) {
    if (existsSync(file)) return readFileSync(file, 'utf8');
    if (!existsSync(`${file}.lock`)) break; // its builder failed: build our own
    await new Promise((r) => setTimeout(r, 200));
  }
  return build();
}
