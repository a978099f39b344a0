import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { documentProblems } from '../../../core/document-bounds';
import { parseInventory } from '../../../core/inventory';
import { planPhases, type PlanDevice, type PlanInput } from '../../../core/planner';
import { planRollout } from '../../../core/rollout/plan';
import { parseRolloutSpec, type RolloutSpec } from '../../../core/spec';
import { PROJECT_ROOT } from '../../../intake/package-layout';

/**
 * Issue 26 made reading and planning a 100,000-device fleet fast; workflow histories recorded before
 * replay only if every plan is what it was. What the functions as they were (the planner, parseInventory and
 * documentProblems of 00a78b0) gave on randomized fleets and documents (fixed seeds) is recorded in
 * test/fixtures/before-issue-26/outcomes.json, one digest per case: the current ones must give exactly the same
 * plans, inventories and errors — same phases, same device order, same warnings, same messages.
 */

const FIXTURE = join(PROJECT_ROOT, 'test/fixtures/before-issue-26/outcomes.json');

/** Characters of a digest: 36 bits of a text's SHA-256 (a changed outcome passes for the recorded one once in 2^36). */
const DIGEST_LENGTH = 6;

function digest(text: string): string {
  return createHash('sha256').update(text).digest('base64url').slice(0, DIGEST_LENGTH);
}

/**
 * One property's cases as recorded: what generated them, a digest of all its inputs, and a digest per outcome in the
 * order of the cases (written 16 to a row, each DIGEST_LENGTH characters).
 */
interface Recorded {
  /** The fast-check seed and number of runs (documentation: the inputs' digest is what is checked). */
  seed?: number;
  numRuns?: number;
  inputs: string;
  outcomes: string[];
}
const recorded: Record<string, Recorded> = JSON.parse(readFileSync(FIXTURE, 'utf8')).properties;

function recordedOutcomes(r: Recorded): string[] {
  return r.outcomes.join('').match(new RegExp(`.{${DIGEST_LENGTH}}`, 'g')) ?? [];
}

/**
 * Fields the inventory gained after 00a78b0 recorded: an unknown field's refusal lists the allowed ones, so today's
 * list names them too. They are left out of that list before comparing; every other word must still be as recorded.
 */
const FIELDS_ADDED_SINCE = ['receipts'];

/** What a call gave, as text: its value's JSON (key order too), or its error's code and message. */
function outcome(call: () => unknown): string {
  try {
    return `value ${JSON.stringify(call())}`;
  } catch (err) {
    const e = err as Error & { code?: string };
    const message = FIELDS_ADDED_SINCE.reduce(
      (text, field) => text.replace(new RegExp(`(allowed: [^\\n(]*?), ${field}\\b`, 'g'), '$1'),
      e.message,
    );
    return `error ${e.code ?? e.name}: ${message}`;
  }
}

/** The values a property of these arbitraries is run with at this seed: exactly what `fc.assert` hands it. */
function generated<Ts extends [unknown, ...unknown[]]>(
  arbitraries: { [K in keyof Ts]: fc.Arbitrary<Ts[K]> },
  seed: number,
  numRuns: number,
): Ts[] {
  const runs: Ts[] = [];
  fc.assert(
    fc.property(...arbitraries, (...values: Ts) => {
      runs.push(values);
    }),
    { seed, numRuns },
  );
  return runs;
}

/**
 * Today's outcome of every case against the one recorded under `name`. The inputs' digest first: if fast-check
 * generated other values, the comparison would say nothing (its version moved: see the fixture's note).
 */
function expectAsRecorded<T>(name: string, inputs: T[], now: (input: T) => unknown): string[] {
  const texts = inputs.map((input) => outcome(() => now(input)));
  const want = recorded[name]!;
  expect(digest(JSON.stringify(inputs)), `${name}: the generated inputs are the recorded ones`).toBe(want.inputs);
  const outcomes = recordedOutcomes(want);
  expect(texts).toHaveLength(outcomes.length);
  const differing = texts.flatMap((text, i) =>
    digest(text) === outcomes[i]
      ? []
      : [{ case: i, input: JSON.stringify(inputs[i]).slice(0, 400), now: text.slice(0, 400) }],
  );
  expect(
    differing.slice(0, 3),
    `${name}: ${differing.length} of ${texts.length} cases give other than 00a78b0 gave (the first 3 shown)`,
  ).toEqual([]);
  return texts;
}

/** Mostly `good`, sometimes `bad`. */
function mostly<T>(good: fc.Arbitrary<T>, bad: fc.Arbitrary<T>): fc.Arbitrary<T> {
  return fc.oneof({ weight: 60, arbitrary: good }, { weight: 1, arbitrary: bad });
}

