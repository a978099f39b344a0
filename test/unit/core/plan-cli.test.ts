import { spawn } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { availableParallelism, tmpdir } from 'node:os';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { makePlan } from '../../../cli/commands/plan';
import { devicesInScope } from '../../../core/gates';
import { planPhases } from '../../../core/planner';
import { loadInventory } from '../../../intake/inventory';
import { prepareRollout } from '../../../intake/prepare';
import { PROJECT_ROOT } from '../../../intake/package-layout';
import { corpusCases } from '../../corpus/load';
import { refusal } from '../../support/refusal';

/**
 * `wavegate plan` as a user runs it: a real `node bin/wavegate.js` process. Each malformed spec and
 * inventory in the corpus must exit 2 and name its field on stderr; the phased example spec (examples/plan/phased.yaml) plans to 1, 5
 * and 14 devices and exits 0. Nothing here contacts Temporal.
 */
const ROOT = 'test/corpus';
const CASES = corpusCases().filter((c) => c.kind === 'spec' || c.kind === 'inventory');
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
  it('plans the phased example spec over 20 devices to phases of 1, 5 and 14 (exit 0)', async () => {
    const text = await wavegate([
      'plan',
      '--what-if',
      '-f',
      'examples/plan/phased.yaml',
      '--inventory',
      'examples/plan/fleet-20.yaml',
    ]);
    expect(text.stderr).toBe('');
    expect(text.code).toBe(0);
    expect(text.stdout).toMatch(/phase 1: canary 1 device — 1 device\(s\)/);
    expect(text.stdout).toMatch(/phase 2: bulk 25% — 5 device\(s\)/);
    expect(text.stdout).toMatch(/phase 3: bulk remainder — 14 device\(s\)/);
    expect(text.stdout).toMatch(/web\s+12 device\(s\)\s+budget 10%\s+at most 1 in flight/);
    const json = await wavegate([
      'plan',
      '--what-if',
      '-f',
      'examples/plan/phased.yaml',
      '--inventory',
      'examples/plan/fleet-20.yaml',
      '--json',
      '--rollout-id',
      'r-42',
    ]);
    expect(json.code).toBe(0);
    const plan = JSON.parse(json.stdout) as {
      rolloutId: string;
      phases: Array<{ devices: string[] }>;
      devices: Record<string, { class: string }>;
    };
    expect(plan.rolloutId).toBe('r-42');
    expect(plan.phases.map((p) => p.devices.length)).toEqual([1, 5, 14]);
    expect(Object.keys(plan.devices)).toHaveLength(20);
  });

  it('leaves a device under a holding node-down verdict out of the plan, naming the verdict (no recheck run)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'wavegate-plan-verdict-'));
    try {
      const inventory = join(dir, 'fleet-20.yaml');
      cpSync('examples/plan/fleet-20.yaml', inventory);
      const marker = join(dir, 'recheck-ran');
      const marked = await wavegate([
        'fleet',
        'mark-down',
        'srv-01',
        '--inventory',
        inventory,
        '--recheck',
        `touch ${marker}; exit 1`,
        '--reason',
        'PSU replaced',
      ]);
      expect(marked.stderr).toBe('');
      expect(marked.code).toBe(0);
      const run = await wavegate([
        'plan',
        '--what-if',
        '-f',
        'examples/plan/phased.yaml',
        '--inventory',
        inventory,
        '--json',
      ]);
      expect(run.code).toBe(0);
      const plan = JSON.parse(run.stdout) as {
        phases: Array<{ devices: string[] }>;
        notForMe: Array<{ id: string; reason: string }>;
      };
      expect(plan.phases.flatMap((p) => p.devices)).not.toContain('srv-01');
      expect(plan.notForMe.find((n) => n.id === 'srv-01')?.reason).toMatch(
        /^node-down since .*, expires .*: PSU replaced$/,
      );
      const text = await wavegate(['plan', '--what-if', '-f', 'examples/plan/phased.yaml', '--inventory', inventory]);
      expect(text.stdout).toMatch(/srv-01\s+node-down since/);
      expect(text.stdout).toMatch(/node-down verdicts from .*fleet-20\.verdicts\.yaml: 1 hold/);
      // plan contacts nothing: the recheck is the snapshot's and the board's job.
      expect(existsSync(marker)).toBe(false);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('imports an Ansible inventory and lists not-for-me devices with their reason', async () => {
    const run = await wavegate([
      'plan',
      '--what-if',
      '-f',
      'examples/plan/phased.yaml',
      '--inventory',
      'examples/plan/fleet.ini',
    ]);
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
        const args =
          c.kind === 'spec'
            ? [
                'plan',
                // A case with a profile directory is planned as start would run it; the rest over the inventory alone.
                ...(c.profiles ? ['--offline'] : ['--what-if']),
                '-f',
                file,
                '--inventory',
                join(ROOT, 'valid/inventory.yaml'),
                '--profiles-dir',
                c.profiles ? join(ROOT, c.profiles) : NO_PROFILES,
              ]
            : [
                'plan',
                '--what-if',
                '-f',
                join(ROOT, 'valid/spec.yaml'),
                '--inventory',
                file,
                '--profiles-dir',
                NO_PROFILES,
              ];
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

/**
 * `plan` shows what `start` would run: for a profile with pins (the demo profile: signed envelopes) and
 * an inventory with pool budgets, the rollout input `plan` builds is the one `start` builds, and the
 * planner is given exactly what the rollout workflow gives it at its snapshot (workflows/rollout.ts,
 * step 2: pools from `input.poolBudgets`, risk from `input.risk`, the rollout id as the seed).
 */
describe('plan and start build the same input', () => {
  let dir: string;
  let specPath: string;
  let inventoryPath: string;
  const profilesRoot = join(PROJECT_ROOT, 'profiles');

  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'wavegate-plan-start-'));
    specPath = join(dir, 'spec.yaml');
    inventoryPath = join(dir, 'fleet.yaml');
    // pool-a's budget is overridden by the spec; pool-b's and pool-c's come from the inventory.
    writeFileSync(
      specPath,
      stringify({
        rollout: {
          profile: 'demo',
          fromRevision: 1,
          toRevision: 2,
          phases: [{ canary: '1 device' }, { bulk: '50%' }, { bulk: 'remainder' }],
          disruptionBudget: { 'pool-a': 0.5 },
        },
      }),
    );
    const devices = Array.from({ length: 9 }, (_, i) => ({
      id: `dev-${i + 1}`,
      host: '127.0.0.1',
      port: 2200 + i,
      pool: ['pool-a', 'pool-b', 'pool-c'][i % 3],
      class: i % 2 ? 'desktop' : 'server',
    }));
    writeFileSync(
      inventoryPath,
      stringify({
        pools: { 'pool-a': { disruptionBudget: 0.1 }, 'pool-b': { disruptionBudget: '40%' } },
        defaults: { user: 'wavegate' },
        devices,
      }),
    );
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('gives the planner identical input from plan and from start, with signed steps and the inventory budgets', () => {
    const started = prepareRollout({ specPath, inventoryPath, profilesRoot, startedBy: 'someone' });
    const report = makePlan({ file: specPath, inventory: inventoryPath, profiles: profilesRoot });

    // What the workflow hands the planner, written out as workflows/rollout.ts does it.
    const inventory = loadInventory(inventoryPath);
    const snapshot = devicesInScope(started.profile.scope, inventory.devices).map((d) => ({
      id: d.id,
      pool: d.pool,
      class: d.class,
      os: d.os,
      updateClass: d.updateClass,
      current: null,
    }));
    const workflowPlannerInput = {
      rolloutId: started.rolloutId,
      spec: started.spec,
      devices: snapshot,
      pools: Object.fromEntries(
        Object.entries(started.poolBudgets).map(([pool, budget]) => [pool, { disruptionBudget: budget }]),
      ),
      risk: started.risk,
    };
    expect(report.plannerInput).toEqual(workflowPlannerInput);
    expect(report.plan).toEqual(planPhases(workflowPlannerInput));

    const { startedBy: _a, ...fromStart } = started;
    const { startedBy: _b, ...fromPlan } = report.input!;
    expect(fromPlan).toEqual(fromStart);
    expect(started.poolBudgets).toEqual({ 'pool-a': 0.5, 'pool-b': 0.4, 'pool-c': 0.05 });
    expect(report.plan.pools.map((p) => [p.pool, p.budget])).toEqual([
      ['pool-a', 0.5],
      ['pool-b', 0.4],
      ['pool-c', 0.05],
    ]);
    expect(started.steps.envelope).toBeDefined();
    expect(started.rollbackSteps.envelope).toBeDefined();
  });

  it('refuses a revision file that differs from its signed envelope the same way in plan and start', () => {
    const profiles = join(dir, 'profiles');
    cpSync(join(profilesRoot, 'demo'), join(profiles, 'demo'), { recursive: true });
    const revisionPath = join(profiles, 'demo', 'revisions', '2.yaml');
    writeFileSync(revisionPath, readFileSync(revisionPath, 'utf8').replace('risk: risky', 'risk: safe'));
    const fromStart = refusal(() =>
      prepareRollout({ specPath, inventoryPath, profilesRoot: profiles, startedBy: 'someone' }),
    );
    const fromPlan = refusal(() => makePlan({ file: specPath, inventory: inventoryPath, profiles }));
    expect(fromStart.code).toBe('INVALID_INPUT');
    expect(fromStart.message).toContain('differs from its signed envelope');
    expect(fromPlan.message).toBe(fromStart.message);
  });
});
