import { WavegateError, isRefusal } from '../core/errors';

/** Exit codes everywhere: 0 success; 1 it ran and found failure or pending work; 2 refused. */
export const EXIT_OK = 0;
export const EXIT_FAILED = 1;
export const EXIT_REFUSED = 2;

/**
 * Wrap a command action: a WavegateError prints its message and exits 2 when it is a refusal (bad input,
 * invalid state, conflict, not found) or 1 otherwise. The action returns the exit code it wants.
 */
// biome-ignore lint/suspicious/noConfusingVoidType: an action that returns nothing (void) exits 0; commander's actions are written that way
export function action<A extends unknown[]>(fn: (...args: A) => Promise<number | void> | number | void) {
  return async (...args: A): Promise<void> => {
    try {
      const code = await fn(...args);
      process.exitCode = code ?? EXIT_OK;
    } catch (caught) {
      const err = (await searchAttributeRefusal(caught, args)) ?? caught;
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
 * A server's refusal over a search attribute wavegate needs (a namespace no worker has prepared: a bare
 * `temporal server start-dev`, Temporal Cloud) becomes the same exit-2 explanation the worker gives,
 * naming each missing attribute and the command that adds it, for every command in one place. The
 * command's own connection flags (commander passes the Command last) say which namespace to look at.
 */
async function searchAttributeRefusal(err: unknown, args: unknown[]): Promise<WavegateError | undefined> {
  if (err instanceof WavegateError || !/search attribute/i.test(messagesOf(err))) return undefined;
  try {
    // Loaded only here: most errors are not this one, and the CLI starts without the SDK.
    const { searchAttributeFailure } =
      require('../workers/search-attributes') as typeof import('../workers/search-attributes');
    const { resolveConnectionSettings } = require('../workers/connection') as typeof import('../workers/connection');
    const command = args[args.length - 1] as { optsWithGlobals?: () => Record<string, unknown> } | undefined;
    let settings: ReturnType<typeof resolveConnectionSettings> | undefined;
    try {
      settings = resolveConnectionSettings(
        typeof command?.optsWithGlobals === 'function' ? command.optsWithGlobals() : {},
      );
    } catch {
      settings = undefined;
    }
    return await searchAttributeFailure(err, settings);
  } catch {
    return undefined; // explaining failed: the original error is still shown, without a stack
  }
}

/** The messages and gRPC details of an error and its causes, for a cheap first look. */
function messagesOf(err: unknown): string {
  const parts: string[] = [];
  for (
    let e: unknown = err, depth = 0;
    e && typeof e === 'object' && depth < 5;
    e = (e as { cause?: unknown }).cause, depth++
  ) {
    for (const part of [(e as { message?: unknown }).message, (e as { details?: unknown }).details])
      if (typeof part === 'string') parts.push(part);
  }
  return parts.join(' ');
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