const POOLS = ['web', 'office', 'edge', 'constructor', 'lab'];
const CLASSES = ['server', 'desktop', 'kiosk'];

const phaseSize = fc.oneof(
  fc.integer({ min: 1, max: 40 }).map((n) => `${n} device${n === 1 ? '' : 's'}`),
  fc.integer({ min: 1, max: 60 }).map((p) => `${p}%`),
  fc.constantFrom('0.5%', '12.5%'),
);

/** A spec the parser accepts (or undefined: the combination was refused, and the case is skipped). */
const specArb = fc
  .record({
    canary: fc.option(phaseSize, { nil: undefined }),
    bulks: fc.array(phaseSize, { maxLength: 3 }),
    cumulative: fc.option(fc.integer({ min: 30, max: 95 }), { nil: undefined }),
    remainder: fc.boolean(),
    toRevision: fc.integer({ min: 2, max: 4 }),
    concurrent: fc.boolean(),
    canaryClass: fc.option(fc.constantFrom(...CLASSES, 'absent-class'), { nil: undefined }),
    minSample: fc.option(fc.integer({ min: 1, max: 60 }), { nil: undefined }),
    budgets: fc.dictionary(fc.constantFrom(...POOLS), fc.constantFrom(0, 0.01, 0.1, 0.5, 1)),
  })
  .map((r): RolloutSpec | undefined => {
    const phases: unknown[] = [];
    if (r.canary) phases.push({ canary: r.canary, healthGate: ['all-runtimes-healthy'] });
    for (const b of r.bulks) phases.push({ bulk: b });
    if (r.cumulative !== undefined) phases.push({ bulk: `up to ${r.cumulative}%`, gateMs: 1000 });
    if (r.remainder || phases.length === 0) phases.push({ bulk: 'remainder' });
    try {
      return parseRolloutSpec(
        {
          rollout: {
            profile: 'p',
            fromRevision: r.toRevision - 1,
            toRevision: r.toRevision,
            phases,
            ...(r.concurrent ? { concurrent: true } : {}),
            ...(r.canaryClass && r.canary ? { canaryClass: r.canaryClass } : {}),
            ...(r.minSample !== undefined ? { minSample: r.minSample } : {}),
            ...(Object.keys(r.budgets).length ? { disruptionBudget: r.budgets } : {}),
          },
        },
        'spec.yaml',
      );
    } catch {
      return undefined;
    }
  });

const deviceArb = fc.record(
  {
    id: fc.integer({ min: 0, max: 400 }).map((n) => `d-${n}`),
    pool: fc.constantFrom(...POOLS),
    class: fc.constantFrom(...CLASSES),
    os: fc.option(fc.constantFrom('ubuntu', 'debian'), { nil: undefined }),
    updateClass: fc.constantFrom('required', 'required', 'best-effort', 'left-behind'),
    current: fc.option(fc.constantFrom(null, 0, 1, 2, 3, 4, 5), { nil: undefined }),
    reachable: fc.option(fc.boolean(), { nil: undefined }),
    nodeDown: fc.oneof(
      { weight: 20, arbitrary: fc.constant(undefined) },
      {
        weight: 1,
        arbitrary: fc.record({
          holds: fc.boolean(),
          text: fc.constantFrom('node-down since yesterday', 'lifted by its recheck'),
        }),
      },
    ),
  },
  { requiredKeys: ['id', 'pool', 'class', 'updateClass'] },
) as fc.Arbitrary<PlanDevice>;

const planInputArb = fc
  .record({
    spec: specArb,
    devices: fc.oneof(
      fc.array(deviceArb, { minLength: 0, maxLength: 12 }),
      fc.array(deviceArb, { minLength: 30, maxLength: 300 }),
    ),
    rolloutId: fc.constantFrom('rollout:demo', 'rollout:p:1', 'r'),
    seedId: fc.option(fc.constantFrom('seed-a', 'seed-b'), { nil: undefined }),
    pools: fc.option(
      fc.dictionary(
        fc.constantFrom(...POOLS),
        fc.record(
          { disruptionBudget: fc.constantFrom(0, 0.05, 0.3), size: fc.integer({ min: 1, max: 50 }) },
          {
            requiredKeys: [],
          },
        ),
      ),
      { nil: undefined },
    ),
    risk: fc.option(fc.constantFrom('risky' as const, 'safe' as const), { nil: undefined }),
    reverting: fc.boolean(),
  })
  .filter((r) => r.spec !== undefined)
  .map(
    (r): PlanInput => ({
      rolloutId: r.rolloutId,
      ...(r.seedId !== undefined ? { seedId: r.seedId } : {}),
      spec: r.spec!,
      devices: r.devices,
      ...(r.pools !== undefined ? { pools: r.pools } : {}),
      ...(r.risk !== undefined ? { risk: r.risk } : {}),
      ...(r.reverting ? { revertingFrom: r.spec!.toRevision + 1 } : {}),
    }),
  );

