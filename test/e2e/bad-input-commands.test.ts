import { execFileSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { CORPUS_ROOT, corpusCases, type CorpusCase } from '../corpus/load';
import { runCli } from '../support/cli';

/**
 * The bad-input corpus's command cases (test/corpus/cases-*.yaml, kind `command`): flags, URLs and files
 * given to the real `wavegate` (agent, gateway, init, sign, audit, plan with webhooks, fleet verdicts...).
 * Each must be refused with the documented exit code naming its field or flag, with no stack trace,
 * within its deadline (a hang is a failure, not a pass), and start nothing.
 */
const CASES = corpusCases().filter((c) => c.kind === 'command');
const CORPUS = resolve(CORPUS_ROOT);
const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

function fill(text: string, dir: string): string {
  return text.replaceAll('{dir}', dir).replaceAll('{corpus}', CORPUS);
}

function prepare(c: CorpusCase): string {
  const dir = mkdtempSync(join(tmpdir(), 'wavegate-badcmd-'));
  dirs.push(dir);
  for (const d of c.dirs ?? []) mkdirSync(join(dir, d), { recursive: true });
  for (const [name, content] of Object.entries(c.files ?? {})) writeFileSync(join(dir, name), fill(content, dir));
  for (const [name, mode] of Object.entries(c.modes ?? {})) chmodSync(join(dir, name), parseInt(mode, 8));
  for (const name of c.fifos ?? []) execFileSync('mkfifo', [join(dir, name)]);
  return dir;
}

describe('bad-input corpus: commands', () => {
  it('has command cases', () => {
    expect(CASES.length).toBeGreaterThan(0);
  });

  it.each(CASES.map((c) => [c.file, c] as const))(
    '%s is refused naming its field',
    async (_name, c) => {
      const dir = prepare(c);
      const env = Object.fromEntries(Object.entries(c.env ?? {}).map(([k, v]) => [k, fill(v, dir)]));
      // A fresh HOME: nothing of the machine's own configuration answers for the case.
      const run = await runCli(
        (c.args ?? []).map((a) => fill(a, dir)),
        { cwd: dir, env: { HOME: dir, ...env }, timeoutMs: c.timeoutMs ?? 60_000 },
      );
      const shown = `exit ${run.code}\nstdout:\n${run.stdout}\nstderr:\n${run.stderr}`;
      expect(run.code, shown).toBe(c.exit ?? 2);
      expect(run.stderr, shown).toContain(fill(c.path, dir));
      if (c.shows !== undefined) expect(run.stderr, shown).toContain(fill(c.shows, dir));
      expect(run.stderr, `a stack trace reached the user:\n${shown}`).not.toMatch(/\n\s+at .+\(.*:\d+:\d+\)/);
    },
    120_000,
  );
});
