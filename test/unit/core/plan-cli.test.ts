import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { availableParallelism } from 'node:os';
import { beforeAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import type { CorpusCase } from './corpus.test';

/**
 * `wavegate plan` as a user runs it: a real `node bin/wavegate.js` process. Each malformed spec and
 * inventory in the corpus must exit 2 and name its field on stderr; the DESIGN §2 spec plans to 1, 5
 * and 14 devices and exits 0. Nothing here contacts Temporal.
 */
const ROOT = 'test/corpus';
const CASES = (parseYaml(readFileSync(join(ROOT, 'cases.yaml'), 'utf8')) as CorpusCase[]).filter((c) => c.kind === 'spec' || c.kind === 'inventory');
const NO_PROFILES = join(ROOT, 'no-profiles');

function wavegate(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['bin/wavegate.js', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

describe('wavegate plan (spawned)', () => {
  it('plans the DESIGN §2 spec over 20 devices to phases of 1, 5 and 14 (exit 0)', async () => {
    const text = await wavegate(['plan', '-f', 'examples/plan/phased.yaml', '--inventory', 'examples/plan/fleet-20.yaml']);
    expect(text.stderr).toBe('');
    expect(text.code).toBe(0);
    expect(text.stdout).toMatch(/phase 1: canary 1 device — 1 device\(s\)/);
    expect(text.stdout).toMatch(/phase 2: bulk 25% — 5 device\(s\)/);
    expect(text.stdout).toMatch(/phase 3: bulk remainder — 14 device\(s\)/);
    expect(text.stdout).toMatch(/web\s+12 device\(s\)\s+budget 10%\s+at most 1 in flight/);
    const json = await wavegate(['plan', '-f', 'examples/plan/phased.yaml', '--inventory', 'examples/plan/fleet-20.yaml', '--json', '--rollout-id', 'r-42']);
    expect(json.code).toBe(0);
    const plan = JSON.parse(json.stdout) as { rolloutId: string; phases: Array<{ devices: string[] }>; devices: Record<string, { class: string }> };
    expect(plan.rolloutId).toBe('r-42');
    expect(plan.phases.map((p) => p.devices.length)).toEqual([1, 5, 14]);
    expect(Object.keys(plan.devices)).toHaveLength(20);
  });

  it('imports an Ansible inventory and lists not-for-me devices with their reason', async () => {
    const run = await wavegate(['plan', '-f', 'examples/plan/phased.yaml', '--inventory', 'examples/plan/fleet.ini']);
    expect(run.code).toBe(0);
    expect(run.stdout).toMatch(/kiosk-01\s+left-behind/);
  });

  // Every case is its own process; run them in a pool up front (CPU-bound: tsx compiles the CLI in
  // each), then assert case by case.
  type Run = Awaited<ReturnType<typeof wavegate>>;
  const runs = new Map<string, Run>();
  beforeAll(async () => {
    const queue = [...CASES];
    const worker = async () => {
      for (let c = queue.shift(); c; c = queue.shift()) {
        const file = join(ROOT, c.file);
        const args = c.kind === 'spec'
          ? ['plan', '-f', file, '--inventory', join(ROOT, 'valid/inventory.yaml'), '--profiles-dir', NO_PROFILES]
          : ['plan', '-f', join(ROOT, 'valid/spec.yaml'), '--inventory', file, '--profiles-dir', NO_PROFILES];
        runs.set(c.file, await wavegate(args));
      }
    };
    await Promise.all(Array.from({ length: Math.max(2, availableParallelism()) }, worker));
  }, 600_000);

  it.each(CASES.map((c) => [c.file, c] as const))('%s: exit 2, the field on stderr', (_file, c) => {
    const run = runs.get(c.file)!;
    expect(run.code, run.stderr).toBe(2);
    expect(run.stdout).toBe('');
    expect(run.stderr).toContain(c.path);
    expect(run.stderr).toContain(c.file);
  });
});
