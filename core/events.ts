import { hmac } from '@noble/hashes/hmac.js';
import { sha256 } from '@noble/hashes/sha2.js';
import { bytesToHex } from '@noble/hashes/utils.js';
import type { z } from 'zod';
import { redactSecrets, type AuditEventName } from './audit';
import { utf8Encode } from './bytes';
import { inlineCredential, redactUrl } from './health';
import { WEBHOOK_SECRETS } from './secret-policy';
import { lazySchema, zod } from './lazy-schema';

/**
 * Rollout events for webhooks (docs/formats.md, "Webhooks"): every transition the audit trail records
 * is also an event a receiver can act on. This file is the one mapping from audit records to events, the
 * webhook configuration of a spec, the signature a receiver checks and what counts as delivered. Pure
 * (no Node APIs): the workflow builds events with it and the activity signs with it.
 */

/** The events a webhook can receive, in the order a rollout usually tells them. */
export const WEBHOOK_EVENTS = [
  'rollout.started',
  'phase.started',
  'phase.applied',
  'gate.passed',
  'gate.failed',
  'gate.inconclusive',
  'gate.approved',
  /** A progressDeadline or phaseDeadline passed (its action, pause, abort or rollback, follows as its own event). */
  'deadline.passed',
  'rollout.paused',
  'rollout.resumed',
  'rollout.aborted',
  'rollback.started',
  'rollback.completed',
  'canary.verdict',
  /** The watch after promotion began; each failed check (`watch.failed`, with onFail's action), and its end. */
  'watch.started',
  'watch.failed',
  'watch.completed',
  'rollout.completed',
  'rollout.failed',
  /** The end of a rollout an operator aborted (after its rollback, if any). */
  'rollout.ended',
  'rollout.cancelled',
] as const;
export type WebhookEventName = (typeof WEBHOOK_EVENTS)[number];

/**
 * Which audit record is which event: an audit event of the same name, except the model's approval, which
 * is the manual gate's `gate.approved`. Records about single devices (`devices.*`), the floor and audit
 * overrides are not rollout transitions and stay in the audit only, as does each healthy check of a watch
 * (`watch.passed`, `watch.inconclusive`: a receiver hears when a watch starts, fails and ends).
 */
const RENAMED: Partial<Record<AuditEventName, WebhookEventName>> = { 'rollout.approved': 'gate.approved' };

/** The event an audit record is, or undefined when it is not one a webhook receives. */
export function webhookEventOf(event: AuditEventName): WebhookEventName | undefined {
  if (Object.hasOwn(RENAMED, event)) return RENAMED[event];
  return (WEBHOOK_EVENTS as readonly string[]).includes(event) ? (event as WebhookEventName) : undefined;
}

/** The JSON body of one delivery. */
export interface WebhookEvent {
  /** `<rolloutId>:<runId>:<n>` (n: the event's index in its run, from 1): the same on every redelivery. */
  deliveryId: string;
  event: WebhookEventName;
  rolloutId: string;
  profile: string;
  fromRevision: number;
  toRevision: number;
  phase: string | null;
  reason: string | null;
  by: string;
  /** ISO-8601 UTC instant of the transition (the audit record's time). */
  at: string;
  evidence: unknown;
}

export interface EventContext {
  rolloutId: string;
  runId: string;
  profile: string;
  fromRevision: number;
  toRevision: number;
}

/** What the workflow knows of a transition when it writes the audit record. */
export interface TransitionRecord {
  event: AuditEventName;
  phase: string | null;
  by: string;
  reason: string | null;
  at: string;
  evidence: unknown;
}

export function deliveryIdOf(ctx: Pick<EventContext, 'rolloutId' | 'runId'>, index: number): string {
  return `${ctx.rolloutId}:${ctx.runId}:${index}`;
}

