import fc from 'fast-check';
import { isDeepStrictEqual } from 'node:util';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { parseYamlInSlices, plainItems, slicedValue } from '../../../core/yaml-slices';

/** What parsing gave: the value (with its key order, which JSON shows), or the error's message. */
function outcome(read: () => unknown): { value?: unknown; json?: string; error?: string } {
  try {
    const value = read();
    return { value, json: JSON.stringify(value) };
  } catch (err) {
    return { error: (err as Error).message };
  }
}

/** Sliced (with slices of `sliceBytes`, small enough to cut a small document) and whole, the same. */
function expectSame(text: string, sliceBytes: number): void {
  const whole = outcome(() => parse(text));
  const sliced = outcome(() => parseYamlInSlices(text, sliceBytes));
  expect(sliced.error, text).toBe(whole.error);
  expect(sliced.json, text).toBe(whole.json);
  expect(isDeepStrictEqual(sliced.value, whole.value), text).toBe(true);
}

/** Plain, quoted and special scalars: numbers, booleans, nulls, hosts, text that needs quotes, and some that break things. */
const scalar = fc.oneof(
  { arbitrary: fc.stringMatching(/^[a-z][a-z0-9.-]{0,8}$/), weight: 20 },
  fc.constantFrom(
    'web-01',
    '10.0.1.11',
    '22',
    '0x1F',
    '1e3',
    'true',
    'False',
    'null',
    '~',
    'yes',
    '.inf',
    '-1',
    '0o17',
  ),
  fc.constantFrom(
    '"a: b"',
    "'it''s'",
    '"R&D *x !y"',
    '"#not a comment"',
    'a # comment',
    '[a, b]',
    '{ k: v }',
    '[]',
    '{}',
  ),
  fc.constantFrom('&anchor x', '*anchor', '!!str 5', '"unterminated', '[a,', '- x', 'a: b: c', '|', '>-'),
);

/** One sequence item's lines at `indent`: a mapping, a scalar, a nested list, a block scalar, a multi-line quoted string... */
function item(indent: string): fc.Arbitrary<string> {
  const inner = `${indent}  `;
  return fc.oneof(
    {
      weight: 40,
      arbitrary: fc
        .uniqueArray(fc.tuple(fc.constantFrom('id', 'host', 'pool', 'class', 'port', 'labels'), scalar), {
          minLength: 1,
          maxLength: 4,
          selector: ([key]) => key,
        })
        .map((pairs) => pairs.map(([k, v], i) => `${i === 0 ? `${indent}- ` : inner}${k}: ${v}`).join('\n')),
    },
    scalar.map((v) => `${indent}- ${v}`),
    fc.constant(`${indent}-\n${inner}id: on-next-line`),
    fc.constant(`${indent}- runtimes:\n${inner}  - a\n${inner}  - b`),
    fc.constant(`${indent}- - nested\n${inner}- list`),
    fc.constant(`${indent}- note: |\n${inner}  line one\n\n${inner}  line three`),
    fc.constant(`${indent}- note: |+\n${inner}  kept\n\n`),
    fc.constant(`${indent}- note: >\n${inner}  folded\n${inner}  text`),
    fc.constant(`${indent}- note: "multi\n${inner}  line"`),
    fc.constant(`${indent}- note: "broken\n${indent}- at the item's indent"`),
    fc.constant(`${indent}- flow: [a,\n${inner}  b]`),
    fc.constant(`${indent}- plain text\n${inner}continued`),
    fc.constant(`${indent}- id: x\n${indent}  host: at-two-more`),
    fc.constant(`${indent}- id: x\n${indent}pool: misplaced`),
    fc.constant(`${indent}# a comment between items`),
    fc.constant('# a comment in column 0'),
    fc.constant(''),
  );
}

