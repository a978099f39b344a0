import { describe, expect, it } from 'vitest';
import { WavegateError } from '../../core/errors';
import { refusal } from '../support/refusal';
import { metricsBindOf, parseMetricsBind } from '../../workers/metrics';

/** `--metrics-bind` / `WAVEGATE_METRICS_BIND`: host:port or a refusal naming the field and the value. */
describe('metrics bind address', () => {
  it('takes IPv4, [IPv6] and names with a port', () => {
    expect(parseMetricsBind('127.0.0.1:9464')).toBe('127.0.0.1:9464');
    expect(parseMetricsBind('0.0.0.0:1')).toBe('0.0.0.0:1');
    expect(parseMetricsBind('[::1]:9464')).toBe('[::1]:9464');
    expect(parseMetricsBind('localhost:65535')).toBe('localhost:65535');
  });

  it.each([
    ['localhost', 'expected host:port'],
    ['127.0.0.1:', 'expected host:port'],
    ['127.0.0.1:0', 'outside 1-65535'],
    ['127.0.0.1:70000', 'outside 1-65535'],
    ['[nothex]:9464', 'expected host:port'],
    ['[1.2.3.4]:9464', 'not an IPv6 address'],
    ['http://127.0.0.1:9464', 'expected host:port'],
    [`${'a'.repeat(300)}:1`, 'longer than 255'],
  ])('refuses %s (%s)', (value, why) => {
    const caught = refusal(() => parseMetricsBind(value));
    expect(caught).toBeInstanceOf(WavegateError);
    expect(caught.code).toBe('INVALID_INPUT');
    expect(caught.message).toContain('--metrics-bind "');
    expect((caught as WavegateError).message).toContain(why);
  });

  it('the flag wins over the environment; an empty variable is unset; the variable is named in its refusal', () => {
    expect(metricsBindOf('127.0.0.1:1', { WAVEGATE_METRICS_BIND: '127.0.0.1:2' })).toBe('127.0.0.1:1');
    expect(metricsBindOf(undefined, { WAVEGATE_METRICS_BIND: '127.0.0.1:2' })).toBe('127.0.0.1:2');
    expect(metricsBindOf(undefined, { WAVEGATE_METRICS_BIND: '' })).toBeUndefined();
    expect(metricsBindOf(undefined, {})).toBeUndefined();
    expect(() => metricsBindOf(undefined, { WAVEGATE_METRICS_BIND: 'nope' })).toThrow(/WAVEGATE_METRICS_BIND "nope"/);
  });
});
