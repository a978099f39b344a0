#!/usr/bin/env node
// Runs the TypeScript CLI through tsx, so a fresh clone needs no build step.
require('tsx/cjs');
require('../cli/main.ts')
  .main(process.argv)
  .catch((err) => {
    process.stderr.write(`wavegate: ${err && err.stack ? err.stack : err}\n`);
    process.exitCode = 1;
  });
