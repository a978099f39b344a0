/**
 * Part of `npm run build`, after tsc: records in dist/build-info.json what the installed package cannot
 * compute itself (it ships no TypeScript sources): the worker build id derived from this checkout's
 * workflow, contract and core sources (workers/versioning.ts). Its presence also marks dist/ as complete.
 * Then bundles the compiled workflows into dist/workflow-bundle.js (workers/workflow-bundle.ts): a worker
 * run from the build loads it instead of running webpack at every start; and the CLI's command groups into
 * dist/cli/groups.bundle.js (scripts/bundle-cli.ts): a command loads one file instead of hundreds.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { PROJECT_ROOT } from '../intake/package-layout';
import { BUILD_INFO_FILE, defaultBuildId, type BuildInfo } from '../workers/versioning';
import { writeWorkflowBundle } from '../workers/workflow-bundle';
import { bundleCli } from './bundle-cli';

const info: BuildInfo = { buildId: defaultBuildId() };
writeFileSync(BUILD_INFO_FILE, `${JSON.stringify(info, null, 2)}\n`);
process.stdout.write(`${BUILD_INFO_FILE}: build id ${info.buildId}\n`);
writeWorkflowBundle(join(PROJECT_ROOT, 'dist', 'workflows', 'index.js')).then(
  (file) => process.stdout.write(`${file}: the workflow bundle\n`),
  (err: unknown) => {
    process.stderr.write(`bundling the workflows failed: ${String(err)}\n`);
    process.exitCode = 1;
  },
);
bundleCli(PROJECT_ROOT).then(
  (file) => process.stdout.write(`${file}: the command groups in one file\n`),
  (err: unknown) => {
    process.stderr.write(`bundling the CLI's command groups failed: ${String(err)}\n`);
    process.exitCode = 1;
  },
);
