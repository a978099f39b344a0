import { tmpdir } from 'node:os';
import { defineConfig } from 'vitest/config';
import { LongestFirstSequencer } from './test/support/sequencer.mjs';

/**
 * Files that must not share the CPU: one at a time, and `npm test` runs them beside the other files only while
 * those run at the lowest priority (scripts/test.sh), so they get the CPU at once when they ask for it. Every
 * file starts its own servers (Temporal, sshd, PostgreSQL, nginx, simulated fleets, HTTP) on ephemeral ports of
 * 127.0.0.1 and keeps its state in its own temp dirs, task queues and rollout ids, so two of them can share the
 * machine.
 */
const RUN_ALONE = [
  // Headless chromium: the heaviest process of the suite on a 2-core machine.
  'test/e2e/webui.test.ts',
  'test/e2e/webui-outcomes.test.ts',
  'test/e2e/board.test.ts',
  'test/e2e/board-temporal-away.test.ts',
  // Compute-bound (1,000 simulated devices; 300 devices over three workers and PostgreSQL): a neighbour
  // gains little time and, paired with each other, one device's apply failed its verify under load.
  'test/workflow/rollout-scale.test.ts',
  'test/e2e/control-plane.test.ts',
  // Wall-clock upper bounds measured on a quiet machine: a neighbour's CPU use would make them flaky.
  'test/workflow/health-probes.test.ts', // 4 probes of 400 ms in parallel < 800 ms
  'test/workflow/webhooks.test.ts', // the rollout's story < 20 s while a dead endpoint retries
  'test/unit/ssh-transport.test.ts', // a silent port times out < 3 s
  'test/unit/intake/node-down-timeout.test.ts', // a hung recheck is ended < 5 s
  'test/unit/core/planner.test.ts', // 5,000-device plan < 2 s of CPU
  // An estimate within 20% of a phase's end from the devices' sleeps: CPU taken from their SSH round trips skews it.
  'test/workflow/rollout-eta.test.ts',
];

/**
 * Files that must run with nothing else at all, not even the alone files: `wavegate dev` on the preferred ports
 * 7233/8233 (any other file's CLI may find it there), then proves those ports refuse and pgrep finds nothing left
 * once it stops. `npm test` runs them first (scripts/test.sh).
 */
const EXCLUSIVE = ['test/e2e/dev-stack.test.ts'];

/**
 * Unit files that change what the process holds for the files after them (the environment, module mocks and
 * spies, a module's own state), or were seen to fail beside another file in one process: each runs in a
 * process of its own, as every file outside test/unit/ does.
 */
const UNIT_ISOLATED = [
  'test/unit/core/rollout-model.test.ts', // vi.spyOn
  'test/unit/intake/node-down.test.ts', // sets process.env
  'test/unit/metrics-token-policy.test.ts', // sets process.env
  'test/unit/secret-policy.test.ts', // sets process.env
  // Failed together once (a simulated fleet, a device channel and the agent gateway in one process).
  'test/unit/fleet-sim.test.ts',
  'test/unit/device-channel.test.ts',
  'test/unit/cli/agent-gateway.test.ts',
];

