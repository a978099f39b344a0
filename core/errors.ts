/**
 * Errors are values with a code and a message a person can act on. Every layer (CLI, activities,
 * workflow) speaks these codes; the CLI maps them to exit codes (2 = refused).
 */
export type WavegateErrorCode = 'INVALID_INPUT' | 'NOT_FOUND' | 'CONFLICT' | 'INVALID_STATE' | 'UNAVAILABLE' | 'FAILED';

export class WavegateError extends Error {
  constructor(
    readonly code: WavegateErrorCode,
    message: string,
    readonly details: Record<string, unknown> = {},
  ) {
    super(message);
    this.name = 'WavegateError';
  }
}

/** Codes that mean "we refused to start anything": exit code 2 at the CLI. */
export function isRefusal(code: WavegateErrorCode): boolean {
  return code === 'INVALID_INPUT' || code === 'NOT_FOUND' || code === 'CONFLICT' || code === 'INVALID_STATE';
}
