import { cpSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import {
  dependencyBackoffMs,
  describeCycle,
  findDependencyCycle,
  waitingReason,
  type Dependency,
} from '../../../core/dependencies';
import { WavegateError } from '../../../core/errors';
import { parseRolloutSpec } from '../../../core/spec';
import { checkDependencyCycle, loadDependencies } from '../../../intake/dependencies';
import { PROJECT_ROOT } from '../../../intake/package-layout';
import { runCli } from '../../support/cli';
import { scratchDir } from '../../support/harness';
import { refusal, rejection } from '../../support/refusal';

/** Ordering between profiles: the graph walk, the spec field, the checks against the profiles root, and plan's exit 2. */

const graph = (edges: Record<string, string[]>) => new Map(Object.entries(edges));

describe('findDependencyCycle', () => {
  it('finds none in a chain or a diamond', () => {
    expect(findDependencyCycle('motd', graph({ motd: ['inference'], inference: ['driver'] }))).toBeUndefined();
    expect(findDependencyCycle('a', graph({ a: ['b', 'c'], b: ['d'], c: ['d'], d: [] }))).toBeUndefined();
    expect(findDependencyCycle('alone', graph({}))).toBeUndefined();
  });

  it('names a direct cycle through the root as its path', () => {
    const cycle = findDependencyCycle('motd', graph({ motd: ['inference'], inference: ['motd'] }));
    expect(cycle).toEqual(['motd', 'inference', 'motd']);
    expect(describeCycle(cycle!)).toBe('motd -> inference -> motd');
  });

  it('names a transitive cycle, and one reachable from the root that does not pass through it', () => {
    expect(findDependencyCycle('a', graph({ a: ['b'], b: ['c'], c: ['a'] }))).toEqual(['a', 'b', 'c', 'a']);
    expect(findDependencyCycle('root', graph({ root: ['x'], x: ['y'], y: ['x'] }))).toEqual(['x', 'y', 'x']);
  });

  it('is deterministic: declaration order decides which cycle is named', () => {
    const g = graph({ a: ['ok', 'b', 'c'], ok: [], b: ['a'], c: ['a'] });
    expect(findDependencyCycle('a', g)).toEqual(['a', 'b', 'a']);
    expect(findDependencyCycle('a', g)).toEqual(['a', 'b', 'a']);
  });
});

describe('waiting: reason and backoff', () => {
  it('says what the device waits for', () => {
    expect(waitingReason([{ profile: 'inference', revision: 15 }])).toBe('waiting for inference r15');
    expect(
      waitingReason([
        { profile: 'a', revision: 1 },
        { profile: 'b', revision: 2 },
      ]),
    ).toBe('waiting for a r1, b r2');
  });

  it('backs off from 15 s, doubling, to at most 2 min', () => {
    expect([1, 2, 3, 4, 5, 50].map(dependencyBackoffMs)).toEqual([15_000, 30_000, 60_000, 120_000, 120_000, 120_000]);
  });
});

describe('rollout.after in the spec', () => {
  const spec = (after: unknown) => ({
    rollout: { profile: 'motd', fromRevision: 1, toRevision: 2, phases: [{ canary: '1 device' }], after },
  });
  const specRefusal = (after: unknown): WavegateError => refusal(() => parseRolloutSpec(spec(after), 'spec.yaml'));

  it('parses a list of profile and revision, absent by default', () => {
    expect(parseRolloutSpec(spec([{ profile: 'inference', revision: 15 }]), 's').after).toEqual([
      { profile: 'inference', revision: 15 },
    ]);
    expect(
      parseRolloutSpec(
        { rollout: { profile: 'motd', fromRevision: 1, toRevision: 2, phases: [{ canary: '1 device' }] } },
        's',
      ).after,
    ).toBeUndefined();
  });

  it('refuses the spec’s own profile, a profile twice, a bad name, a bad revision, unknown keys and more than 10', () => {
    const self = specRefusal([{ profile: 'motd', revision: 1 }]);
    expect(self.code).toBe('INVALID_INPUT');
    expect(self.message).toContain('rollout.after[0].profile: a profile may not depend on itself (got "motd")');
    expect(
      specRefusal([
        { profile: 'a', revision: 1 },
        { profile: 'a', revision: 2 },
      ]).message,
    ).toContain('rollout.after[1].profile: named twice');
    expect(specRefusal([{ profile: 'Inference', revision: 1 }]).message).toMatch(
      /rollout\.after\[0\]\.profile: must be lowercase.*\(got "Inference"\)/,
    );
    expect(specRefusal([{ profile: 'a', revision: 0 }]).message).toMatch(/rollout\.after\[0\]\.revision: .*\(got 0\)/);
    expect(specRefusal([{ profile: 'a', revision: 1, verify: 'true' }]).message).toContain(
      'rollout.after[0].verify: unknown field',
    );
    const many = Array.from({ length: 11 }, (_, i) => ({ profile: `p${i}`, revision: 1 }));
    expect(specRefusal(many).message).toMatch(/rollout\.after: at most 10 profiles/);
  });
});

/** A profiles root: the demo profile (signed, with pins) and `base`, an unsigned profile with revision 1 only, over class server. */
function profilesRoot(dir: string): string {
  const root = join(dir, 'profiles');
  cpSync(join(PROJECT_ROOT, 'profiles', 'demo'), join(root, 'demo'), { recursive: true });
  mkdirSync(join(root, 'base', 'revisions'), { recursive: true });
  writeFileSync(join(root, 'base', 'profile.yaml'), stringify({ name: 'base', scope: { class: 'server' } }));
  writeFileSync(
    join(root, 'base', 'revisions', '1.yaml'),
    stringify({
      profile: 'base',
      revision: 1,
      apply: 'touch "$HOME/base"',
      verify: 'test -f "$HOME/base"',
      risk: 'safe',
    }),
  );
  return root;
}

describe('rollout.after against the profiles root', () => {
  const scratch = scratchDir('after-intake');
  const root = profilesRoot(scratch.dir);
  afterAll(() => scratch.cleanup());
  const load = (after: Dependency[]) => loadDependencies({ after }, root, 'spec.yaml');
  const refused = (after: Dependency[]): WavegateError => refusal(() => load(after));

  it('finds each named profile at its revision (a signed one verified against its pins)', () => {
    const found = load([
      { profile: 'base', revision: 1 },
      { profile: 'demo', revision: 2 },
    ]);
    expect(found.map((d) => [d.dep.profile, d.revision.revision.revision, !!d.revision.envelope])).toEqual([
      ['base', 1, false],
      ['demo', 2, true],
    ]);
  });

  it('refuses an unknown profile naming the field and the value', () => {
    const err = refused([
      { profile: 'base', revision: 1 },
      { profile: 'nosuch', revision: 1 },
    ]);
    expect(err.code).toBe('INVALID_INPUT');
    expect(err.message).toMatch(/^spec\.yaml: rollout\.after\[1\]\.profile: no profile "nosuch"/);
  });

  it('refuses a revision the profile does not have; for a signed profile, one without an envelope', () => {
    expect(refused([{ profile: 'base', revision: 7 }]).message).toMatch(
      /^spec\.yaml: rollout\.after\[0\]\.revision: profile "base" has no revision 7/,
    );
    expect(refused([{ profile: 'demo', revision: 3 }]).message).toMatch(
      /^spec\.yaml: rollout\.after\[0\]\.revision: profile "demo" has pins .* but revision 3 has no signed envelope/,
    );
  });
});

describe('cycle check at start (the running rollouts, read through a stand-in for Temporal)', () => {
  const running = (afters: Record<string, Dependency[]>) => async (_client: unknown, profile: string) =>
    afters[profile];
  const spec = { profile: 'motd', after: [{ profile: 'inference', revision: 15 }] };

  it('refuses a cycle through the running rollouts, with its path', async () => {
    const err = await rejection(
      checkDependencyCycle(
        {} as never,
        spec,
        'motd.yaml',
        running({ inference: [{ profile: 'driver', revision: 2 }], driver: [{ profile: 'motd', revision: 3 }] }),
      ),
    );
    expect(err).toBeInstanceOf(WavegateError);
    expect(err.code).toBe('INVALID_INPUT');
    expect(err.message).toContain(
      'motd.yaml: invalid\n  rollout.after: cycle motd -> inference -> driver -> motd (through the running rollouts of "inference", "driver")',
    );
  });

  it('passes when the profiles named run nothing that leads back, and reads each profile once', async () => {
    const asked: string[] = [];
    const read = async (_c: unknown, p: string) => {
      asked.push(p);
      return ({ inference: [{ profile: 'driver', revision: 1 }], driver: [] } as Record<string, Dependency[]>)[p];
    };
    await expect(
      checkDependencyCycle(
        {} as never,
        {
          profile: 'motd',
          after: [
            { profile: 'inference', revision: 1 },
            { profile: 'driver', revision: 1 },
          ],
        },
        'motd.yaml',
        read,
      ),
    ).resolves.toBeUndefined();
    expect(asked.sort()).toEqual(['driver', 'inference']);
  });
});

describe('wavegate plan with rollout.after', () => {
  const scratch = scratchDir('after-plan');
  const root = profilesRoot(scratch.dir);
  afterAll(() => scratch.cleanup());
  const inventory = join(PROJECT_ROOT, 'test/corpus/valid/inventory.yaml');
  const plan = (name: string, after: unknown) => {
    const file = join(scratch.dir, `${name}.yaml`);
    writeFileSync(
      file,
      stringify({
        rollout: {
          profile: 'demo',
          fromRevision: 1,
          toRevision: 2,
          phases: [{ canary: '1 device' }, { bulk: 'remainder' }],
          after,
        },
      }),
    );
    return runCli(['plan', '--offline', '-f', file, '--inventory', inventory, '--profiles', root]);
  };

  it('exits 2 naming the field and the value: unknown profile, unknown revision, itself', async () => {
    const unknown = await plan('unknown', [{ profile: 'inference', revision: 15 }]);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toMatch(/rollout\.after\[0\]\.profile: no profile "inference"/);
    const revision = await plan('revision', [{ profile: 'base', revision: 15 }]);
    expect(revision.code).toBe(2);
    expect(revision.stderr).toMatch(/rollout\.after\[0\]\.revision: profile "base" has no revision 15/);
    const self = await plan('self', [{ profile: 'demo', revision: 1 }]);
    expect(self.code).toBe(2);
    expect(self.stderr).toContain('rollout.after[0].profile: a profile may not depend on itself (got "demo")');
  }, 60_000);

  it('plans a valid one, naming the devices outside the dependency’s scope and the check it leaves to start', async () => {
    const run = await plan('valid', [{ profile: 'base', revision: 1 }]);
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toContain(
      'rollout.after: desk-01 not in the scope of profile "base": each waits until base r1 is verified on it some other way',
    );
    expect(run.stdout).toContain('a cycle through running rollouts is checked by start');
  }, 60_000);
});
