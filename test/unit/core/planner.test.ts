import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { readDocument } from '../../../intake/files';
import { parseInventory } from '../../../core/inventory';
import { classifyDevice, maxInFlight, planPhases, type PlanDevice, type PlanInput } from '../../../core/planner';
import { parseRolloutSpec, type RolloutSpec } from '../../../core/spec';

const phasedSpec = () => parseRolloutSpec(readDocument('examples/plan/phased.yaml'), 'phased.yaml');
const fleet20 = () => parseInventory(readDocument('examples/plan/fleet-20.yaml'), 'fleet-20.yaml');

function spec(phases: unknown[], extra: Record<string, unknown> = {}): RolloutSpec {
  return parseRolloutSpec({ rollout: { profile: 'p', fromRevision: 1, toRevision: 2, phases, ...extra } }, 'spec.yaml');
}

describe('planner: pools named like Object.prototype properties, and minSample', () => {
  const devices = (pools: string[]): PlanDevice[] =>
    pools.map((pool, i) => ({ id: `d-${i}`, pool, class: 'server', updateClass: 'required' }));

  it('a pool called constructor, toString or valueOf gets the default budget, never a NaN one that starts no device', () => {
    const plan = planPhases({
      rolloutId: 'r',
      spec: spec([{ bulk: 'remainder' }]),
      devices: devices(['constructor', 'toString', 'valueOf', 'hasOwnProperty']),
    });
    for (const pool of plan.pools) {
      expect(pool.budget, pool.pool).toBe(0.05);
      expect(pool.maxInFlight, pool.pool).toBe(1);
    }
  });

  it('minSample larger than every phase warns that the failure gate is effectively disabled', () => {
    const many = devices(Array.from({ length: 12 }, () => 'web'));
    const plan = planPhases({
      rolloutId: 'r',
      spec: spec([{ canary: '1 device' }, { bulk: 'remainder' }], { minSample: 20 }),
      devices: many,
    });
    expect(plan.warnings).toContain(
      'minSample 20 is larger than every phase (the largest has 11 device(s)): the failure gate is effectively disabled while phases run and only judges a phase once all of its devices are done; lower minSample to at most 11',
    );
    const fine = planPhases({
      rolloutId: 'r',
      spec: spec([{ canary: '1 device' }, { bulk: 'remainder' }], { minSample: 3 }),
      devices: many,
    });
    expect(fine.warnings.some((w) => w.startsWith('minSample'))).toBe(false);
  });
});

