import { describe, expect, it } from 'vitest';
import { runCli } from '../support/cli';
import { scratchDir } from '../support/harness';

/**
 * `wavegate demo` ends by stopping its stack, Web UI included (issue 23): it used to print the Web UI's
 * address as the run ended, saying the run "stays there", though nothing answered there any more. It
 * prints links only while the stack runs, and at the end says the UI closes with it and how to keep one.
 */
describe('wavegate demo: the Web UI link at the end', () => {
  it('prints no Web UI address after the rollout ends, says the UI closes with the stack and how to keep one (npm run dev); the address it printed earlier no longer answers', async () => {
    const scratch = scratchDir('demo-link');
    try {
      const run = await runCli(['demo', '--state-dir', scratch.dir], { timeoutMs: 240_000 });
      expect(run.code, run.stdout + run.stderr).toBe(0);
      const ui = /Web UI: (http:\/\/127\.0\.0\.1:\d+)\//.exec(run.stdout)?.[1];
      expect(ui, run.stdout).toBeDefined();
      const ending = run.stdout.slice(run.stdout.indexOf('\nrollout completed:'));
      expect(ending).not.toContain(ui!);
      expect(ending).not.toContain('stays there');
      expect(ending).toContain(
        "Web UI: closes with the demo's stack, which stops now (the link above answers only while it runs). To keep one open, run the stack yourself: `npm run dev`",
      );
      // What the old ending pointed at: nothing answers once the command has returned.
      await expect(fetch(ui!, { signal: AbortSignal.timeout(5_000) })).rejects.toThrow();
    } finally {
      scratch.cleanup();
    }
  });
});