describe('issue 26: the planner plans exactly as before', () => {
  it('randomized fleets (pools, budgets, canaries, percentages, markers, offline, node-down, left-behind, duplicates): the same plan', () => {
    const inputs = generated<[PlanInput]>([planInputArb], 2026, 600).map(([input]) => input);
    const texts = expectAsRecorded('planPhases', inputs, (input) => planPhases(input));
    // Plans of several phases, not only the degenerate ones.
    const phased = texts.filter((text) => text.startsWith('value ') && JSON.parse(text.slice(6)).phases.length >= 3);
    expect(phased.length).toBeGreaterThan(50);
  });

  it('the workflow path (planRollout over what the snapshot found) gives the plan of before', () => {
    const rollouts = generated<[PlanInput, boolean]>([planInputArb, fc.boolean()], 26, 200).map(([input, reverts]) => ({
      rollout: {
        rolloutId: input.rolloutId,
        ...(input.seedId !== undefined ? { planSeed: input.seedId } : {}),
        spec: input.spec as RolloutSpec,
        poolBudgets: Object.fromEntries(POOLS.map((p, i) => [p, [0.05, 0.1, 0, 1, 0.5][i]!])),
        risk: input.risk ?? ('risky' as const),
        ...(reverts ? { reverts: { rolloutId: 'rollout:p:0', runId: 'run' } } : {}),
      },
      devices: input.devices,
    }));
    expectAsRecorded('planRollout', rollouts, ({ rollout, devices }) => planRollout(rollout, devices));
  });

  it('a 20,000-device fleet in a scrambled order: the same plan', () => {
    const devices: PlanDevice[] = Array.from({ length: 20_000 }, (_, i) => {
      const n = (i * 7919) % 20_000;
      return {
        id: `dev-${String(n).padStart(6, '0')}`,
        pool: POOLS[n % POOLS.length]!,
        class: CLASSES[n % CLASSES.length]!,
        os: n % 2 ? 'ubuntu' : 'debian',
        updateClass: n % 10 === 7 ? 'best-effort' : n % 97 === 3 ? 'left-behind' : 'required',
        current: n % 50 === 1 ? 2 : n % 101 === 5 ? 3 : 1,
        reachable: n % 89 !== 0,
      };
    });
    const spec = parseRolloutSpec(
      {
        rollout: {
          profile: 'p',
          fromRevision: 1,
          toRevision: 2,
          phases: [{ canary: '2 devices' }, { bulk: '5%' }, { bulk: 'up to 40%' }, { bulk: 'remainder' }],
          concurrent: true,
        },
      },
      'spec.yaml',
    );
    const inputs: PlanInput[] = ['rollout:a', 'rollout:b'].map((rolloutId) => ({ rolloutId, spec, devices }));
    expectAsRecorded('planPhases 20,000', inputs, (input) => planPhases(input));
  });
});

