import { request as httpRequest, type ClientRequest, type RequestOptions } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { WavegateError } from '../core/errors';
import { deliveryVerdict, shownUrl, webhookRequestHeaders, type WebhookEvent } from '../core/events';
import {
  secretEnvAllowed,
  urlRefusal,
  webhookPolicyFromEnv,
  WEBHOOK_SECRETS,
  type SecretPolicy,
} from '../core/secret-policy';
import { readText } from '../intake/files';
import { resolveSecretFile } from '../intake/secret-policy';
import { checkedLookup, systemResolve, type ResolveHost } from '../intake/checked-lookup';

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

export interface WebhookActivityDeps {
  /** One attempt's time to resolve, connect, send and get the answer's status line (default 10 s). */
  attemptTimeoutMs?: number;
  /** Which secrets and receivers this worker allows; default: from its environment (core/secret-policy.ts). */
  policy?: SecretPolicy;
  /** How a receiver's host name is resolved (default the system resolver); tests give names of their own. */
  resolveHost?: ResolveHost;
}

const ATTEMPT_TIMEOUT_MS = 10_000;

/**
 * What a failed delivery says in the activity failure, and so in status (`webhooks.failed`) and the
 * workflow history, which whoever starts rollouts reads: the class of the outcome, never an errno, an
 * address the host resolved to, an exact status or a body of the receiver. A refused connection and a
 * timeout both are "no answer", so a spec cannot map which internal ports are open. The detail goes to
 * the worker's own log.
 */
const SAID = {
  policy: "delivery failed (refused by the worker's webhook policy)",
  noAnswer: 'delivery failed (no answer)',
} as const;

function answeredClass(status: number, verdict: 'retry' | 'permanent'): string {
  const cls = `${Math.floor(status / 100)}xx`;
  if (verdict === 'retry') return `delivery failed (answered ${cls})`;
  return `delivery failed (answered ${cls}${status >= 300 && status < 400 ? ', a redirect, not followed' : ''}; not retried)`;
}

/** Refused by the policy: not retried, since the address will not become allowed by sending again. */
function notAllowed(shown: string): ApplicationFailure {
  return ApplicationFailure.create({
    type: 'WebhookNotAllowed',
    message: `POST ${shown}: ${SAID.policy}`,
    nonRetryable: true,
  });
}

function secretProblem(message: string): ApplicationFailure {
  return ApplicationFailure.create({ type: 'WebhookSecretMissing', message, nonRetryable: true });
}

function log(level: 'warn' | 'info', message: string): void {
  try {
    Context.current().log[level](message);
  } catch {
    // Outside an activity (a library caller): nothing to log to.
  }
}

/**
 * The webhook's HMAC secret, read where the worker keeps it, within the worker's policy: a variable
 * with the webhook prefix (checked again here: a history from an older CLI may name any), a file under
 * the secrets directory with links resolved. A reference that resolves to nothing fails at once
 * (non-retryable): it is configuration, and retrying will not set it. The secret itself is never part
 * of an error, a log line or the result, nor is anything about a file's content.
 */
function readSecret(input: DeliverWebhookInput, policy: SecretPolicy): string {
  if (input.secretEnv !== undefined) {
    if (!secretEnvAllowed(WEBHOOK_SECRETS, input.secretEnv))
      throw secretProblem(
        `the webhook secret variable ${input.secretEnv} is not one this worker signs with (only ${WEBHOOK_SECRETS.envPrefix}<NAME>)`,
      );
    const value = process.env[input.secretEnv]?.trim();
    if (!value) throw secretProblem(`the webhook secret variable ${input.secretEnv} is not set on this worker`);
    return value;
  }
  if (input.secretFile !== undefined) {
    const file = input.secretFile;
    const where = resolveSecretFile(file, policy, true);
    if ('refused' in where && where.refused === 'outside') {
      log(
        'warn',
        `webhook secret file ${file} refused: outside the webhook secrets directory ${policy.secretsDir} (links and .. resolved)`,
      );
      throw secretProblem(
        `the webhook secret file ${file} is outside this worker's webhook secrets directory (links and ".." resolved)`,
      );
    }
    let value = '';
    let why = 'empty';
    if ('realPath' in where) {
      try {
        // A regular file of bounded size only: a FIFO named by a spec would stall the worker.
        value = readText(where.realPath).trim();
      } catch (err) {
        why =
          err instanceof WavegateError
            ? String(err.details.reason ?? err.message)
            : ((err as NodeJS.ErrnoException).code ?? (err as Error).message);
      }
    } else why = 'missing, or a link that does not resolve';
    if (!value) {
      log('warn', `webhook secret file ${file} cannot be used: ${why}`);
      throw secretProblem(`the webhook secret file ${file} cannot be read on this worker, or is empty`);
    }
    return value;
  }
  throw secretProblem('the webhook has no secret reference');
}