const entry = fc.oneof(
  {
    weight: 3,
    arbitrary: fc.constantFrom(
      'pools:\n  web:\n    disruptionBudget: 10%',
      'defaults:\n  user: wavegate\n  port: 22',
      'name: x',
    ),
  },
  fc.constantFrom('# a comment', '', 'pools: {}', 'empty:', 'list: [1, 2]', 'devices: []'),
  fc.constantFrom('---', '%YAML 1.1\n---', 'on: yes', '? complex\n: key', 'key: value\r'),
  {
    weight: 6,
    arbitrary: fc
      .tuple(
        fc.constantFrom('devices', 'other', 'devices', 'markers'),
        fc.constantFrom('', '  ', '    '),
        fc.constantFrom('', ' # the fleet'),
      )
      .chain(([key, indent, comment]) =>
        fc
          .array(item(indent), { minLength: 0, maxLength: 12 })
          .map((items) => `${key}:${comment}\n${items.join('\n')}`),
      ),
  },
  fc
    .array(fc.tuple(fc.stringMatching(/^[a-z][a-z0-9-]{0,6}$/), fc.constantFrom('1', '2', 'x', '"3"')), {
      maxLength: 8,
    })
    .map((pairs) => pairs.map(([k, v]) => `${k}: ${v}`).join('\n')),
);

