import { describe, expect, it } from 'vitest';
import {
  mergeSeen,
  newPresenceState,
  PRESENCE_LIMITS,
  PRESENCE_SHARDS,
  presenceBatches,
  presenceBatchProblem,
  presenceQueryProblem,
  presenceShardOf,
  presenceWorkflowId,
  pruneSeen,
  recordSeen,
  restorePresenceState,
  seenOf,
  type SeenEntry,
} from '../../core/presence';
import { devicesOfShard } from '../support/presence';

/**
 * Presence shards (core/presence.ts): a device's shard is a stable, well spread hash of its id; a batch is
 * checked before it touches a shard (the problem names the field and the value); per device the later
 * entry stays; a week's silence drops a device; readers merge an entry into the twin's lastSeenAt.
 */
const at = (second: number) => new Date(Date.UTC(2026, 11, 1, 10, 0, second)).toISOString();
const entry = (second: number, digest = `d${second}`): SeenEntry => ({ at: at(second), digest });

describe('presence shards', () => {
  it('a device shard is stable (a fixed value for a fixed id) and 10,000 ids spread over all 32 shards', () => {
    // Pinned: a change of the hash would move every device to another shard (a gateway of the old build and
    // one of the new would write one device to two shards).
    expect(['edge-0001', 'edge-0002', 'a', 'device:x'].map(presenceShardOf)).toEqual([10, 25, 25, 18]);
    const counts = new Array<number>(PRESENCE_SHARDS).fill(0);
    for (let i = 0; i < 10_000; i++) counts[presenceShardOf(`edge-${String(i).padStart(5, '0')}`)]! += 1;
    expect(Math.min(...counts)).toBeGreaterThanOrEqual(200);
    expect(Math.max(...counts)).toBeLessThanOrEqual(450);
    for (let i = 0; i < 1_000; i++) {
      const shard = presenceShardOf(`host${i}.example.org`);
      expect(Number.isInteger(shard) && shard >= 0 && shard < PRESENCE_SHARDS).toBe(true);
    }
    expect(presenceWorkflowId(7)).toBe('presence:7');
  });

  it('refuses a malformed batch, naming the field and the value', () => {
    const [id] = devicesOfShard(3, 1, 'dev');
    const other = devicesOfShard(4, 1, 'dev')[0]!;
    const ok = { shard: 3, seen: { [id!]: entry(1) } };
    expect(presenceBatchProblem(ok)).toBeNull();
    expect(presenceBatchProblem(ok, 3)).toBeNull();
    expect(presenceBatchProblem(null)).toBe('presenceSeen: must be { shard, seen } (got null)');
    expect(presenceBatchProblem({ shard: 32, seen: {} })).toBe('presenceSeen: shard: must be an integer 0-31 (got 32)');
    expect(presenceBatchProblem({ shard: 1.5, seen: {} })).toBe(
      'presenceSeen: shard: must be an integer 0-31 (got 1.5)',
    );
    expect(presenceBatchProblem(ok, 4)).toBe('presenceSeen: shard: 3 sent to shard 4');
    expect(presenceBatchProblem({ shard: 3, seen: [] })).toBe(
      'presenceSeen: seen: must be an object of entries (got [])',
    );
    expect(presenceBatchProblem({ shard: 3, seen: { [id!]: { at: 'yesterday', digest: '' } } })).toBe(
      `presenceSeen: seen["${id}"].at: must be an ISO 8601 UTC time such as 2026-12-01T10:00:00.000Z (got "yesterday")`,
    );
    expect(presenceBatchProblem({ shard: 3, seen: { [id!]: { at: at(1), digest: 'x'.repeat(65) } } })).toMatch(
      new RegExp(`^presenceSeen: seen\\["${id}"\\]\\.digest: must be a string of at most 64 characters \\(got "xxx`),
    );
    expect(presenceBatchProblem({ shard: 3, seen: { [id!]: { at: at(1) } } })).toBe(
      `presenceSeen: seen["${id}"].digest: must be a string of at most 64 characters (got undefined)`,
    );
    expect(presenceBatchProblem({ shard: 3, seen: { [id!]: 'seen' } })).toBe(
      `presenceSeen: seen["${id}"]: must be { at, digest } (got "seen")`,
    );
    expect(presenceBatchProblem({ shard: 3, seen: { [other]: entry(1) } })).toBe(
      `presenceSeen: seen["${other}"]: the device is in shard 4, not 3`,
    );
    const long = 'x'.repeat(129);
    expect(presenceBatchProblem({ shard: presenceShardOf(long), seen: { [long]: entry(1) } })).toMatch(
      /^presenceSeen: seen: device id: must be 1-128 characters \(got "x{59}…\)$/,
    );
    // Parsed from JSON, as a payload is: "__proto__" is then an own key, and refused.
    const proto = JSON.parse(
      `{"shard": ${presenceShardOf('__proto__')}, "seen": {"__proto__": ${JSON.stringify(entry(1))}}}`,
    );
    expect(presenceBatchProblem(proto)).toBe('presenceSeen: seen: device id: "__proto__" is reserved');
    const many = Object.fromEntries(devicesOfShard(0, PRESENCE_LIMITS.batch + 1, 'dev').map((d) => [d, entry(1)]));
    expect(presenceBatchProblem({ shard: 0, seen: many })).toBe(
      'presenceSeen: seen: at most 10000 entries (got 10001)',
    );
    expect(presenceQueryProblem({ devices: ['a'] })).toBeNull();
    expect(presenceQueryProblem({ devices: 'a' })).toBe(
      'presenceOf: must be { devices: string[] } (got {"devices":"a"})',
    );
    expect(presenceQueryProblem({ devices: new Array(10_001).fill('a') })).toBe(
      'presenceOf: devices: at most 10000 names (got 10001)',
    );
  });

  it('recordSeen keeps the later entry per device; a later entry replaces the digest; a repeated batch changes nothing', () => {
    const [a, b] = devicesOfShard(5, 2, 'dev');
    const state = newPresenceState(5);
    expect(recordSeen(state, { shard: 5, seen: { [a!]: entry(10, 'x'), [b!]: entry(10, 'x') } })).toBe(2);
    expect(recordSeen(state, { shard: 5, seen: { [a!]: entry(20, 'y'), [b!]: entry(5, 'old') } })).toBe(1);
    expect(state.seen).toEqual({ [a!]: entry(20, 'y'), [b!]: entry(10, 'x') });
    expect(recordSeen(state, { shard: 5, seen: { [a!]: entry(20, 'y') } })).toBe(0);
    // A tie keeps what the shard holds (a retried batch, or two gateways in the same millisecond).
    expect(recordSeen(state, { shard: 5, seen: { [a!]: entry(20, 'z') } })).toBe(0);
    expect(state.seen[a!]!.digest).toBe('y');
    expect(seenOf(state, [a!, 'not-held', 'constructor', '__proto__'])).toEqual({ [a!]: entry(20, 'y') });
  });

  it('pruneSeen drops devices not seen for a week, keeps the rest', () => {
    const [fresh, stale, edge] = devicesOfShard(9, 3, 'dev');
    const now = Date.UTC(2026, 11, 10);
    const iso = (ms: number) => new Date(ms).toISOString();
    const week = 7 * 24 * 3600 * 1000;
    const state = newPresenceState(9);
    recordSeen(state, {
      shard: 9,
      seen: {
        [fresh!]: { at: iso(now - 1000), digest: '' },
        [stale!]: { at: iso(now - week - 1), digest: '' },
        [edge!]: { at: iso(now - week), digest: '' },
      },
    });
    expect(pruneSeen(state, iso(now))).toBe(1);
    expect(Object.keys(state.seen).sort()).toEqual([fresh!, edge!].sort());
    expect(pruneSeen(state, iso(now), 500)).toBe(2);
    expect(Object.keys(state.seen)).toEqual([]);
  });

  it('restores a carried state of its own shard only', () => {
    const carried = { shard: 2, seen: { [devicesOfShard(2, 1, 'dev')[0]!]: entry(1) } };
    expect(restorePresenceState(2, carried)).toEqual(carried);
    expect(restorePresenceState(2, undefined)).toEqual({ shard: 2, seen: {} });
    expect(() => restorePresenceState(3, carried)).toThrow('presence:3: carried state is of shard 2');
  });

  it('mergeSeen takes the later of the twin view time and the presence entry', () => {
    expect(mergeSeen(null, undefined)).toBeNull();
    expect(mergeSeen(at(5), undefined)).toBe(at(5));
    expect(mergeSeen(null, entry(5))).toBe(at(5));
    expect(mergeSeen(at(5), entry(9))).toBe(at(9));
    expect(mergeSeen(at(9), entry(5))).toBe(at(9));
    // Millisecond precision from another clock sorts by time, not by text.
    expect(mergeSeen('2026-12-01T10:00:05Z', { at: '2026-12-01T10:00:05.500Z', digest: '' })).toBe(
      '2026-12-01T10:00:05.500Z',
    );
  });

  it('presenceBatches groups by shard, splits a shard over the batch limit, refuses malformed entries', () => {
    const seen = new Map<string, SeenEntry>();
    for (const id of devicesOfShard(1, PRESENCE_LIMITS.batch + 5, 'dev')) seen.set(id, entry(1));
    for (const id of devicesOfShard(2, 3, 'dev')) seen.set(id, entry(2));
    seen.set('constructor', entry(1));
    seen.set(devicesOfShard(2, 4, 'dev')[3]!, { at: 'now', digest: '' });
    const { batches, refused } = presenceBatches(seen);
    expect(batches.map((b) => [b.shard, Object.keys(b.seen).length])).toEqual([
      [1, PRESENCE_LIMITS.batch],
      [1, 5],
      [2, 3],
    ]);
    for (const batch of batches) expect(presenceBatchProblem(batch)).toBeNull();
    expect(refused.map((r) => r.deviceId).sort()).toEqual(['constructor', devicesOfShard(2, 4, 'dev')[3]!].sort());
    expect(refused.find((r) => r.deviceId === 'constructor')!.problem).toBe('device id: "constructor" is reserved');
  });
});
