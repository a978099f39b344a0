import { WavegateError } from '../../core/errors';

type ErrorClass<E extends Error> = abstract new (...args: never[]) => E;

/** The error of `type` (default WavegateError) `fn` throws (any other error is rethrown; no error at all fails the test). */
export function refusal<E extends Error = WavegateError>(
  fn: () => unknown,
  type: ErrorClass<E> = WavegateError as unknown as ErrorClass<E>,
): E {
  try {
    fn();
  } catch (err) {
    if (err instanceof type) return err;
    throw err;
  }
  throw new Error('not refused');
}

/** The error of `type` (default WavegateError) `promise` rejects with (any other error is rethrown; fulfilling fails the test). */
export async function rejection<E extends Error = WavegateError>(
  promise: Promise<unknown>,
  type: ErrorClass<E> = WavegateError as unknown as ErrorClass<E>,
): Promise<E> {
  let value: unknown;
  try {
    value = await promise;
  } catch (err) {
    if (err instanceof type) return err;
    throw err;
  }
  throw new Error(`not refused: fulfilled with ${JSON.stringify(value)?.slice(0, 200)}`);
}
