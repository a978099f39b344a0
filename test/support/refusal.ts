import { WavegateError } from '../../core/errors';

/** The error of `type` (default WavegateError) `fn` throws (any other error is rethrown; no error at all fails the test). */
export function refusal<E extends Error = WavegateError>(fn: () => unknown, type: abstract new (...args: never[]) => E = WavegateError as unknown as abstract new (...args: never[]) => E): E {
  try {
    fn();
  } catch (err) {
    if (err instanceof type) return err;
    throw err;
  }
  throw new Error('not refused');
}