describe('planner: the phased example spec', () => {
  it('plans 20 devices into phases of 1, 5 and 14', () => {
    const inv = fleet20();
    const plan = planPhases({
      rolloutId: 'rollout:production:15',
      spec: phasedSpec(),
      devices: inv.devices,
      pools: inv.pools,
    });
    expect(plan.phases.map((p) => p.devices.length)).toEqual([1, 5, 14]);
    expect(plan.canaryClass).toBe('server');
    const classOf = new Map(inv.devices.map((d) => [d.id, d.class]));
    expect(classOf.get(plan.phases[0]!.devices[0]!)).toBe('server');
    expect(plan.phases[1]!.devices.some((id) => classOf.get(id) === 'desktop')).toBe(true);
    expect(plan.phases[0]!.healthGate).toEqual(['all-runtimes-healthy', 'error-rate < 0.01']);
    expect(plan.pools).toEqual([
      { pool: 'office', size: 8, budget: 0.25, maxInFlight: 2 },
      { pool: 'web', size: 12, budget: 0.1, maxInFlight: 1 },
    ]);
    expect(plan.warnings).toEqual([]);
  });

  it('is deterministic per rollout id, and different ids spread the canary', () => {
    const inv = fleet20();
    const input = { spec: phasedSpec(), devices: inv.devices, pools: inv.pools };
    expect(planPhases({ rolloutId: 'a', ...input })).toEqual(planPhases({ rolloutId: 'a', ...input }));
    const canaries = new Set(
      Array.from({ length: 20 }, (_, i) => planPhases({ rolloutId: `r-${i}`, ...input }).phases[0]!.devices[0]),
    );
    expect(canaries.size).toBeGreaterThan(3);
  });

  it('left-behind → not-for-me, at-target → already applied, safe → one phase, concurrent → two canaries', () => {
    const inv = fleet20();
    const devices: PlanDevice[] = inv.devices.map((d, i) => ({
      ...d,
      updateClass: i === 0 ? 'left-behind' : d.updateClass,
      current: i === 1 ? 15 : 14,
    }));
    const plan = planPhases({ rolloutId: 'x', spec: phasedSpec(), devices });
    expect(classifyDevice(plan, devices[0]!.id)).toMatchObject({
      status: 'not-for-me',
      reason: expect.stringContaining('left-behind'),
    });
    expect(classifyDevice(plan, devices[1]!.id)).toEqual({ status: 'already-applied' });
    expect(plan.phases.flatMap((p) => p.devices)).toHaveLength(18);
    const safe = planPhases({ rolloutId: 'x', spec: phasedSpec(), devices, risk: 'safe' });
    expect(safe.phases).toHaveLength(1);
    expect(safe.warnings.join('\n')).toMatch(/safe/);
    const two = planPhases({ rolloutId: 'x', spec: { ...phasedSpec(), concurrent: true }, devices });
    expect(two.phases[0]!.devices).toHaveLength(2);
  });

  it('canaryClass overrides the majority; cumulative waves of 20 make 2, 8 and 10', () => {
    const inv = fleet20();
    const plan = planPhases({
      rolloutId: 'x',
      spec: { ...phasedSpec(), canaryClass: 'desktop' },
      devices: inv.devices,
    });
    expect(plan.canaryClass).toBe('desktop');
    const waves = parseRolloutSpec(
      { rollout: { profile: 'p', fromRevision: 1, toRevision: 2, waves: [10, 50, 100] } },
      's',
    );
    expect(
      planPhases({ rolloutId: 'x', spec: waves, devices: inv.devices }).phases.map((p) => p.devices.length),
    ).toEqual([2, 8, 10]);
  });

  it('devices left after the last phase form an implicit remainder phase, with a warning', () => {
    const inv = fleet20();
    const plan = planPhases({
      rolloutId: 'x',
      spec: spec([{ canary: '1 device' }, { bulk: '10%' }]),
      devices: inv.devices,
    });
    expect(plan.phases.map((p) => p.devices.length)).toEqual([1, 2, 17]);
    expect(plan.warnings.join('\n')).toMatch(/implicit/);
  });

  it('budget per pool is max(1, floor(size × budget))', () => {
    expect(maxInFlight(39, 0.05)).toBe(1);
    expect(maxInFlight(40, 0.05)).toBe(2);
    expect(maxInFlight(10, 0.2)).toBe(2);
    expect(maxInFlight(3, 0)).toBe(1);
  });
});

// ---------------------------------------------------------------------------------------------
// Properties over random fleets and specs.

const CLASSES = ['server', 'desktop', 'kiosk'];
const deviceArb = (to: number) =>
  fc.record({
    pool: fc.constantFrom('a', 'b', 'c'),
    class: fc.constantFrom(...CLASSES),
    os: fc.constantFrom('debian', 'rhel', 'windows'),
    updateClass: fc.constantFrom('required', 'required', 'required', 'best-effort', 'left-behind'),
    current: fc.constantFrom(null, to - 1, to - 1, to - 1, to, to + 1),
    reachable: fc.constantFrom(true, true, true, false),
  });

const fleetArb = fc
  .uniqueArray(fc.stringMatching(/^[a-z][a-z0-9-]{0,8}$/), { maxLength: 60 })
  .chain((ids) =>
    fc.tuple(...ids.map(() => deviceArb(2))).map((ds) => ds.map((d, i) => ({ id: ids[i]!, ...d }) as PlanDevice)),
  );