/** Why an attempt got no answer, for the worker's log (an errno, a timeout), never for the failure. */
function transportDetail(err: unknown): string {
  const e = err as NodeJS.ErrnoException;
  return e?.code ?? e?.message ?? String(err);
}

/**
 * Webhook delivery (docs/formats.md, "Webhooks"): one POST of one event per attempt, signed over the
 * attempt's timestamp and the exact body sent, to a receiver the worker's policy allows (an address in
 * the url judged first; a host name resolved here, every address judged, the connection made to those).
 * Temporal's retry policy (workflows/events.ts) gives the backoff; this says which failures are worth
 * another attempt (core/events.ts deliveryVerdict). A redirect is not followed.
 */
export function createWebhookActivities(deps: WebhookActivityDeps = {}) {
  const timeoutMs = deps.attemptTimeoutMs ?? ATTEMPT_TIMEOUT_MS;
  // Read once, when the worker starts: a value it cannot read stops it (exit 2 naming the variable).
  const policy = deps.policy ?? webhookPolicyFromEnv(process.env);
  const resolveHost = deps.resolveHost ?? systemResolve;
  return {
    async deliverWebhook(input: DeliverWebhookInput): Promise<DeliverWebhookResult> {
      const shown = shownUrl(input.url);
      const literal = urlRefusal(input.url, policy);
      if (literal) {
        log('warn', `webhook ${shown} refused: ${literal}`);
        throw notAllowed(shown);
      }
      const secret = readSecret(input, policy);
      const body = JSON.stringify(input.event);
      const timestamp = String(Math.floor(Date.now() / 1000));
      const url = new URL(input.url);
      const refusals: string[] = [];
      const options: RequestOptions = {
        method: 'POST',
        headers: {
          ...webhookRequestHeaders(input.event, secret, timestamp, body),
          'User-Agent': 'wavegate-webhooks',
          'Content-Length': String(Buffer.byteLength(body)),
        },
        // One connection per attempt, to an address judged for this attempt (no pooled socket).
        agent: false,
        lookup: checkedLookup(resolveHost, policy, refusals),
      };
      // The attempt's own timer and the activity's cancellation end the request: both strongly held
      // (a weakly held AbortSignal can be collected under GC pressure and never fire, nodejs/node#55428).
      const cancellation = Context.current().cancellationSignal;
      let req: ClientRequest | undefined;
      let timer: NodeJS.Timeout | undefined;
      let onCancel: (() => void) | undefined;
      let status: number;
      try {
        status = await new Promise<number>((resolve, reject) => {
          const stop = (reason: Error) => {
            req?.destroy(reason);
            reject(reason);
          };
          timer = setTimeout(
            () => stop(Object.assign(new Error(`timed out after ${timeoutMs} ms`), { code: 'ETIMEDOUT' })),
            timeoutMs,
          );
          onCancel = () => stop(Object.assign(new Error('cancelled'), { code: 'CANCELLED' }));
          cancellation.addEventListener('abort', onCancel, { once: true });
          req = (url.protocol === 'https:' ? httpsRequest : httpRequest)(url, options, (res) => {
            // The answer's body is not read: only its status counts.
            res.destroy();
            resolve(res.statusCode ?? 0);
          });
          req.on('error', reject);
          req.end(body);
        });
      } catch (err) {
        if (refusals.length) {
          log('warn', `webhook ${shown} refused: ${refusals.join('; ')}`);
          throw notAllowed(shown);
        }
        log('warn', `webhook ${shown}: no answer (${transportDetail(err)})`);
        throw ApplicationFailure.create({ type: 'WebhookUnreachable', message: `POST ${shown}: ${SAID.noAnswer}` });
      } finally {
        clearTimeout(timer);
        cancellation.removeEventListener('abort', onCancel!);
      }
      const verdict = deliveryVerdict(status);
      if (verdict === 'delivered') return { status };
      log('warn', `webhook ${shown}: HTTP ${status}`);
      throw ApplicationFailure.create({
        type: verdict === 'retry' ? 'WebhookRetry' : 'WebhookRefused',
        message: `POST ${shown}: ${answeredClass(status, verdict)}`,
        nonRetryable: verdict === 'permanent',
      });
    },
  };
}
