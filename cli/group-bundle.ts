import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import Module, { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { constants, Script } from 'node:vm';

/**
 * The compiled CLI's command groups in one file (scripts/bundle-cli.ts writes it at build time): a group
 * loaded from it costs about a quarter less CPU than from its hundreds of separate files, and with V8's code
 * cache about 45% less (a `wavegate status` 0.46 -> 0.26 s; the tests start hundreds of such processes).
 * Only the compiled CLI uses it; from the sources, and for a group not in it, cli/main.ts loads the group's own
 * module as before.
 */

/** Where the build writes it, under the package root; beside dist/cli/main.js, so its __dirname is the same depth. */
export const BUNDLE_FILE = join('dist', 'cli', 'groups.bundle.js');
/** Its first line: this, then the SHA-256 of the rest (what the code cache is keyed by). */
export const BUNDLE_STAMP = '// wavegate command groups ';
/** Groups left out (scripts/bundle-cli.ts says why): dev runs the worker SDK, tools loads next to nothing. */
export const UNBUNDLED_GROUPS: readonly string[] = ['dev', 'tools'];
/**
 * A directory for V8's code cache of the bundle (compiled code, one file per bundle, group and V8 version,
 * written when a process that compiled it exits). Unset: no cache. The tests set it to their run's directory.
 */
export const CODE_CACHE_ENV = 'WAVEGATE_CODE_CACHE';
/** `0`: load each group's own files even from the build (to compare: scripts/cli-cpu.cjs, or a bundling problem). */
export const BUNDLE_ENV = 'WAVEGATE_CLI_BUNDLE';

type Groups = Record<string, (() => unknown) | undefined>;
let bundle: Groups | null | undefined;

/** The group's module from the bundle, or undefined (running from the sources, no bundle, a group not in it). */
export function bundledGroup(name: string, env: NodeJS.ProcessEnv = process.env): unknown {
  if (!__filename.endsWith('.js') || env[BUNDLE_ENV] === '0') return undefined;
  // One bundle per process: the first group asked for names its code cache.
  bundle ??= loadBundle(join(__dirname, 'groups.bundle.js'), name, env[CODE_CACHE_ENV]);
  return bundle?.[name]?.();
}

/** Runs the bundle as `require` would (its own module, a require beside it), with the code cache when there is one. */
function loadBundle(file: string, tag: string, cacheDir: string | undefined): Groups | null {
  let source: string;
  try {
    source = readFileSync(file, 'utf8');
  } catch {
    return null; // a build without it: the groups' own modules
  }
  const stamp = source.startsWith(BUNDLE_STAMP) ? source.slice(BUNDLE_STAMP.length, source.indexOf('\n')) : '';
  // Keyed by the content: V8 checks a cache only against the source's length.
  const cacheFile =
    cacheDir && /^[0-9a-f]{64}$/.test(stamp)
      ? join(cacheDir, `groups-${stamp.slice(0, 32)}-${tag}-v8-${process.versions.v8}.cache`)
      : undefined;
  let cachedData: Buffer | undefined;
  if (cacheFile) {
    try {
      cachedData = readFileSync(cacheFile);
    } catch {
      // none yet: this process compiles, and writes it at exit
    }
  }
  const script = new Script(Module.wrap(source), {
    filename: file,
    cachedData,
    importModuleDynamically: constants.USE_MAIN_CONTEXT_DEFAULT_LOADER,
  });
  if (cacheFile && (cachedData === undefined || script.cachedDataRejected)) {
    // At exit, so that it holds every function this command compiled, not only the top level.
    process.once('exit', () => writeCodeCache(cacheFile, script));
  }
  const mod = new Module(file, module as unknown as Module);
  mod.filename = file;
  const wrapper = script.runInThisContext() as (...args: unknown[]) => void;
  wrapper.call(mod.exports, mod.exports, createRequire(file), mod, file, dirname(file));
  mod.loaded = true;
  return (mod.exports as { groups?: Groups }).groups ?? null;
}

function writeCodeCache(file: string, script: Script): void {
  try {
    mkdirSync(dirname(file), { recursive: true });
    // Whole, then renamed: another process reads the old cache, the new one, or none.
    writeFileSync(`${file}.${process.pid}`, script.createCachedData());
    renameSync(`${file}.${process.pid}`, file);
  } catch {
    // A cache is only a speed-up: a directory we cannot write costs the next process its compile, nothing else.
  }
}
