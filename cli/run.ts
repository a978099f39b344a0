import { WavegateError, isRefusal } from '../core/errors';

/** Exit codes everywhere: 0 success; 1 it ran and found failure or pending work; 2 refused. */
export const EXIT_OK = 0;
export const EXIT_FAILED = 1;
export const EXIT_REFUSED = 2;

/**
 * Wrap a command action: a WavegateError prints its message and exits 2 when it is a refusal (bad input,
 * invalid state, conflict, not found) or 1 otherwise. The action returns the exit code it wants.
 */
export function action<A extends unknown[]>(fn: (...args: A) => Promise<number | void> | number | void) {
  return async (...args: A): Promise<void> => {
    try {
      const code = await fn(...args);
      process.exitCode = code ?? EXIT_OK;
    } catch (err) {
      if (err instanceof WavegateError) {
        process.stderr.write(`wavegate: ${err.code}: ${err.message}\n`);
        process.exitCode = isRefusal(err.code) ? EXIT_REFUSED : EXIT_FAILED;
      } else {
        process.stderr.write(`wavegate: ${(err as Error)?.stack ?? String(err)}\n`);
        process.exitCode = EXIT_FAILED;
      }
    }
  };
}
