import { describe, expect, it } from 'vitest';
import { parseProfile } from '../../../core/revision';
import { parseRolloutSpec } from '../../../core/spec';
import { showValue, formatPath } from '../../../core/validation';
import { refusal } from '../../support/refusal';

/** The message of the WavegateError `fn` throws. */
const refusalMessage = (fn: () => unknown): string => refusal(fn).message;

const spec = (extra: Record<string, unknown>) => () =>
  parseRolloutSpec(
    {
      rollout: {
        profile: 'p',
        fromRevision: 1,
        toRevision: 2,
        phases: [{ canary: '1 device' }, { bulk: 'remainder' }],
        ...extra,
      },
    },
    'spec.yaml',
  );

describe('error messages show the real value', () => {
  it('NaN and Infinity are shown as themselves, not as null', () => {
    expect(showValue(NaN)).toBe('NaN');
    expect(showValue([Infinity, -Infinity])).toBe('[Infinity,-Infinity]');
    expect(refusalMessage(spec({ maxFailureRatio: NaN }))).toContain(
      'rollout.maxFailureRatio: Invalid input: expected number, received NaN (got NaN)',
    );
    expect(refusalMessage(spec({ gate: Infinity }))).toContain('(got Infinity)');
  });

  it('invisible characters in values and keys are escaped', () => {
    expect(showValue('web\u200b')).toBe('"web\\u200b"');
    expect(showValue('a\u202eb\u00a0c')).toBe('"a\\u202eb\\u00a0c"');
    expect(formatPath(['rollout', 'disruptionBudget', 'web\u200b'])).toBe('rollout.disruptionBudget["web\\u200b"]');
    expect(refusalMessage(spec({ phases: [{ canary: '1 device', name: 'canary\u2028' }] }))).toContain(
      'rollout.phases[0].name: must be one line of visible text',
    );
  });

  it('a value too deep or too big to print is shown bounded instead of overflowing the stack', () => {
    let deep: unknown = 1;
    for (let i = 0; i < 100_000; i++) deep = [deep];
    expect(showValue(deep)).toBe('[[[[...]]]]');
    expect(showValue(Array.from({ length: 100_000 }, (_, i) => i))).toBe('[0,1,2,3,4,5,6,7,8,9,...]');
  });

  it('a union field keeps a specific message: its own rule, or the alternative the value came closest to', () => {
    expect(refusalMessage(spec({ gate: true }))).toContain(
      'rollout.gate: must be "manual" or a duration such as 600000 (ms), "90s", "10m" or "1h" (got true)',
    );
    expect(refusalMessage(spec({ gate: 1e300 }))).toContain('rollout.gate: must be between 0ms and 30d (got 1e+300)');
    expect(refusalMessage(spec({ disruptionBudget: { web: true } }))).toContain(
      'rollout.disruptionBudget.web: must be a fraction 0-1 or a percentage like "5%" (got true)',
    );
    expect(
      refusalMessage(() => parseProfile({ name: 'p', metrics: { errorRate: { http: 3 } } }, 'profile.yaml')),
    ).toContain('metrics.errorRate.http: Invalid input: expected string, received number (got 3)');
    expect(refusalMessage(spec({ disruptionBudget: { constructor: 0.5 } }))).toContain(
      'rollout.disruptionBudget.constructor: is a reserved name',
    );
  });
});
