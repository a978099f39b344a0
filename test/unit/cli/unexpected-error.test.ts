import { describe, expect, it } from 'vitest';
import { unexpectedErrorText } from '../../../cli/run';

describe('an unexpected error shown to a user', () => {
  const err = new TypeError('Cannot read properties of undefined (reading "x")');

  it('is its message, with no stack trace, and says how to get the details', () => {
    const text = unexpectedErrorText(err, {});
    expect(text).toContain('TypeError: Cannot read properties of undefined');
    expect(text).toContain('WAVEGATE_DEBUG=1');
    expect(text).not.toMatch(/\n\s+at /);
  });

  it('is the stack with WAVEGATE_DEBUG=1, for a bug report', () => {
    expect(unexpectedErrorText(err, { WAVEGATE_DEBUG: '1' })).toMatch(/\n\s+at /);
  });

  it('bounds a huge message', () => {
    expect(unexpectedErrorText(new Error('x'.repeat(100_000)), {}).length).toBeLessThan(2200);
  });
});
