import { WavegateError } from '../../core/errors';

/** The WavegateError `fn` throws (any other error is rethrown; no error at all fails the test). */
export function refusal(fn: () => unknown): WavegateError {
  try {
    fn();
  } catch (err) {
    if (err instanceof WavegateError) return err;
    throw err;
  }
  throw new Error('not refused');
}