const phasesArb = fc
  .record({
    canary: fc.option(
      fc.oneof(
        fc.integer({ min: 1, max: 4 }).map((n) => `${n} device${n > 1 ? 's' : ''}`),
        fc.integer({ min: 1, max: 20 }).map((p) => `${p}%`),
      ),
      { nil: undefined },
    ),
    middle: fc.array(
      fc.oneof(
        fc.integer({ min: 1, max: 10 }).map((n) => ({ kind: 'count', v: n })),
        fc.integer({ min: 1, max: 25 }).map((p) => ({ kind: 'percent', v: p })),
        fc.integer({ min: 1, max: 100 }).map((p) => ({ kind: 'cumulative', v: p })),
      ),
      { maxLength: 4 },
    ),
    remainder: fc.boolean(),
  })
  .map(({ canary, middle, remainder }) => {
    const phases: unknown[] = [];
    if (canary) phases.push({ canary });
    let lastCum = 0;
    for (const m of middle) {
      if (m.kind === 'count') phases.push({ bulk: `${m.v} devices` });
      else if (m.kind === 'percent') phases.push({ bulk: `${m.v}%` });
      else if (m.v > lastCum) {
        lastCum = m.v;
        phases.push({ bulk: `up to ${m.v}%` });
      }
    }
    if (remainder || phases.length === 0) phases.push({ bulk: 'remainder' });
    return phases;
  });

const inputArb = fc
  .record({
    rolloutId: fc.string({ minLength: 1, maxLength: 30 }),
    devices: fleetArb,
    phases: phasesArb,
    concurrent: fc.boolean(),
    canaryClass: fc.option(fc.constantFrom(...CLASSES), { nil: undefined }),
    risk: fc.constantFrom<'risky' | 'safe'>('risky', 'risky', 'risky', 'safe'),
    budgets: fc.record({ a: fc.double({ min: 0, max: 1, noNaN: true }), b: fc.constantFrom(0.05, 0.25, 0.5) }),
  })
  .map(
    (r): PlanInput => ({
      rolloutId: r.rolloutId,
      devices: r.devices,
      risk: r.risk,
      spec: spec(r.phases, {
        concurrent: r.concurrent,
        ...(r.canaryClass ? { canaryClass: r.canaryClass } : {}),
        disruptionBudget: { a: r.budgets.a },
      }),
      pools: { b: { disruptionBudget: r.budgets.b } },
    }),
  );

const RUNS = { numRuns: 300 };