/** The event for a transition record (`index`: its place among this run's events), or undefined. */
export function webhookEventFor(ctx: EventContext, index: number, record: TransitionRecord): WebhookEvent | undefined {
  const event = webhookEventOf(record.event);
  if (!event) return undefined;
  return {
    deliveryId: deliveryIdOf(ctx, index),
    event,
    rolloutId: ctx.rolloutId,
    profile: ctx.profile,
    fromRevision: ctx.fromRevision,
    toRevision: ctx.toRevision,
    phase: record.phase,
    reason: record.reason,
    by: record.by,
    at: record.at,
    // The same defence the audit applies: secret-named fields and private keys never leave.
    evidence: redactSecrets(record.evidence ?? null),
  };
}

// ---- configuration (the spec's `webhooks`) ----

export const MAX_WEBHOOKS = 10;
const MAX_URL_LENGTH = 2048;

/** `gate.*`-style families: every event whose name starts with the family. */
const EVENT_FAMILIES = [...new Set(WEBHOOK_EVENTS.map((e) => e.slice(0, e.indexOf('.'))))];
const EVENT_FILTERS: readonly string[] = [...WEBHOOK_EVENTS, ...EVENT_FAMILIES.map((f) => `${f}.*`)];

const SECRET_BY_REFERENCE =
  "give the HMAC secret by reference (secretEnv: WAVEGATE_WEBHOOK_SECRET_<NAME> or secretFile: <file in the worker's webhook secrets directory>), which the worker reads";

/** An http(s) url with no credential in it: the spec is kept in the workflow history. */
const WebhookUrl = lazySchema(() =>
  zod()
    .string()
    .max(MAX_URL_LENGTH, `must be at most ${MAX_URL_LENGTH} characters`)
    .superRefine((text, ctx) => {
      let url: URL;
      try {
        url = new URL(text);
      } catch {
        ctx.addIssue({ code: 'custom', message: 'must be an absolute http:// or https:// url' });
        return;
      }
      if (url.protocol !== 'http:' && url.protocol !== 'https:') {
        ctx.addIssue({
          code: 'custom',
          message: `must be an http:// or https:// url, not ${url.protocol.slice(0, -1)}:`,
        });
        return;
      }
      const secret = url.username || url.password ? 'a user:password@ in a url' : inlineCredential(text);
      if (secret)
        ctx.addIssue({
          code: 'custom',
          message: `has ${secret}; secrets must not be written in the spec, which is kept in the workflow history: ${SECRET_BY_REFERENCE}`,
        });
    }),
);

export const Webhook = lazySchema(() =>
  zod()
    .object({
      url: WebhookUrl,
      /**
       * The name of an environment variable of the worker that holds the secret: only the operator's
       * webhook secrets (`WAVEGATE_WEBHOOK_SECRET_<NAME>`, core/secret-policy.ts), never any variable of
       * the worker (its database password, its API keys).
       */
      secretEnv: zod().string().regex(WEBHOOK_SECRETS.envPattern, WEBHOOK_SECRETS.envRule).optional(),
      /**
       * An absolute path of a file on the worker that holds the secret; it must be under the worker's
       * webhook secrets directory, checked by `plan`/`start` (intake/secret-policy.ts) and at delivery.
       */
      secretFile: zod()
        .string()
        .regex(/^\/[^\0\n\r]{1,1023}$/, 'must be an absolute path of a file on the worker')
        .optional(),
      /** Only these events (names, or families like `gate.*`); absent: every event. */
      events: zod()
        .array(
          zod()
            .string()
            .refine((e) => EVENT_FILTERS.includes(e), {
              message: `must be an event name or family; allowed: ${EVENT_FILTERS.join(', ')}`,
            }),
        )
        .min(1, 'at least one event (leave "events" out for every event)')
        .max(EVENT_FILTERS.length)
        .optional(),
    })
    .strict()
    .superRefine((hook, ctx) => {
      if (hook.secretEnv !== undefined && hook.secretFile !== undefined)
        ctx.addIssue({
          code: 'custom',
          path: ['secretFile'],
          message: 'give either "secretEnv" or "secretFile", not both',
        });
      if (hook.secretEnv === undefined && hook.secretFile === undefined)
        ctx.addIssue({
          code: 'custom',
          path: ['secretEnv'],
          message: `a webhook needs its secret: ${SECRET_BY_REFERENCE}`,
        });
    }),
);
export type Webhook = z.output<typeof Webhook>;

