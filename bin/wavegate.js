#!/usr/bin/env node
// Runs the TypeScript CLI through tsx, so a fresh clone needs no build step.
require('tsx/cjs');
require('../cli/main.ts')
  .main(process.argv)
  .catch((err) => {
    // No stack trace reaches a user (WAVEGATE_DEBUG=1 shows it for a bug report).
    const debug = process.env.WAVEGATE_DEBUG === '1' && err && err.stack;
    process.stderr.write(`wavegate: ${debug ? err.stack : `${err && err.message ? err.message : err} (an unexpected error; run again with WAVEGATE_DEBUG=1 for the details to report)`}\n`);
    process.exitCode = 1;
  });
