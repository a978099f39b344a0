import {
  QueryNotRegisteredError,
  ServiceError,
  WorkflowNotFoundError,
  WorkflowUpdateRPCTimeoutOrCancelledError,
} from '@temporalio/client';
import { describe, expect, it } from 'vitest';
import { WavegateError } from '../../../core/errors';
import { firstLineOf, isTransientFailure, retryTransient, WAIT_FAILURES_LIMIT_MS } from '../../../cli/client';

/**
 * The wait loops' retry (cli/client.ts): which failures a `--wait`, `watch` or re-verify wait outlives,
 * and that a run of them past the bound ends the wait with a message and a code, not a stack trace.
 */

/** A gRPC status error as @grpc/grpc-js makes them: `<code> <NAME>: <details>`. */
function grpcError(code: number, name: string, details: string): Error {
  return Object.assign(new Error(`${code} ${name}: ${details}`), { code, details, metadata: {} });
}

/** As the SDK's client throws a failed query or call: its own message, the server's answer as the cause. */
function failedQuery(cause: Error): ServiceError {
  return new ServiceError('Failed to query Workflow', { cause });
}

describe('isTransientFailure', () => {
  it.each([
    [
      'the server away (UNAVAILABLE, after the SDK stopped retrying)',
      grpcError(14, 'UNAVAILABLE', 'No connection established'),
    ],
    ['a query cut by its deadline (DEADLINE_EXCEEDED)', grpcError(4, 'DEADLINE_EXCEEDED', 'context deadline exceeded')],
    ['a call cancelled (CANCELLED)', grpcError(1, 'CANCELLED', 'Call cancelled')],
    ['load shed (RESOURCE_EXHAUSTED)', grpcError(8, 'RESOURCE_EXHAUSTED', 'namespace rate limit exceeded')],
    ['a race (ABORTED)', grpcError(10, 'ABORTED', 'aborted')],
    // What `start --wait` died of under load (issue 29): the server held the query ~30 s and no worker took it.
    [
      'a query no worker took (FAILED_PRECONDITION: no poller)',
      grpcError(9, 'FAILED_PRECONDITION', 'no poller seen for task queue recently, worker may be down'),
    ],
    [
      'a cut HTTP/2 stream (INTERNAL, RST_STREAM code 2)',
      grpcError(
        13,
        'INTERNAL',
        'Received RST_STREAM with code 2 triggered by internal client error: Session closed with error code 2',
      ),
    ],
    [
      'a proxy answering without a gRPC status (INTERNAL, RST_STREAM code 0)',
      grpcError(13, 'INTERNAL', 'Received RST_STREAM with code 0'),
    ],
  ])('%s, as the cause of the SDK\'s "Failed to query Workflow": transient', (_what, cause) => {
    expect(isTransientFailure(failedQuery(cause))).toBe(true);
    expect(isTransientFailure(cause)).toBe(true);
  });

  it('a socket reset or refused (errno codes), an update cut by its RPC deadline, wavegate UNAVAILABLE: transient', () => {
    expect(isTransientFailure(Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' }))).toBe(true);
    expect(isTransientFailure(Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }))).toBe(true);
    expect(
      isTransientFailure(
        new WorkflowUpdateRPCTimeoutOrCancelledError('Timeout or cancellation waiting for update', {
          cause: grpcError(4, 'DEADLINE_EXCEEDED', 'deadline'),
        }),
      ),
    ).toBe(true);
    expect(isTransientFailure(new WavegateError('UNAVAILABLE', 'cannot reach 127.0.0.1:7233'))).toBe(true);
  });

  it.each([
    ['a workflow that is not there', new WorkflowNotFoundError('Workflow not found', 'rollout:x', undefined)],
    [
      'a query the workflow does not have',
      new QueryNotRegisteredError('did not register a handler for statusQuery', 3),
    ],
    ['a refused argument (INVALID_ARGUMENT)', failedQuery(grpcError(3, 'INVALID_ARGUMENT', 'bad query'))],
    ['no permission (PERMISSION_DENIED)', failedQuery(grpcError(7, 'PERMISSION_DENIED', 'Request unauthorized'))],
    ['not authenticated (UNAUTHENTICATED)', failedQuery(grpcError(16, 'UNAUTHENTICATED', 'bad API key'))],
    // INTERNAL is ambiguous: only a cut stream is retried, not a TLS alert or a server's own error.
    ['a TLS alert (INTERNAL)', grpcError(13, 'INTERNAL', 'Received RST_STREAM with code 2 ... SSL alert number 42')],
    ['a server bug (INTERNAL)', failedQuery(grpcError(13, 'INTERNAL', 'unexpected nil pointer'))],
    ['a refusal of wavegate', new WavegateError('INVALID_INPUT', '--interval: must be a number')],
    ['a plain bug', new TypeError("Cannot read properties of undefined (reading 'state')")],
  ])('%s: not transient (the wait ends at once)', (_what, err) => {
    expect(isTransientFailure(err)).toBe(false);
  });
});

