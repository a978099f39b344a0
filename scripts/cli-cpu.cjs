// The CPU seconds of one `wavegate` command from the build, three ways, interleaved (docs/development.md,
// "Test suite time"): each group's own files (WAVEGATE_CLI_BUNDLE=0), the one-file bundle, and the bundle
// with its code cache. Interleaved, so that the load other work puts on the machine falls on all three alike.
//   node scripts/cli-cpu.cjs [--runs 8] -- status rollout:nope --address 127.0.0.1:7233
// Needs dist/ with its bundle (npm run build, or any test run). Prints the median and the lowest of each.
const { spawnSync } = require('node:child_process');
const { mkdtempSync, rmSync } = require('node:fs');
const { tmpdir } = require('node:os');
const { join } = require('node:path');

const argv = process.argv.slice(2);
const dash = argv.indexOf('--');
const opts = dash < 0 ? [] : argv.slice(0, dash);
const args = dash < 0 ? argv : argv.slice(dash + 1);
const runs = Number(opts[opts.indexOf('--runs') + 1]) || 8;
const cache = mkdtempSync(join(tmpdir(), 'wavegate-cli-cpu-'));
const bin = join(__dirname, '..', 'bin', 'wavegate.js');
const ways = {
  files: { WAVEGATE_CLI_BUNDLE: '0' },
  bundle: {},
  'bundle+cache': { WAVEGATE_CODE_CACHE: cache },
};

function cpuOf(env) {
  const run = spawnSync('/usr/bin/time', ['-f', '%U %S', process.execPath, bin, ...args], {
    env: { ...process.env, WAVEGATE_RUN_FROM: 'dist', WAVEGATE_CLI_BUNDLE: '', WAVEGATE_CODE_CACHE: '', ...env },
    encoding: 'utf8',
  });
  const [user, sys] = run.stderr.trim().split('\n').pop().split(' ').map(Number);
  return user + sys;
}

try {
  cpuOf(ways['bundle+cache']); // writes the cache
  const seconds = Object.fromEntries(Object.keys(ways).map((w) => [w, []]));
  for (let i = 0; i < runs; i++) for (const [way, env] of Object.entries(ways)) seconds[way].push(cpuOf(env));
  for (const [way, s] of Object.entries(seconds)) {
    s.sort((a, b) => a - b);
    console.log(`${way.padEnd(13)} median ${s[runs >> 1].toFixed(2)} s  lowest ${s[0].toFixed(2)} s  (${runs} runs)`);
  }
} finally {
  rmSync(cache, { recursive: true, force: true });
}
