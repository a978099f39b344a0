import { createHash } from 'node:crypto';
import { existsSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
// Type-only: the SDK's worker (and webpack with it) is loaded only to bundle.
import type { WorkflowBundleWithSourceMap } from '@temporalio/worker';

/**
 * The workflow code bundled by the build (`npm run build`; the tests' compiled build), beside the compiled
 * workflows: `dist/workflow-bundle.js`. A worker started from the build loads it instead of running webpack,
 * which took 3-4 s of CPU at every `wavegate worker` and `wavegate dev` start. From the sources (a checkout
 * through tsx) the worker still bundles: nothing is built there.
 */
export const WORKFLOW_BUNDLE_FILE = 'workflow-bundle.js';

/**
 * What the bundle was made from, on its first line: every file webpack read, by its path from the bundle's
 * directory and its SHA-256, and the version of each package those files came from under node_modules (an
 * installed package finds its dependencies elsewhere than the build did). A bundle whose first line no
 * longer matches is stale, and the worker bundles as it did without one.
 */
interface BundleStamp {
  files: Record<string, string>;
  packages: Record<string, string>;
}
const STAMP_PREFIX = '// wavegate workflow bundle made from ';

/** The bundle to load for workflows entry `workflowsPath`, or undefined: none beside it, or a stale one. */
export function prebuiltWorkflowBundle(workflowsPath: string): WorkflowBundleWithSourceMap | undefined {
  const base = bundleBase(workflowsPath);
  const file = join(base, WORKFLOW_BUNDLE_FILE);
  if (!existsSync(file)) return undefined;
  const code = readFileSync(file, 'utf8');
  const firstLine = code.slice(0, code.indexOf('\n'));
  if (!firstLine.startsWith(STAMP_PREFIX)) return undefined;
  let stamp: BundleStamp;
  try {
    stamp = JSON.parse(firstLine.slice(STAMP_PREFIX.length)) as BundleStamp;
  } catch {
    return undefined;
  }
  for (const [path, digest] of Object.entries(stamp.files)) {
    const full = join(base, path);
    if (!existsSync(full) || sha256(readFileSync(full)) !== digest) return undefined;
  }
  for (const [name, version] of Object.entries(stamp.packages)) {
    if (packageVersion(base, name) !== version) return undefined;
  }
  return { code, sourceMap: '' };
}

/**
 * Bundle the workflows at `workflowsPath` (the compiled dist/workflows/index.js) into `WORKFLOW_BUNDLE_FILE`
 * beside its folder, stamped with what it was made from; written whole, then renamed, so a worker never
 * reads half of it. The same bundle the worker makes from that path (the SDK's defaults: no interceptors
 * or converters of our own).
 */
export async function writeWorkflowBundle(workflowsPath: string): Promise<string> {
  const { bundleWorkflowCode } = require('@temporalio/worker') as typeof import('@temporalio/worker');
  const base = bundleBase(workflowsPath);
  let read: string[] = [];
  const noop = () => {};
  const { code } = await bundleWorkflowCode({
    workflowsPath,
    logger: { log: noop, trace: noop, debug: noop, info: noop, warn: noop, error: (m: string) => console.error(m) },
    // Every file webpack read, as it finishes (the entry it generates in memory is not on disk: left out; so are
    // the folders it looked in).
    webpackConfigHook: (config) => ({
      ...config,
      plugins: [
        ...(config.plugins ?? []),
        {
          apply(compiler: import('webpack').Compiler) {
            compiler.hooks.done.tap('wavegate-bundle-inputs', (stats) => {
              read = [...stats.compilation.fileDependencies].filter((f) => existsSync(f) && statSync(f).isFile());
            });
          },
        },
      ],
    }),
  });
  if (read.length === 0) throw new Error(`bundling ${workflowsPath}: webpack reported no input files`);
  const stamp: BundleStamp = { files: {}, packages: {} };
  for (const path of read.sort()) {
    const pkg = packageOfFile(path);
    // The version of the copy webpack read: one that is not the copy Node finds from the bundle (a nested
    // one) never matches, and the worker bundles.
    if (pkg) stamp.packages[pkg.name] = manifestVersion(join(pkg.dir, 'package.json')) ?? 'unknown';
    else stamp.files[relative(base, path)] = sha256(readFileSync(path));
  }
  const file = join(base, WORKFLOW_BUNDLE_FILE);
  writeFileSync(`${file}.${process.pid}`, `${STAMP_PREFIX}${JSON.stringify(stamp)}\n${code}`);
  renameSync(`${file}.${process.pid}`, file);
  return file;
}

/** The folder holding the workflows' folder (dist/ for dist/workflows/index.js): where the bundle lives. */
function bundleBase(workflowsPath: string): string {
  return dirname(dirname(resolve(workflowsPath)));
}

/** The package (`@scope/name` or `name`) and its folder for a file under node_modules; undefined for one of ours. */
function packageOfFile(path: string): { name: string; dir: string } | undefined {
  const marker = `${sep}node_modules${sep}`;
  const at = path.lastIndexOf(marker);
  if (at < 0) return undefined;
  const parts = path.slice(at + marker.length).split(sep);
  const name = parts[0]!.startsWith('@') ? `${parts[0]}/${parts[1]}` : parts[0]!;
  return { name, dir: join(path.slice(0, at + marker.length), name) };
}

/** The version of package `name` as Node resolves it from `from` (the nearest node_modules up the tree). */
function packageVersion(from: string, name: string): string | undefined {
  for (let dir = from; ; dir = dirname(dir)) {
    const manifest = join(dir, 'node_modules', name, 'package.json');
    if (existsSync(manifest)) return manifestVersion(manifest);
    if (dirname(dir) === dir) return undefined;
  }
}

function manifestVersion(manifest: string): string | undefined {
  if (!existsSync(manifest)) return undefined;
  return (JSON.parse(readFileSync(manifest, 'utf8')) as { version?: string }).version;
}

function sha256(data: Buffer): string {
  return createHash('sha256').update(data).digest('hex');
}