describe('retryTransient', () => {
  /** A clock that moves only when the retry sleeps. */
  function fakeClock() {
    let t = 0;
    const slept: number[] = [];
    return {
      now: () => t,
      sleep: async (ms: number) => {
        slept.push(ms);
        t += ms;
      },
      slept,
    };
  }

  it('retries transient failures with growing delays, tells once per run of failures, and returns the answer', async () => {
    const clock = fakeClock();
    const told: string[] = [];
    const answers = [
      failedQuery(grpcError(9, 'FAILED_PRECONDITION', 'no poller seen for task queue recently, worker may be down')),
      failedQuery(grpcError(14, 'UNAVAILABLE', 'No connection established')),
      failedQuery(grpcError(4, 'DEADLINE_EXCEEDED', 'deadline')),
      'answered',
    ];
    const result = await retryTransient(
      async () => {
        const next = answers.shift();
        if (next instanceof Error) throw next;
        return next;
      },
      { ...clock, onRetry: (err) => told.push(firstLineOf(err)) },
    );
    expect(result).toBe('answered');
    expect(clock.slept).toEqual([500, 1_000, 2_000]);
    expect(told).toEqual([
      'Failed to query Workflow: 9 FAILED_PRECONDITION: no poller seen for task queue recently, worker may be down',
    ]);
  });

  it('throws a failure that is not transient at once, as it is', async () => {
    const clock = fakeClock();
    const refused = failedQuery(grpcError(7, 'PERMISSION_DENIED', 'Request unauthorized'));
    await expect(retryTransient(async () => Promise.reject(refused), clock)).rejects.toBe(refused);
    expect(clock.slept).toEqual([]);
  });

  it('a run of failures past the bound ends the wait: UNAVAILABLE naming what, how long and the last error, with the hint', async () => {
    const clock = fakeClock();
    let polls = 0;
    const failure = retryTransient(
      async () => {
        polls++;
        throw failedQuery(grpcError(14, 'UNAVAILABLE', 'No connection established'));
      },
      { ...clock, what: 'status query of rollout:demo:1', giveUpHint: 'wavegate watch rollout:demo:1 waits again' },
    );
    const err = await failure.catch((e: unknown) => e);
    expect(err).toBeInstanceOf(WavegateError);
    expect((err as WavegateError).code).toBe('UNAVAILABLE'); // exit 1, not a refusal
    // The bound is passed at the first failure after it: at most one delay (5 s) late.
    expect(clock.now()).toBeGreaterThanOrEqual(WAIT_FAILURES_LIMIT_MS);
    expect(clock.now()).toBeLessThan(WAIT_FAILURES_LIMIT_MS + 5_000);
    expect((err as WavegateError).message).toBe(
      `status query of rollout:demo:1 failed for ${Math.round(clock.now() / 1000)} s, giving up (last error: Failed to query Workflow: 14 UNAVAILABLE: No connection established); wavegate watch rollout:demo:1 waits again`,
    );
    expect(Math.max(...clock.slept)).toBe(5_000);
    expect(polls).toBeGreaterThan(50);
  });

  it('an answer between failures starts the bound again: a wait that keeps getting answers never gives up', async () => {
    const clock = fakeClock();
    let polls = 0;
    const told: unknown[] = [];
    // Fails for 4 minutes, answers once, fails for 4 minutes again: never 5 minutes in a row.
    const poll = async () => {
      polls++;
      if (polls % 60 === 0) return 'answered';
      throw failedQuery(grpcError(4, 'DEADLINE_EXCEEDED', 'deadline'));
    };
    const retry = (n: number) =>
      retryTransient(poll, { ...clock, maxDelayMs: 4_000, onRetry: (e) => told.push(e) }).then(() => n);
    expect(await retry(1)).toBe(1);
    expect(await retry(2)).toBe(2);
    expect(told).toHaveLength(2);
    expect(clock.now()).toBeGreaterThan(WAIT_FAILURES_LIMIT_MS); // longer than the bound in all, never in one run
  });
});