export const Webhooks = lazySchema(() => zod().array(Webhook).max(MAX_WEBHOOKS, `at most ${MAX_WEBHOOKS} webhooks`));

/** Whether a webhook's `events` filter takes this event. */
export function webhookWants(hook: Pick<Webhook, 'events'>, event: WebhookEventName): boolean {
  if (!hook.events) return true;
  const family = `${event.slice(0, event.indexOf('.'))}.*`;
  return hook.events.some((e) => e === event || e === family);
}

/** How a url is shown in status and errors: never a credential (query values hidden as well). */
export function shownUrl(url: string): string {
  return redactUrl(url);
}

// ---- signing (what a receiver verifies) ----

export const WEBHOOK_HEADERS = {
  signature: 'X-Wavegate-Signature',
  timestamp: 'X-Wavegate-Timestamp',
  delivery: 'X-Wavegate-Delivery',
  event: 'X-Wavegate-Event',
} as const;

/** The string that is signed: the timestamp header's value, a dot, then the raw body, byte for byte. */
export function signedString(timestamp: string, body: string): string {
  return `${timestamp}.${body}`;
}

/** `sha256=<hex HMAC-SHA256(secret as UTF-8, signedString)>`: the X-Wavegate-Signature value. */
export function webhookSignature(secret: string, timestamp: string, body: string): string {
  return `sha256=${bytesToHex(hmac(sha256, utf8Encode(secret), utf8Encode(signedString(timestamp, body))))}`;
}

/** The headers of one delivery attempt (`timestamp`: Unix seconds when the attempt is sent). */
export function webhookRequestHeaders(
  event: WebhookEvent,
  secret: string,
  timestamp: string,
  body: string,
): Record<string, string> {
  return {
    'Content-Type': 'application/json',
    [WEBHOOK_HEADERS.signature]: webhookSignature(secret, timestamp, body),
    [WEBHOOK_HEADERS.timestamp]: timestamp,
    [WEBHOOK_HEADERS.delivery]: event.deliveryId,
    [WEBHOOK_HEADERS.event]: event.event,
  };
}

/**
 * What an HTTP answer means for a delivery: 2xx delivered; 408, 429 and 5xx may pass (retry); anything
 * else (another 4xx, a redirect, which is not followed) will not change by sending again.
 */
export function deliveryVerdict(status: number): 'delivered' | 'retry' | 'permanent' {
  if (status >= 200 && status < 300) return 'delivered';
  if (status === 408 || status === 429 || status >= 500) return 'retry';
  return 'permanent';
}

// ---- what status shows ----

/** Undelivered events shown in status at most: a long outage does not grow the status without bound. */
export const MAX_LISTED_FAILURES = 50;

export interface WebhookFailure {
  deliveryId: string;
  event: WebhookEventName;
  url: string;
  error: string;
}

export interface WebhookDeliveryStatus {
  /** Deliveries acknowledged (2xx). One event to two webhooks is two deliveries. */
  delivered: number;
  /** Deliveries queued or being sent. */
  pending: number;
  /** Deliveries that will not be sent again: failed permanently, out of retries, or left when the rollout ended. */
  failedTotal: number;
  /** The first MAX_LISTED_FAILURES of them. */
  failed: WebhookFailure[];
}

/** The outbox's counts, kept as plain numbers so status is a copy, never a live reference. */
export class DeliveryLedger {
  private readonly state: WebhookDeliveryStatus = { delivered: 0, pending: 0, failedTotal: 0, failed: [] };

  queued(): void {
    this.state.pending += 1;
  }
  delivered(): void {
    this.state.pending -= 1;
    this.state.delivered += 1;
  }
  failed(failure: WebhookFailure): void {
    this.state.pending -= 1;
    this.state.failedTotal += 1;
    if (this.state.failed.length < MAX_LISTED_FAILURES)
      this.state.failed.push({ ...failure, error: failure.error.slice(0, 300) });
  }
  status(): WebhookDeliveryStatus {
    return { ...this.state, failed: [...this.state.failed] };
  }
}