export default defineConfig({
  test: {
    // Temporal servers and SSH fleets are real processes: give them time.
    testTimeout: 120_000,
    hookTimeout: 180_000,
    globalSetup: ['test/support/global-setup.ts'],
    // The workers the tests start as `wavegate worker` read the inventories rollouts name (--inventory-on-worker,
    // the nightly canary) only under their roots: every test keeps its files in a scratch directory under the temp dir.
    env: { WAVEGATE_INVENTORY_ROOTS: tmpdir() },
    // Longest files first, by recorded CI durations (test/support/sequencer.ts): no tail of slow files alone.
    sequence: { sequencer: LongestFirstSequencer },
    // Every run also leaves a JSON report: `npx tsx scripts/test-durations.ts test-output/vitest.json` refreshes the record.
    // (`npm test` runs vitest three times, scripts/test.sh: each names its own report in $WAVEGATE_TEST_REPORT.)
    reporters: ['default', ['json', { outputFile: process.env.WAVEGATE_TEST_REPORT || 'test-output/vitest.json' }]],
    projects: [
      {
        extends: true,
        // Most of a file's time is spent waiting (Temporal timers, servers starting, SSH round trips),
        // not computing: with two files at once the suite kept 2 cores ~58% busy (CI at afde9f6: 24 CPU-min
        // in 20.5 min), with three 77% (CI at f06f423: 30.4 CPU-min in 19.9 min). A fourth gained nothing
        // then (cd0af40: 20.5 min, each file slower). Since the processes the tests start run compiled and the
        // workflow bundle is made once per run (test/support/global-setup.ts), a file takes 25-40% less CPU
        // (conformance ssh-sim 60 -> 44 CPU s, revert 62 -> 41, cli 90 -> 55): a fourth file fills the cores
        // again (.ci/run at dc8528d with four: 189 files, 2,047 tests passed, on a machine busy with other work).
        // Now the suite is CPU-bound: `npm test` at 00ec5d9 took 1,468 s and 2,516 CPU s, both cores 86% busy, so
        // its wall time falls only with its CPU seconds (docs/development.md, "Test suite time"). Cut since: the
        // scale tests at the smallest size that proves their mechanism (sliced-scale 228 -> 130 CPU s,
        // twin-scale 163 -> 71), the workflow bundle shipped by the build (a `wavegate worker` start 4.6 -> 1.3
        // CPU s), the unit files in shared processes (193 -> 123 CPU s, project 'unit' below). `npm test` in a
        // clean clone at 08e76cd, the machine shared with other work (load 3-14): 1,353 s and 1,666 CPU s for 210
        // files and 2,236 tests (20 files and 184 tests more than at 00ec5d9): -34% of the CPU. CI at ffbe187:
        // vitest 1,011 s for 214 files and 2,265 tests. Since, a `wavegate` command the tests start loads its group
        // from the build's one-file bundle with V8's code cache (6328913: `status` 0.56 -> 0.37 CPU s, `list` 0.60
        // -> 0.37; hundreds per run), and `npm test` typechecks beside the tests, not before them (8462b21).
        test: {
          name: 'shared',
          include: ['test/**/*.test.ts'],
          exclude: [...RUN_ALONE, ...EXCLUSIVE, 'test/unit/**'],
          maxWorkers: 4,
          sequence: { groupOrder: 0 },
        },
      },
      {
        extends: true,
        // Unit files share their worker processes (`isolate: false`): a fresh process per file loaded the same
        // modules again (vitest's "import" time). The 110 files of this project took 193 CPU s each in its own
        // process, 123 CPU s sharing (the same results). They run in the same four slots as the shared files
        // (vitest runs the projects of one group order in one pool of one size), longest first across both.
        test: {
          name: 'unit',
          include: ['test/unit/**/*.test.ts'],
          exclude: [...RUN_ALONE, ...UNIT_ISOLATED],
          isolate: false,
          maxWorkers: 4,
          sequence: { groupOrder: 0 },
        },
      },
      {
        extends: true,
        test: { name: 'unit-isolated', include: UNIT_ISOLATED, maxWorkers: 4, sequence: { groupOrder: 0 } },
      },
      {
        extends: true,
        // `npm test` runs this project as a second vitest beside the three above, which run at the lowest priority
        // (scripts/test.sh); a bare `vitest run` runs it after them.
        test: { name: 'alone', include: RUN_ALONE, maxWorkers: 1, fileParallelism: false, sequence: { groupOrder: 1 } },
      },
      {
        extends: true,
        test: {
          name: 'exclusive',
          include: EXCLUSIVE,
          maxWorkers: 1,
          fileParallelism: false,
          sequence: { groupOrder: 2 },
        },
      },
    ],
  },
});
