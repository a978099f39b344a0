import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { runCli, startDevDemo, WAVEGATE_BIN, type CliRun, type DevDemo } from '../support/cli';
import { scratchDir } from '../support/harness';

/**
 * `wavegate watch` in a real terminal: tmux gives the command a TTY of 120×40; the screen must show one
 * progress block that changes in place, not a scroll of repeated frames.
 */
const scratch = scratchDir('watch');
const socket = `wavegate-watch-${process.pid}`;
let stack: DevDemo | undefined;
let address = '';
let inventory = '';

function wg(args: string[]): Promise<CliRun> {
  return runCli([...args, '--address', address], { env: { TEMPORAL_ADDRESS: '', TEMPORAL_PROFILE: '' } });
}

const tmux = (...args: string[]) => execFileSync('tmux', ['-L', socket, ...args], { encoding: 'utf8' });
const screen = () => tmux('capture-pane', '-p', '-t', 'watch');

async function screenUntil(what: string, test: (text: string) => boolean, timeoutMs = 60_000): Promise<string> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const text = screen();
    if (test(text)) return text;
    if (Date.now() > deadline) throw new Error(`screen never showed ${what}:\n${text}`);
    await new Promise((r) => setTimeout(r, 300));
  }
}

const occurrences = (text: string, needle: RegExp) => (text.match(new RegExp(needle.source, 'gm')) ?? []).length;

beforeAll(async () => {
  stack = await startDevDemo(join(scratch.dir, 'state'));
  address = stack.address;
  inventory = stack.inventory;
});

afterAll(async () => {
  try {
    tmux('kill-server');
  } catch {
    // already gone
  }
  await stack?.stop();
  scratch.cleanup();
});

describe('wavegate watch in a terminal', () => {
  it('redraws one progress block in place and ends with the outcome and exit 0', async () => {
    const spec = join(scratch.dir, 'manual.yaml');
    writeFileSync(
      spec,
      stringify({
        rollout: {
          profile: 'demo',
          fromRevision: 1,
          toRevision: 2,
          phases: [
            { canary: '1 device', gate: 'manual' },
            { bulk: 'remainder', gate: '2s' },
          ],
          disruptionBudget: { 'pool-a': 0.5, 'pool-b': 0.5 },
        },
      }),
    );
    const started = await wg(['start', '-f', spec, '--inventory', inventory]);
    expect(started.code, started.stderr).toBe(0);
    // Its own id (issue 23): `rollout:demo:<UTC yyyymmdd-hhmmss>`, as start printed it.
    const id = /^rollout (rollout:demo:\d{8}-\d{6}) started$/m.exec(started.stdout)?.[1] ?? 'no id printed';
    const header = new RegExp(`^rollout ${id} `);

    const command = `${process.execPath} ${WAVEGATE_BIN} watch ${id} --address ${address} --interval 300; echo "watch exit=$?"; sleep 600`;
    tmux(
      'new-session',
      '-d',
      '-s',
      'watch',
      '-x',
      '120',
      '-y',
      '40',
      '-c',
      PROJECT_ROOT,
      '-e',
      'TEMPORAL_ADDRESS=',
      command,
    );

    // Moment 1: the canary waits at its manual gate.
    const first = await screenUntil('the canary awaiting approval', (t) => /awaiting-approval/.test(t));
    expect(occurrences(first, header), first).toBe(1);
    expect(occurrences(first, /^ {2}DEVICE /), first).toBe(1);
    // Each phase row ends with its estimate (core/eta.ts), cut at the terminal's width: "eta +2s after approval".
    expect(first).toMatch(
      /^ {2}0 canary 1 device +\[#+\] +1\/1 +applied 1 +awaiting-approval {2}eta \+[\dhms ]+ after/m,
    );
    expect(first).toMatch(
      /^ {2}1 bulk remainder +\[\.+\] +0\/11 +applied 0 +pending {2}eta \+[\dhms ]+ after approval$/m,
    );
    expect(first).toMatch(/^ {2}eta: [\dhms ]+ after approval$/m);
    expect(first).not.toContain('\x1b');

    // The frame is redrawn while nothing changes but the clock: still one block.
    const clock = /at (\d\d:\d\d:\d\d)/.exec(first)![1];
    const later = await screenUntil('a newer frame', (t) => /at (\d\d:\d\d:\d\d)/.exec(t)?.[1] !== clock);
    expect(occurrences(later, header), later).toBe(1);

    const approved = await wg(['approve', id, '--reason', 'watching it in tmux']);
    expect(approved.code, approved.stderr).toBe(0);

    // Moment 2: the rollout finished; the same block now shows every phase passed, then the outcome.
    const last = await screenUntil('the outcome', (t) => /watch exit=/.test(t), 120_000);
    expect(occurrences(last, header), last).toBe(1);
    expect(occurrences(last, /^ {2}DEVICE /), last).toBe(1);
    expect(last).toMatch(/state completed +phase done/);
    expect(last).toMatch(/^ {2}0 canary 1 device +\[#+\] +1\/1 +applied 1 +passed/m);
    expect(last).toMatch(/^ {2}1 bulk remainder +\[#+\] +11\/11 +applied 11 +passed/m);
    expect(last).toContain('rollout completed: 12/12 applied — exit 0');
    expect(last).toContain('watch exit=0');
    expect(last).not.toEqual(first);
    // The block sits where it started: the header is still the screen's first line.
    expect(last.split('\n')[0]).toMatch(header);
  });
});
