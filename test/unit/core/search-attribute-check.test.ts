import { describe, expect, it } from 'vitest';
import {
  addCommands,
  checkSearchAttributes,
  classifyProbeAnswer,
  describeSearchAttributeProblem,
  indexedValueTypeOf,
  isTemporalCloudAddress,
  probeQuery,
  searchAttributeNamedIn,
  type NeededAttribute,
} from '../../../core/search-attribute-check';
import { WAVEGATE_SEARCH_ATTRIBUTES } from '../../../contracts/search-attributes';

const NEEDED: NeededAttribute[] = [
  { name: 'WavegateProfile', type: 'KEYWORD' },
  { name: 'WavegateRevision', type: 'INT' },
  { name: 'WavegateState', type: 'KEYWORD' },
];
// temporal.api.enums.v1.IndexedValueType
const KEYWORD = 2;
const INT = 3;
const SELF_HOSTED = { namespace: 'default', address: '127.0.0.1:7233' };
const CLOUD = { namespace: 'wavegate.a1b2c', address: 'wavegate.a1b2c.tmprl.cloud:7233' };

describe('which search attributes a namespace lacks', () => {
  it('finds the missing ones and the ones registered with another type, ignoring unrelated custom attributes', () => {
    const check = checkSearchAttributes(NEEDED, { WavegateProfile: KEYWORD, WavegateRevision: KEYWORD, Other: INT });
    expect(check.missing.map((a) => a.name)).toEqual(['WavegateState']);
    expect(check.mismatched).toEqual([{ name: 'WavegateRevision', needed: 'INT', registered: 'KEYWORD' }]);
  });

  it('is satisfied by exactly the needed names and types', () => {
    expect(
      checkSearchAttributes(NEEDED, { WavegateProfile: KEYWORD, WavegateRevision: INT, WavegateState: KEYWORD }),
    ).toEqual({ missing: [], mismatched: [] });
  });

  it('reports an enum number it does not know as a mismatch, not as a match', () => {
    expect(checkSearchAttributes([NEEDED[0]!], { WavegateProfile: 99 }).mismatched).toEqual([
      { name: 'WavegateProfile', needed: 'KEYWORD', registered: 'UNKNOWN' },
    ]);
  });

  it('covers every attribute contracts/search-attributes.ts lists (its types map to the operator API enum)', () => {
    for (const key of WAVEGATE_SEARCH_ATTRIBUTES) expect(indexedValueTypeOf(key.type), key.name).toBeGreaterThan(0);
    const none = checkSearchAttributes(WAVEGATE_SEARCH_ATTRIBUTES, {});
    expect(none.missing.map((a) => a.name)).toEqual(WAVEGATE_SEARCH_ATTRIBUTES.map((k) => k.name));
  });
});

describe('the commands that add them', () => {
  it('self-hosted: one `temporal operator search-attribute create` per attribute, with address, namespace and type', () => {
    expect(addCommands(NEEDED.slice(0, 2), SELF_HOSTED)).toEqual([
      'temporal operator search-attribute create --address 127.0.0.1:7233 --namespace default --name WavegateProfile --type Keyword',
      'temporal operator search-attribute create --address 127.0.0.1:7233 --namespace default --name WavegateRevision --type Int',
    ]);
  });

  it('Temporal Cloud (tmprl.cloud or api.temporal.io): one tcld command with every attribute', () => {
    expect(isTemporalCloudAddress('us-east-1.aws.api.temporal.io:7233')).toBe(true);
    expect(isTemporalCloudAddress('temporal.internal:7233')).toBe(false);
    expect(addCommands(NEEDED.slice(0, 2), CLOUD)).toEqual([
      'tcld namespace search-attributes add --namespace wavegate.a1b2c --search-attribute WavegateProfile=Keyword --search-attribute WavegateRevision=Int',
    ]);
  });

  it('quotes a namespace a shell would split', () => {
    expect(addCommands([NEEDED[0]!], { namespace: 'my ns', address: 'h:7233' })[0]).toContain("--namespace 'my ns' ");
  });

  it('the message names each missing attribute with its type and command, and a wrong type with both types and the way out', () => {
    const message = describeSearchAttributeProblem(
      { missing: [NEEDED[0]!], mismatched: [{ name: 'WavegateRevision', needed: 'INT', registered: 'KEYWORD' }] },
      SELF_HOSTED,
      { preface: 'worker not started', reason: 'adding them was refused: PERMISSION_DENIED: no' },
    );
    expect(message).toMatch(
      /^worker not started: namespace "default" on 127\.0\.0\.1:7233 .*\(adding them was refused: PERMISSION_DENIED: no\); nothing was started\./,
    );
    expect(message).toContain('missing: WavegateProfile (Keyword)');
    expect(message).toContain(
      '  temporal operator search-attribute create --address 127.0.0.1:7233 --namespace default --name WavegateProfile --type Keyword',
    );
    expect(message).toContain('wrong type: WavegateRevision is registered as Keyword, wavegate needs Int');
    expect(message).toContain(
      'temporal operator search-attribute remove --address 127.0.0.1:7233 --namespace default --name WavegateRevision',
    );
    const cloud = describeSearchAttributeProblem({ missing: [NEEDED[0]!], mismatched: [] }, CLOUD);
    expect(cloud).toContain(
      'tcld namespace search-attributes add --namespace wavegate.a1b2c --search-attribute WavegateProfile=Keyword',
    );
    expect(cloud).not.toContain('temporal operator');
  });
});

describe('reading the server', () => {
  it('a probe query holds a value of the needed type', () => {
    expect(probeQuery({ name: 'WavegateRevision', type: 'INT' })).toBe('WavegateRevision = 0');
    expect(probeQuery({ name: 'WavegateProfile', type: 'KEYWORD' })).toBe("WavegateProfile = ''");
  });

  it("classifies the server's answers to a probe (texts as a SQL-visibility server gives them)", () => {
    const rev = { name: 'WavegateRevision', type: 'INT' } as const;
    expect(classifyProbeAnswer(rev, undefined)).toEqual({ kind: 'present' });
    expect(classifyProbeAnswer(rev, 'invalid query: invalid search attribute: WavegateRevision')).toEqual({
      kind: 'missing',
    });
    expect(
      classifyProbeAnswer(
        rev,
        'invalid query: invalid expression: invalid value type for search attribute WavegateRevision of type Keyword: 0 (type: int64)',
      ),
    ).toEqual({ kind: 'mismatched', registered: 'KEYWORD' });
    expect(classifyProbeAnswer(rev, 'Request unauthorized.')).toEqual({ kind: 'unknown' });
  });

  it('finds which needed attribute a refusal is about, and only a needed one', () => {
    const names = NEEDED.map((a) => a.name);
    expect(
      searchAttributeNamedIn(
        'Failed to list workflows: invalid query: invalid search attribute: WavegateProfile',
        names,
      ),
    ).toBe('WavegateProfile');
    expect(
      searchAttributeNamedIn(
        'Failed to start Workflow: Namespace default has no mapping defined for search attribute WavegateState',
        names,
      ),
    ).toBe('WavegateState');
    expect(searchAttributeNamedIn('WavegateRevision is not a valid search attribute', names)).toBe('WavegateRevision');
    expect(searchAttributeNamedIn('invalid search attribute: CustomerId', names)).toBeUndefined();
    expect(searchAttributeNamedIn('Failed to list workflows: WavegateProfile deadline', names)).toBeUndefined();
    expect(searchAttributeNamedIn('invalid search attribute: WavegateProfileX', names)).toBeUndefined();
  });
});
