/**
 * Part of `npm run build`, after tsc (and of the tests' build, test/support/global-setup.ts): the command
 * groups of the compiled CLI as one file, dist/cli/groups.bundle.js (esbuild), which cli/main.ts loads
 * instead of dist/cli/commands/<group>.js (cli/group-bundle.ts).
 *
 * Why: a command that talks to Temporal loaded about 620 modules (our compiled files, the Temporal client,
 * its protobufs, gRPC, zod, yaml), 0.45 s of CPU before it did anything, most of it finding, reading and
 * compiling files one by one; every test starts hundreds of such processes. From one file it is about a
 * quarter less, and with V8's code cache for that file (cli/group-bundle.ts) about 45% less.
 *
 * What stays outside, loaded from node_modules as before: packages with native parts or files of their own
 * (ssh2, pg, the worker SDK, playwright), commander (cli/main.ts and the groups must share one copy: main
 * tells a usage error by `instanceof CommanderError`), and the groups that run a Temporal worker (dev) or
 * need nothing heavy (tools). The worker SDK loads @temporalio/common and the client from node_modules: a
 * second copy of them beside the bundle's would split their classes, so no bundled group may reach it
 * (checked below).
 */
import { createHash } from 'node:crypto';
import { renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { GROUP_NAMES } from '../cli/main';
import { BUNDLE_FILE, BUNDLE_STAMP, UNBUNDLED_GROUPS } from '../cli/group-bundle';
import { PROJECT_ROOT } from '../intake/package-layout';

const EXTERNAL = [
  'commander',
  'ssh2',
  'cpu-features',
  'pg',
  'pg-native',
  'playwright-core',
  'webpack',
  '@temporalio/worker',
  '@temporalio/testing',
  '@temporalio/core-bridge',
  // versioning.ts reads its version through require.resolve, at run time.
  '@temporalio/workflow/package.json',
  '*.node',
];
/** What a bundled group must never load: the worker SDK brings its own copy of the Temporal client. */
const FORBIDDEN = /^@temporalio\/(worker|testing|core-bridge)(\/|$)/;

/** Writes dist/cli/groups.bundle.js from the compiled dist/ under `root`; returns its path. */
export async function bundleCli(root: string = PROJECT_ROOT): Promise<string> {
  // Loaded here: esbuild is a build tool, not something the tests' other imports or the CLI need.
  const esbuild = await import('esbuild');
  const dist = join(root, 'dist');
  const distBefore = statSync(dist).ino;
  const commands = join(dist, 'cli', 'commands');
  const groups = GROUP_NAMES.filter((g) => !UNBUNDLED_GROUPS.includes(g));
  // Each group is required only when asked for: the bundle's modules run lazily, as separate files did.
  const entry = `exports.groups = {\n${groups.map((g) => `  ${JSON.stringify(g)}: () => require(${JSON.stringify(`./${g}.js`)}),`).join('\n')}\n};\n`;
  const result = await esbuild.build({
    stdin: { contents: entry, resolveDir: commands, sourcefile: 'groups-entry.js', loader: 'js' },
    bundle: true,
    platform: 'node',
    target: 'node20',
    format: 'cjs',
    external: EXTERNAL,
    write: false,
    metafile: true,
    logLevel: 'error',
    outfile: join(root, BUNDLE_FILE),
  });
  const reaching = Object.entries(result.metafile.inputs)
    .filter(([, input]) => input.imports.some((i) => i.external && FORBIDDEN.test(i.path)))
    .map(([file]) => file);
  if (reaching.length > 0) {
    throw new Error(
      `a bundled command group reaches the Temporal worker SDK (through ${reaching.join(', ')}): add its group to UNBUNDLED_GROUPS in cli/group-bundle.ts`,
    );
  }
  const code = result.outputFiles[0]!.text;
  // The first line names the content: cli/group-bundle.ts keys its code cache by it (V8 checks only a length).
  const stamp = createHash('sha256').update(code).digest('hex');
  const file = join(root, BUNDLE_FILE);
  // Written whole, then renamed: a process starting meanwhile reads the old file or the new one.
  writeFileSync(`${file}.${process.pid}`, `${BUNDLE_STAMP}${stamp}\n${code}`);
  // Another test run may have swapped a new dist/ in meanwhile (test/support/compiled-build.ts): this bundle
  // of the old one must not land in it.
  if (statSync(dist).ino !== distBefore) {
    rmSync(`${file}.${process.pid}`, { force: true });
    throw new Error(`${dist} was replaced while it was bundled`);
  }
  renameSync(`${file}.${process.pid}`, file);
  return file;
}
