import { describe, expect, it } from 'vitest';
import {
  checkIdempotencyKey,
  isLegacyRolloutId,
  legacyRolloutId,
  newRolloutId,
  profileLockId,
} from '../../../core/rollout-id';

describe('rollout ids (issue 23)', () => {
  it('a new id is the profile and the UTC second, with -<n> for a second taken; ids sort by start time', () => {
    const at = new Date('2026-12-02T17:23:01.987Z');
    expect(newRolloutId('demo', at)).toBe('rollout:demo:20261202-172301');
    expect(newRolloutId('demo', at, 2)).toBe('rollout:demo:20261202-172301-2');
    const later = [
      new Date('2026-12-02T17:23:02Z'),
      new Date('2026-12-03T00:00:00Z'),
      new Date('2027-01-01T09:00:00Z'),
    ].map((d) => newRolloutId('demo', d));
    expect([...later].reverse().sort()).toEqual(later);
    expect(newRolloutId('demo', at) < later[0]!).toBe(true);
    // Safe in a URL path segment once encoded, and free of characters an audit file name percent-encodes besides ':'.
    expect(newRolloutId('edge-fleet_2', at)).toMatch(/^rollout:edge-fleet_2:\d{8}-\d{6}$/);
  });

  it('tells the re-used id of before (rollout:<profile>) from a new one and from a converge; names the lock', () => {
    expect(legacyRolloutId('demo')).toBe('rollout:demo');
    expect(isLegacyRolloutId('rollout:demo')).toBe(true);
    expect(isLegacyRolloutId('rollout:demo:20261202-172301')).toBe(false);
    expect(isLegacyRolloutId('rollout:demo:converge-1')).toBe(false);
    expect(isLegacyRolloutId('canary:demo:nightly')).toBe(false);
    expect(profileLockId('demo')).toBe('profile-lock:demo');
  });

  it('an idempotency key is refused (INVALID_INPUT naming --key and the value) unless it can be searched for verbatim', () => {
    for (const ok of ['change-4711', 'JIRA/OPS-12', 'a', 'k'.repeat(200), 'deploy@2026-12-02T17:23Z'])
      expect(checkIdempotencyKey(ok)).toBe(ok);
    for (const bad of [
      '',
      'with space',
      "it's",
      'say "hi"',
      'back\\slash',
      'tick`',
      'k'.repeat(201),
      'tab\there',
      'ünïcode',
    ]) {
      expect(() => checkIdempotencyKey(bad), bad).toThrow(
        expect.objectContaining({ code: 'INVALID_INPUT', details: { field: '--key', value: bad } }),
      );
    }
    expect(() => checkIdempotencyKey("it's")).toThrow(
      `--key "it's": an idempotency key is 1-200 printable ASCII characters without spaces, quotes or backslash`,
    );
  });
});
