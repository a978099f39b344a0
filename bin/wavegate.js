#!/usr/bin/env node

// Two ways to run, decided by whether the TypeScript sources are here:
// - a checkout (cli/main.ts present): the sources through tsx, so `npm run dev` needs no build and can
//   never run a stale dist/ left by an earlier `npm run build` (the tests build a fresh one and set
//   WAVEGATE_RUN_FROM=dist: test/support/compiled-build.ts);
// - the installed package (package.json "files" ships dist/, not the sources): the compiled JavaScript,
//   no TypeScript compiler at run time.
// WAVEGATE_RUN_FROM=dist runs a checkout's dist/ instead (benchmarks, checking a build before packing).
const { existsSync } = require('node:fs');
const { join } = require('node:path');

const root = join(__dirname, '..');
const fromSource = existsSync(join(root, 'cli', 'main.ts')) && process.env.WAVEGATE_RUN_FROM !== 'dist';
let cli;
if (fromSource) {
  require('tsx/cjs');
  cli = require('../cli/main.ts');
} else if (existsSync(join(root, 'dist', 'cli', 'main.js'))) {
  cli = require('../dist/cli/main.js');
} else {
  process.stderr.write(`wavegate: ${join(root, 'dist')} is missing: run \`npm run build\` in ${root}\n`);
  process.exit(1);
}
cli.main(process.argv).catch((err) => {
  // No stack trace reaches a user (WAVEGATE_DEBUG=1 shows it for a bug report).
  const debug = process.env.WAVEGATE_DEBUG === '1' && err && err.stack;
  process.stderr.write(
    `wavegate: ${debug ? err.stack : `${err?.message ? err.message : err} (an unexpected error; run again with WAVEGATE_DEBUG=1 for the details to report)`}\n`,
  );
  process.exitCode = 1;
});
