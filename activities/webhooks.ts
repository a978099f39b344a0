import { WavegateError } from '../core/errors';
import { readText } from '../intake/files';
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { deliveryVerdict, shownUrl, webhookRequestHeaders, type WebhookEvent } from '../core/events';

export interface DeliverWebhookInput {
  url: string;
  /** The secret by reference (exactly one), resolved here on the worker on every attempt. */
  secretEnv?: string;
  secretFile?: string;
  event: WebhookEvent;
}

export interface DeliverWebhookResult {
  status: number;
}

/** One attempt's time to connect, send and get the answer's status line (the default). */
const ATTEMPT_TIMEOUT_MS = 10_000;

/**
 * The webhook's HMAC secret, read where the worker keeps it. A reference that resolves to nothing fails
 * at once (non-retryable): it is configuration, and retrying will not set it. The secret itself is never
 * part of an error, a log line or the result.
 */
function readSecret(input: DeliverWebhookInput): string {
  if (input.secretEnv !== undefined) {
    const value = process.env[input.secretEnv]?.trim();
    if (!value) throw ApplicationFailure.create({ type: 'WebhookSecretMissing', message: `the webhook secret variable ${input.secretEnv} is not set on this worker`, nonRetryable: true });
    return value;
  }
  if (input.secretFile !== undefined) {
    let value: string;
    try {
      // A regular file of bounded size only: a FIFO named by a spec would stall the worker.
      value = readText(input.secretFile).trim();
    } catch (err) {
      const why = err instanceof WavegateError ? String(err.details.reason ?? err.message.replace(`${input.secretFile}: `, '')) : ((err as NodeJS.ErrnoException).code ?? (err as Error).message);
      throw ApplicationFailure.create({ type: 'WebhookSecretMissing', message: `the webhook secret file ${input.secretFile} cannot be read on this worker: ${why}`, nonRetryable: true });
    }
    if (!value) throw ApplicationFailure.create({ type: 'WebhookSecretMissing', message: `the webhook secret file ${input.secretFile} is empty`, nonRetryable: true });
    return value;
  }
  throw ApplicationFailure.create({ type: 'WebhookSecretMissing', message: 'the webhook has no secret reference', nonRetryable: true });
}

/** Why fetch failed, in a few words (`ECONNREFUSED`, `timed out after 10 s`), without the request. */
function transportProblem(err: unknown, timeoutMs: number): string {
  const e = err as Error & { cause?: { code?: string; message?: string } };
  if (e.name === 'TimeoutError') return `timed out after ${timeoutMs / 1000} s`;
  return e.cause?.code ?? e.cause?.message ?? e.message;
}

/**
 * Webhook delivery (docs/formats.md, "Webhooks"): one POST of one event per attempt, signed over the
 * attempt's timestamp and the exact body sent. Temporal's retry policy (workflows/events.ts) gives the
 * backoff; this says which failures are worth another attempt (core/events.ts deliveryVerdict).
 */
export function createWebhookActivities(deps: { attemptTimeoutMs?: number } = {}) {
  const timeoutMs = deps.attemptTimeoutMs ?? ATTEMPT_TIMEOUT_MS;
  return {
    async deliverWebhook(input: DeliverWebhookInput): Promise<DeliverWebhookResult> {
      const secret = readSecret(input);
      const body = JSON.stringify(input.event);
      const timestamp = String(Math.floor(Date.now() / 1000));
      const shown = shownUrl(input.url);
      // The attempt's own timer decides, not AbortSignal.timeout()/any() handed to fetch alone: those
      // (and undici's link from a request to its signal) are weakly held and can be collected under GC
      // pressure, leaving a POST to a silent receiver hanging for good (nodejs/node#55428). The fetch is
      // aborted too, best effort, so its socket is freed.
      const controller = new AbortController();
      const cancellation = Context.current().cancellationSignal;
      let timer: NodeJS.Timeout | undefined;
      let onCancel: (() => void) | undefined;
      const stopped = new Promise<never>((_, reject) => {
        const stop = (reason: unknown) => {
          controller.abort(reason);
          reject(reason);
        };
        timer = setTimeout(() => stop(new DOMException(`timed out after ${timeoutMs} ms`, 'TimeoutError')), timeoutMs);
        onCancel = () => stop(cancellation.reason);
        cancellation.addEventListener('abort', onCancel, { once: true });
      });
      let response: Response;
      try {
        response = await Promise.race([
          fetch(input.url, {
            method: 'POST',
            headers: { ...webhookRequestHeaders(input.event, secret, timestamp, body), 'User-Agent': 'wavegate-webhooks' },
            body,
            // A redirect is not followed: the receiver is the url in the spec, nowhere else.
            redirect: 'manual',
            signal: controller.signal,
          }),
          stopped,
        ]);
      } catch (err) {
        throw ApplicationFailure.create({ type: 'WebhookUnreachable', message: `POST ${shown}: ${transportProblem(err, timeoutMs)}` });
      } finally {
        clearTimeout(timer);
        cancellation.removeEventListener('abort', onCancel!);
        stopped.catch(() => {}); // settled or not, never an unhandled rejection
      }
      // The answer's body is not read: only its status counts.
      await response.body?.cancel().catch(() => {});
      const verdict = deliveryVerdict(response.status);
      if (verdict === 'delivered') return { status: response.status };
      throw ApplicationFailure.create({
        type: verdict === 'retry' ? 'WebhookRetry' : 'WebhookRefused',
        message: `POST ${shown}: HTTP ${response.status}${verdict === 'permanent' ? ' (not retried)' : ''}`,
        nonRetryable: verdict === 'permanent',
      });
    },
  };
}