/** An inventory document, valid or not: duplicate ids (by case too), missing hosts, agents and their keys, bad budgets, unknown fields. */
const inventoryDocArb = fc
  .record(
    {
      pools: fc.dictionary(
        mostly(fc.constantFrom(...POOLS), fc.constant('bad pool')),
        fc.record(
          { disruptionBudget: mostly(fc.constantFrom(0.1, '5%'), fc.constantFrom('150%', 2, 'x')) },
          {
            requiredKeys: [],
          },
        ),
      ),
      defaults: fc.record(
        {
          user: mostly(fc.constant('wavegate'), fc.constant('-bad')),
          pool: fc.constantFrom(...POOLS),
          port: mostly(fc.constantFrom(22, 2222), fc.constant(0)),
          labels: fc.constant({ env: 'prod' }),
          ssh: fc.constant({ key: '/keys/id' }),
        },
        { requiredKeys: ['user'] },
      ),
      devices: fc.array(
        fc.record(
          {
            id: fc.oneof(
              { weight: 200, arbitrary: fc.integer({ min: 0, max: 100_000 }).map((n) => `dev-${n}`) },
              { weight: 1, arbitrary: fc.integer({ min: 0, max: 3 }).map((n) => `DEV-${n}`) },
              { weight: 1, arbitrary: fc.constantFrom('', '-x', 'a b', 'dev-1') },
            ),
            host: mostly(fc.constantFrom('10.0.0.1', 'web.example'), fc.constant('-oProxyCommand=x')),
            pool: mostly(fc.constantFrom(...POOLS), fc.constant('')),
            class: mostly(fc.constantFrom(...CLASSES), fc.constant('bad class')),
            updateClass: mostly(fc.constantFrom('required', 'best-effort', 'left-behind'), fc.constant('sometimes')),
            ssh: mostly<unknown>(
              fc.constantFrom({ hostKey: `SHA256:${'c'.repeat(43)}` }, { agent: true }),
              fc.constant({ port: 1 }),
            ),
            runtimes: mostly<unknown>(fc.constantFrom(['motd'], ['a', 'b']), fc.constant(['bad runtime'])),
          },
          { requiredKeys: ['id', 'host'] },
        ),
        { minLength: 0, maxLength: 25 },
      ),
    },
    { requiredKeys: ['devices'] },
  )
  // Sometimes agent devices (with their keys, or not), a field no inventory has, or a top-level key no inventory has.
  .chain((doc) =>
    fc
      .constantFrom(
        'as is',
        'as is',
        'agents',
        'agent without key',
        'ssh with key',
        'same key',
        'unknown field',
        'unknown key',
      )
      .map((twist) => {
        const key = (i: number) => `ed25519:${String(i).padStart(43, 'A')}=`;
        const agents = (f: (d: (typeof doc.devices)[number], i: number) => object) => ({
          ...doc,
          devices: doc.devices.map((d, i) => (i % 3 === 0 ? f(d, i) : d)),
        });
        if (twist === 'agents') return agents((d, i) => ({ ...d, transport: 'agent', agentKey: key(i) }));
        if (twist === 'agent without key') return agents((d) => ({ ...d, transport: 'agent' }));
        if (twist === 'ssh with key') return agents((d, i) => ({ ...d, agentKey: key(i) }));
        if (twist === 'same key') return agents((d) => ({ ...d, transport: 'agent', agentKey: key(1) }));
        if (twist === 'unknown field' && doc.devices.length)
          return { ...doc, devices: [...doc.devices, { id: 'x-1', host: 'h', extra: 1 }] };
        if (twist === 'unknown key') return { ...doc, unknown: true };
        return doc;
      }),
  );

describe('issue 26: an inventory reads as before, device by device', () => {
  it('randomized documents: the same inventory, or the same error naming the same fields in the same order', () => {
    const docs = generated<[unknown]>([inventoryDocArb], 126, 1500).map(([doc]) => doc);
    const texts = expectAsRecorded('parseInventory', docs, (doc) => parseInventory(doc, 'fleet.yaml'));
    // Both sides of the comparison: accepted documents and refused ones.
    const valid = texts.filter((text) => text.startsWith('value ')).length;
    expect(valid).toBeGreaterThan(30);
    expect(valid).toBeLessThan(docs.length);
  });

  it('what is not an inventory at all is refused as before', () => {
    const big = Array.from({ length: 100_001 }, (_, i) => ({ id: `d-${i}`, host: 'h', user: 'u', pool: 'p' }));
    const docs = [null, 3, 'text', [], {}, { devices: [] }, { devices: {} }, { devices: big }, { devices: [null] }];
    expectAsRecorded('parseInventory refused', docs, (doc) => parseInventory(doc, 'x.yaml'));
  });
});

describe('issue 26: a document shape check finds the same problems as before', () => {
  it('randomized documents, with reserved keys and nesting past the limit: the same problems, paths and order', () => {
    const withProto = (value: unknown) => JSON.parse(`{"__proto__": ${JSON.stringify(value)}, "a": 1}`);
    const deep = (levels: number): unknown => {
      let v: unknown = 'x';
      for (let i = 0; i < levels; i++) v = i % 2 ? [v] : { k: v };
      return v;
    };
    const value = fc.letrec((tie) => ({
      node: fc.oneof(
        { depthSize: 'small', withCrossShrink: true },
        fc.constantFrom(1, 'x', null, true),
        fc.array(tie('node'), { maxLength: 4 }),
        fc.dictionary(fc.constantFrom('a', 'b', 'c'), tie('node'), { maxKeys: 3 }),
        tie('node').map(withProto),
        fc.integer({ min: 1, max: 12 }).map(deep),
      ),
    })).node;
    expectAsRecorded(
      'documentProblems',
      generated<[unknown, number]>([value, fc.integer({ min: 1, max: 8 })], 260, 1500),
      ([doc, maxDepth]) => documentProblems(doc, maxDepth),
    );
    const tooDeep = deep(200);
    expectAsRecorded('documentProblems 200 levels', [tooDeep], (doc) => documentProblems(doc));
    expect(documentProblems(tooDeep)).toHaveLength(1);
  });
});
