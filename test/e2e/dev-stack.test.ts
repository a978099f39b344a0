import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import { parse } from 'yaml';
import { describe, expect, it } from 'vitest';
import { runCli, spawnCliUntil } from '../support/cli';
import { scratchDir } from '../support/harness';
import { PROJECT_ROOT } from '../../intake/package-layout';

function processesMentioning(text: string): string[] {
  try {
    return execFileSync('pgrep', ['-af', text], { encoding: 'utf8' })
      .split('\n')
      .filter((l) => l && !l.includes('pgrep'));
  } catch {
    return []; // pgrep exits 1 when nothing matches
  }
}

function portRefuses(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const sock = connect(port, '127.0.0.1');
    sock.once('connect', () => {
      sock.destroy();
      resolve(false);
    });
    sock.once('error', () => resolve(true));
  });
}

describe('the embedded dev stack', () => {
  it('`wavegate dev --demo` serves Temporal, the Web UI and the fleet; Ctrl-C leaves nothing running', async () => {
    const scratch = scratchDir('dev');
    try {
      const { child, output } = await spawnCliUntil(['dev', '--demo', '--state-dir', scratch.dir], /Ctrl-C to stop/);
      const text = output();
      const address = /Temporal address: (127\.0\.0\.1:\d+)/.exec(text)![1]!;
      const ui = /Web UI: +(http:\/\/127\.0\.0\.1:\d+)/.exec(text)![1]!;
      // The Web UI really answers.
      const page = await fetch(ui);
      expect(page.status).toBe(200);
      // The dev server and the demo fleet run from this state directory.
      expect(processesMentioning(scratch.dir).some((l) => l.includes('temporal') && l.includes('start-dev'))).toBe(
        true,
      );
      const inventory = parse(readFileSync(join(scratch.dir, 'demo-fleet.yaml'), 'utf8')) as {
        devices: Array<{ port: number; pool: string; class: string }>;
      };
      expect(inventory.devices).toHaveLength(12);
      expect(new Set(inventory.devices.map((d) => d.pool)).size).toBe(2);
      expect(new Set(inventory.devices.map((d) => d.class)).size).toBe(2);
      expect(await portRefuses(inventory.devices[0]!.port)).toBe(false);

      const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
      child.kill('SIGINT');
      expect(await exited).toBe(130);
      expect(processesMentioning(scratch.dir)).toEqual([]);
      for (const d of inventory.devices) expect(await portRefuses(d.port)).toBe(true);
      expect(await portRefuses(Number(address.split(':')[1]))).toBe(true);
    } finally {
      scratch.cleanup();
    }
  });

  it('`wavegate demo` rolls every demo device to the new revision, prints the Web UI link, and exits 0', async () => {
    const scratch = scratchDir('demo');
    try {
      const run = await runCli(['demo', '--state-dir', scratch.dir], { timeoutMs: 180_000 });
      expect(run.stderr).toBe('');
      expect(run.code).toBe(0);
      expect(run.stdout).toMatch(/Web UI: http:\/\/127\.0\.0\.1:\d+\/namespaces\/default\/workflows\/rollout%3Ademo/);
      for (let i = 1; i <= 12; i++) expect(run.stdout).toContain(`✔ edge-${String(i).padStart(2, '0')}    applied`);
      expect(run.stdout).toContain('rollout completed: 12/12 applied');
      expect(processesMentioning(scratch.dir)).toEqual([]);
    } finally {
      scratch.cleanup();
    }
  });

  it('bad input is refused with exit 2 naming the field, before anything starts', async () => {
    const scratch = scratchDir('badspec');
    try {
      const spec = join(scratch.dir, 'bad.yaml');
      writeFileSync(
        spec,
        'rollout:\n  profile: demo\n  fromRevision: 1\n  toRevision: 2\n  phases:\n    - canary: lots\n',
      );
      // A valid inventory, so the spec alone is what is wrong (start reads the inventory first now, for the membership entity).
      const run = await runCli([
        'start',
        '-f',
        spec,
        '--inventory',
        join(PROJECT_ROOT, 'examples/plan/fleet-20.yaml'),
        '--address',
        '127.0.0.1:1',
      ]);
      expect(run.code).toBe(2);
      expect(run.stderr).toContain('rollout.phases[0].canary');
      expect(run.stderr).toContain('"lots"');
      expect(run.stderr).not.toContain('cannot reach Temporal');
      // A missing inventory is named too.
      const missing = await runCli([
        'start',
        '-f',
        spec,
        '--inventory',
        join(scratch.dir, 'none.yaml'),
        '--address',
        '127.0.0.1:1',
      ]);
      expect(missing.code).toBe(2);
      expect(missing.stderr).toMatch(/none\.yaml: cannot read file \(ENOENT\)/);
      expect(missing.stderr).not.toContain('cannot reach Temporal');

      // A transport this version does not have is refused by name, not quietly replaced by SSH.
      writeFileSync(
        spec,
        'rollout:\n  profile: demo\n  fromRevision: 1\n  toRevision: 2\n  transport: agent\n  phases:\n    - canary: 1 device\n',
      );
      const agent = await runCli([
        'start',
        '-f',
        spec,
        '--inventory',
        join(PROJECT_ROOT, 'examples/plan/fleet-20.yaml'),
        '--address',
        '127.0.0.1:1',
      ]);
      expect(agent.code).toBe(2);
      expect(agent.stderr).toContain(
        'rollout.transport: the agent transport is not available in this version; allowed: "ssh" (got "agent")',
      );
    } finally {
      scratch.cleanup();
    }
  });
});