describe('planner properties', () => {
  it('every device is in exactly one phase, or already applied, or not-for-me; left-behind is never planned', () => {
    fc.assert(
      fc.property(inputArb, (input) => {
        const plan = planPhases(input);
        const seen = [
          ...plan.phases.flatMap((p) => p.devices),
          ...plan.alreadyApplied,
          ...plan.notForMe.map((n) => n.id),
        ];
        expect(seen.slice().sort()).toEqual(input.devices.map((d) => d.id).sort());
        for (const d of input.devices) {
          const c = classifyDevice(plan, d.id);
          if (d.updateClass === 'left-behind') expect(c.status).toBe('not-for-me');
          else if (d.current === 2) expect(c.status).toBe('already-applied');
          else if (d.current === 3) expect(c.status).toBe('not-for-me');
          else expect(c.status).toBe('planned');
        }
      }),
      RUNS,
    );
  });

  it('phases are non-empty and each holds more devices than the previous, except a last phase that took what remained', () => {
    fc.assert(
      fc.property(inputArb, (input) => {
        const sizes = planPhases(input).phases.map((p) => p.devices.length);
        sizes.forEach((s, i) => {
          expect(s).toBeGreaterThan(0);
          if (i > 0 && i < sizes.length - 1) expect(s).toBeGreaterThan(sizes[i - 1]!);
        });
        if (input.risk === 'safe') expect(sizes.length).toBeLessThanOrEqual(1);
      }),
      RUNS,
    );
  });

  it('pool budgets are max(1, floor(size × budget)) and within the pool', () => {
    fc.assert(
      fc.property(inputArb, (input) => {
        const plan = planPhases(input);
        for (const pool of plan.pools) {
          const size = input.devices.filter((d) => d.pool === pool.pool).length;
          const budget = input.spec.disruptionBudget[pool.pool] ?? input.pools?.[pool.pool]?.disruptionBudget ?? 0.05;
          expect(pool.size).toBe(size);
          expect(pool.budget).toBe(budget);
          expect(pool.maxInFlight).toBe(Math.max(1, Math.floor(size * budget + 1e-9)));
          expect(pool.maxInFlight).toBeGreaterThanOrEqual(1);
          expect(pool.maxInFlight).toBeLessThanOrEqual(Math.max(1, size));
        }
      }),
      RUNS,
    );
  });

  it('canaries come from the canary class; the second phase brings another class when one remains; concurrent gives two', () => {
    fc.assert(
      fc.property(inputArb, (input) => {
        const plan = planPhases(input);
        const first = plan.phases[0];
        if (first?.kind !== 'canary') return;
        const byId = new Map(input.devices.map((d) => [d.id, d]));
        const candidates = input.devices.filter((d) => classifyDevice(plan, d.id).status === 'planned');
        const required = candidates.filter((d) => d.updateClass === 'required');
        const pool = required.length ? required : candidates;
        const counts = new Map<string, number>();
        for (const d of pool) counts.set(d.class, (counts.get(d.class) ?? 0) + 1);
        const top = Math.max(...counts.values());
        const expectedClass =
          input.spec.canaryClass && candidates.some((d) => d.class === input.spec.canaryClass)
            ? input.spec.canaryClass
            : [...counts]
                .filter(([, n]) => n === top)
                .map(([c]) => c)
                .sort()[0];
        expect(plan.canaryClass).toBe(expectedClass);
        const ofClass = candidates.filter((d) => d.class === expectedClass).length;
        const canaryClasses = first.devices.map((id) => byId.get(id)!.class);
        if (ofClass >= first.devices.length) expect(canaryClasses.every((c) => c === expectedClass)).toBe(true);
        if (input.spec.concurrent && candidates.length >= 2) expect(first.devices.length).toBeGreaterThanOrEqual(2);
        const second = plan.phases[1];
        const inFirst = new Set(canaryClasses);
        const laterOther = plan.phases
          .slice(1)
          .flatMap((p) => p.devices)
          .some((id) => !inFirst.has(byId.get(id)!.class));
        if (second && laterOther) expect(second.devices.some((id) => !inFirst.has(byId.get(id)!.class))).toBe(true);
      }),
      RUNS,
    );
  });

  it('is a function of the rollout id and the snapshot, not of the input order', () => {
    fc.assert(
      fc.property(inputArb, fc.integer(), (input, salt) => {
        const plan = planPhases(input);
        expect(planPhases(input)).toEqual(plan);
        const reordered = input.devices
          .map((d, i) => ({ d, k: (i * 7919 + salt) % 1009 }))
          .sort((a, b) => a.k - b.k)
          .map((x) => x.d);
        expect(planPhases({ ...input, devices: reordered })).toEqual(plan);
      }),
      { numRuns: 150 },
    );
  });
});

describe('planner at scale', () => {
  it('plans 10,000 devices quickly and compactly', () => {
    const devices: PlanDevice[] = Array.from({ length: 10_000 }, (_, i) => ({
      id: `dev-${String(i).padStart(5, '0')}`,
      pool: `pool-${i % 7}`,
      class: i % 5 === 0 ? 'desktop' : 'server',
      os: i % 3 === 0 ? 'rhel-9' : 'ubuntu-22.04',
      updateClass: i % 97 === 0 ? 'left-behind' : 'required',
      current: i % 50 === 0 ? 2 : 1,
    }));
    const started = performance.now();
    const plan = planPhases({
      rolloutId: 'rollout:big',
      spec: spec([
        { canary: '1 device' },
        { bulk: 'up to 1%' },
        { bulk: 'up to 10%' },
        { bulk: 'up to 50%' },
        { bulk: 'remainder' },
      ]),
      devices,
    });
    const ms = performance.now() - started;
    expect(ms).toBeLessThan(2_000);
    expect(plan.phases.map((p) => p.devices.length)).toEqual([1, 99, 900, 4000, plan.phases[4]!.devices.length]);
    const planned = plan.phases.reduce((n, p) => n + p.devices.length, 0);
    expect(planned + plan.alreadyApplied.length + plan.notForMe.length).toBe(10_000);
    // ids + a little structure: well under the ~2 MB payload limit.
    expect(JSON.stringify(plan).length).toBeLessThan(400_000);
  });
});
