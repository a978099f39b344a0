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
        process.stderr.write(`wavegate: ${unexpectedErrorText(err)}\n`);
        process.exitCode = EXIT_FAILED;
      }
    }
  };
}

/**
 * What an unforeseen error shows a user: its message, not a stack trace (which names our files, not what
 * to do). `WAVEGATE_DEBUG=1` shows the stack for a bug report.
 */
export function unexpectedErrorText(err: unknown, env: NodeJS.ProcessEnv = process.env): string {
  const e = err as Error | undefined;
  if (env.WAVEGATE_DEBUG === '1' && e?.stack) return e.stack;
  const message = e instanceof Error ? `${e.name === 'Error' ? '' : `${e.name}: `}${e.message}` : String(err);
  return `${message.slice(0, 2000)} (an unexpected error; run again with WAVEGATE_DEBUG=1 for the details to report)`;
}