describe('core/yaml-slices: a large YAML document parsed in slices reads exactly as the whole', () => {
  it('randomized documents: the same value, key order and error as yaml.parse, whatever the slice size', () => {
    let slicedRuns = 0;
    fc.assert(
      fc.property(
        fc.uniqueArray(entry, { minLength: 1, maxLength: 8, selector: (e) => e.split(/[:\n]/)[0] }),
        fc.constantFrom(1, 16, 64, 256),
        (entries, size) => {
          const text = entries.join('\n');
          if (slicedValue(`${text}\n`, size)) slicedRuns++;
          expectSame(`${text}\n`, size);
          expectSame(text, size);
        },
      ),
      { numRuns: 1500, seed: 26 },
    );
    // The comparison means something only if many documents were in fact read in slices.
    expect(slicedRuns).toBeGreaterThan(300);
  });

  it('an inventory is read in slices (sequence items, and runs of root entries), for the same value', () => {
    const devices = Array.from(
      { length: 500 },
      (_, i) =>
        `  - id: dev-${i}\n    host: 10.0.${i >> 8}.${i & 255}\n    pool: pool-${i % 3}\n    port: ${22 + (i % 2)}`,
    );
    const markers = Array.from({ length: 500 }, (_, i) => `dev-${i}: ${i % 3}`);
    for (const text of [
      `# a fleet\npools:\n  pool-0: { disruptionBudget: 0.1 }\ndefaults:\n  user: wavegate\ndevices:\n${devices.join('\n')}\n`,
      `devices:\n${devices.map((d) => d.replace(/^ {2}/gm, '')).join('\n')}\nafter: 1\n`,
      `${markers.join('\n')}\n`,
    ]) {
      const sliced = slicedValue(text, 1024);
      expect(sliced, text.slice(0, 200)).toBeDefined();
      expect(JSON.stringify(sliced!.value)).toBe(JSON.stringify(parse(text)));
      expectSame(text, 1024);
    }
  });

  it('anything that ties one part to another, or changes how the whole reads, is parsed whole', () => {
    const devices = Array.from({ length: 50 }, (_, i) => `  - id: dev-${i}`).join('\n');
    for (const text of [
      `defaults: &d\n  user: x\ndevices:\n${devices}\n  - *d\n`,
      `devices:\n${devices}\n  - !!str 5\n`,
      `%YAML 1.1\n---\ndevices:\n${devices}\n  - yes\n`,
      `devices:\n${devices}\n---\nsecond: doc\n`,
      `devices:\n${devices.replace(/\n/g, '\r\n')}\n`,
      `devices:\n${devices}\ndevices:\n${devices}\n`,
      `devices:\n${devices}\n  - __proto__: x\n`,
      `devices:\n${devices}\n  - note: "broken\n  - at the item's indent"\n`,
    ]) {
      expect(slicedValue(text, 64), text.slice(-60)).toBeUndefined();
      expectSame(text, 64);
    }
  });

  it('a document below the slice size is parsed whole', () => {
    expect(parseYamlInSlices('a: 1\nb: [x]\n')).toEqual({ a: 1, b: ['x'] });
    expect(() => parseYamlInSlices('a: 1\na: 2\n')).toThrow(/unique/);
  });

  it('sequence items of plain key: value lines are read without the parser, for the value the parser gives', () => {
    const value = fc.oneof(
      { weight: 400, arbitrary: fc.stringMatching(/^[a-zA-Z][a-z0-9._/-]{0,8}$/) },
      { weight: 100, arbitrary: fc.constantFrom('22', '10.0.0.1', 'ubuntu-22.04', '0', '65535') },
      fc.stringMatching(/^[A-Za-z0-9._/:# -]{1,10}$/),
      fc.constantFrom(
        'true',
        'True',
        'TRUE',
        'tRUE',
        'false',
        'FALSE',
        'null',
        'NULL',
        'Null',
        'nULL',
        '~',
        'yes',
        'no',
      ),
      fc.constantFrom(
        '007',
        '0',
        '00',
        '08',
        '-1',
        '+1',
        '123456789',
        '1234567890',
        '0x1F',
        '0o17',
        '1e3',
        '1.5',
        '.5',
      ),
      fc.constantFrom('10.0.0.1', '1.2.3', '999.999.999.999', '1.2.3.4.5', 'ubuntu-22.04', 'a/b', 'nan', '.inf', 'inf'),
      fc.constantFrom(
        'a b',
        'a:b',
        'a: b',
        'a #b',
        '"q"',
        "'q'",
        '',
        ' lead',
        'trail ',
        'é',
        '-',
        '- x',
        '[a]',
        '{a: 1}',
      ),
    );
    const key = fc.oneof(
      { weight: 50, arbitrary: fc.constantFrom('id', 'host', 'pool', 'port', 'updateClass', 'a_b', '_x') },
      fc.constantFrom('9k', 'k-y', 'k y', 'k:'),
    );
    /** A `key: value` line, or a `key:` line with its own pairs below it (at the right depth, or not). */
    const entry = fc.oneof(
      {
        weight: 4,
        arbitrary: fc.tuple(key, value).map(([k, v]) => (pad: string) => [`${pad}${k}: ${v}`]),
      },
      fc
        .tuple(key, fc.array(fc.tuple(key, value), { maxLength: 3 }), fc.constantFrom('  ', '  ', '  ', ' ', '   '))
        .map(([k, pairs, deeper]) => (pad: string) => [
          `${pad}${k}:`,
          ...pairs.map(([sk, v]) => `${pad}${deeper}${sk}: ${v}`),
        ]),
    );
    const items = fc.array(
      fc.tuple(fc.array(entry, { minLength: 1, maxLength: 5 }), fc.constantFrom('', '', '', '    ')),
      { minLength: 1, maxLength: 6 },
    );
    let read = 0;
    let nestedRead = 0;
    fc.assert(
      fc.property(items, fc.constantFrom('  ', '   ', ' '), fc.boolean(), (list, indent, trailingNewline) => {
        const lines = list.flatMap(([entries, extra]) =>
          entries.flatMap((linesOf, i) =>
            linesOf(`${indent}${i === 0 ? '- ' : `  ${extra.length === 4 && i === 1 ? ' ' : ''}`}`),
          ),
        );
        const source = `${lines.join('\n')}${trailingNewline ? '\n' : ''}`;
        const plain = plainItems(source);
        if (plain === undefined) return;
        read++;
        if (plain.some((item) => Object.values(item).some((v) => typeof v === 'object'))) nestedRead++;
        expect(JSON.stringify(plain), source).toBe(JSON.stringify(parse(source)));
        expect(plain, source).toEqual(parse(source));
      }),
      { numRuns: 3000, seed: 27 },
    );
    // The comparison means something only if many were read without the parser.
    expect(read).toBeGreaterThan(200);
    expect(nestedRead).toBeGreaterThan(20);
    // A line of another shape, another indent, or a repeated key: the parser reads it.
    expect(plainItems('  - id: a\n    labels:\n      env: x\n')).toEqual([{ id: 'a', labels: { env: 'x' } }]);
    expect(plainItems('  - id: a\n    labels:\n    pool: b\n')).toBeUndefined();
    expect(plainItems('  - id: a\n    labels:\n       env: x\n')).toBeUndefined();
    expect(plainItems('  - id: a\n    runtimes:\n      - motd\n')).toBeUndefined();
    expect(plainItems('  - id: a\n   host: b\n')).toBeUndefined();
    expect(plainItems('  - id: a\n    id: b\n')).toBeUndefined();
    expect(plainItems('  - id: a\n# comment\n')).toBeUndefined();
    expect(plainItems('  - id: a\n    port: 22\n  - id: b\n')).toEqual([{ id: 'a', port: 22 }, { id: 'b' }]);
  });
});
