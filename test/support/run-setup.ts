/**
 * What test/support/global-setup.ts does before a vitest run, done once for the two runs `npm test` starts side
 * by side (scripts/test.sh): the pinned Temporal binaries, and a fresh dist/ with its workflow and CLI bundles.
 * Prints `dist` when the processes the tests start can run from the build (else nothing: they run from the
 * sources); the log goes to stderr. Exit 1 when the binaries cannot be had.
 */
import { ensureTools } from '../../workers/toolchain';
import { prepareBuild } from './global-setup';

const log = (line: string) => process.stderr.write(`[run-setup] ${line}\n`);

async function main(): Promise<void> {
  ensureTools(log);
  if (await prepareBuild(log)) process.stdout.write('dist\n');
}

main().catch((err: Error) => {
  log(`failed: ${err.message}`);
  process.exitCode = 1;
});
