import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Temporal servers and SSH fleets are real processes: give them time, and do not run
    // two suites that each start servers on a 2-core machine at once.
    testTimeout: 120_000,
    hookTimeout: 180_000,
    fileParallelism: false,
    globalSetup: ['test/support/global-setup.ts'],
  },
});
