import type { Client } from '@temporalio/client';
import { WavegateError } from '../../core/errors';
import { isTransientFailure } from '../client';
import { BOARD_LIMITS } from './limits';

/**
 * `fn`'s answer within `ms`, or UNAVAILABLE naming what waited: its calls to Temporal carry that
 * deadline (they end with it), and the answer does not wait for the SDK's own retries (about 20 s a
 * call) nor a read's (10 s after its first failure) to give up.
 */
export async function withinTemporal<T>(
  connection: Client['connection'],
  what: string,
  fn: () => Promise<T>,
  ms: number = BOARD_LIMITS.temporalMs,
): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () =>
        reject(new WavegateError('UNAVAILABLE', `${what}: Temporal did not answer within ${Math.round(ms / 1000)} s`)),
      ms,
    );
  });
  const deadline = Date.now() + ms;
  try {
    return await Promise.race([connection.withDeadline(deadline, fn), late]);
  } catch (err) {
    // The call's own deadline (DEADLINE_EXCEEDED) may come a moment before the timer: the same answer.
    if (!(err instanceof WavegateError) && isTransientFailure(err) && Date.now() >= deadline - 1_000)
      throw new WavegateError('UNAVAILABLE', `${what}: Temporal did not answer within ${Math.round(ms / 1000)} s`, {
        cause: err,
      });
    throw err;
  } finally {
    clearTimeout(timer);
  }
}

/** Before a control, revert or converge (each bound longer: a worker takes part): is Temporal there? */
export function temporalAnswers(connection: Client['connection']): Promise<unknown> {
  return withinTemporal(connection, 'the check that Temporal answers', () =>
    connection.workflowService.getSystemInfo({}),
  );
}
