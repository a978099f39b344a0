import { createHmac } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { AUDIT_EVENTS } from '../../../core/audit';
import {
  DeliveryLedger,
  deliveryVerdict,
  MAX_LISTED_FAILURES,
  signedString,
  WEBHOOK_EVENTS,
  webhookEventFor,
  webhookEventOf,
  webhookRequestHeaders,
  webhookSignature,
  webhookWants,
  type TransitionRecord,
} from '../../../core/events';
import { parseRolloutSpec } from '../../../core/spec';
import { PROJECT_ROOT } from '../../../intake/package-layout';
import { runCli } from '../../support/cli';
import { scratchDir } from '../../support/harness';
import { refusal } from '../../support/refusal';

const CTX = { rolloutId: 'rollout:demo', runId: 'run-1', profile: 'demo', fromRevision: 1, toRevision: 2 };
const record = (event: TransitionRecord['event'], extra: Partial<TransitionRecord> = {}): TransitionRecord => ({
  event,
  phase: 'canary 1 device',
  by: 'wavegate',
  reason: null,
  at: '2026-01-01T00:00:00.000Z',
  evidence: null,
  ...extra,
});

describe('audit records → webhook events (core/events.ts)', () => {
  it('maps every rollout transition and leaves per-device, floor and override records in the audit only', () => {
    const mapped = Object.fromEntries(AUDIT_EVENTS.map((e) => [e, webhookEventOf(e)]));
    // Strict: a new audit event fails here until it is mapped or left out on purpose.
    expect(mapped).toStrictEqual({
      'rollout.started': 'rollout.started',
      'phase.started': 'phase.started',
      'phase.applied': 'phase.applied',
      'gate.passed': 'gate.passed',
      'gate.failed': 'gate.failed',
      'gate.inconclusive': 'gate.inconclusive',
      'rollout.paused': 'rollout.paused',
      'rollout.resumed': 'rollout.resumed',
      'rollout.aborted': 'rollout.aborted',
      'rollout.cancelled': 'rollout.cancelled',
      'rollout.approved': 'gate.approved',
      'rollback.started': 'rollback.started',
      'rollback.completed': 'rollback.completed',
      'rollout.completed': 'rollout.completed',
      'rollout.ended': 'rollout.ended',
      'rollout.failed': 'rollout.failed',
      'canary.verdict': 'canary.verdict',
      'audit.override': undefined,
      'rollout.approval-refused': undefined,
      'rollout.starter': undefined,
      'devices.outcome': undefined,
      'devices.skipped': undefined,
      'floor.confirmed': undefined,
      'deadline.passed': 'deadline.passed',
      'watch.started': 'watch.started',
      'watch.passed': undefined,
      'watch.inconclusive': undefined,
      'watch.failed': 'watch.failed',
      'watch.completed': 'watch.completed',
    });
    // Every webhook event is reachable from some audit record.
    expect(new Set(Object.values(mapped).filter(Boolean))).toEqual(new Set(WEBHOOK_EVENTS));
  });

  it('builds the event JSON with a deterministic delivery id, reason and who, and strips secret-named evidence', () => {
    const paused = webhookEventFor(
      CTX,
      7,
      record('rollout.paused', {
        by: 'alice',
        reason: 'looking at dashboards',
        evidence: { apiKey: 'k-123', note: 'x' },
      }),
    );
    expect(paused).toEqual({
      deliveryId: 'rollout:demo:run-1:7',
      event: 'rollout.paused',
      rolloutId: 'rollout:demo',
      profile: 'demo',
      fromRevision: 1,
      toRevision: 2,
      phase: 'canary 1 device',
      reason: 'looking at dashboards',
      by: 'alice',
      at: '2026-01-01T00:00:00.000Z',
      evidence: { apiKey: '[redacted]', note: 'x' },
    });
    // A redelivery of the same transition is the same event, byte for byte.
    expect(
      JSON.stringify(
        webhookEventFor(
          CTX,
          7,
          record('rollout.paused', {
            by: 'alice',
            reason: 'looking at dashboards',
            evidence: { apiKey: 'k-123', note: 'x' },
          }),
        ),
      ),
    ).toBe(JSON.stringify(paused));
    expect(webhookEventFor(CTX, 8, record('devices.outcome'))).toBeUndefined();
  });

  it('filters by event name or family', () => {
    expect(webhookWants({}, 'phase.applied')).toBe(true);
    expect(webhookWants({ events: ['gate.*', 'rollout.completed'] }, 'gate.inconclusive')).toBe(true);
    expect(webhookWants({ events: ['gate.*', 'rollout.completed'] }, 'rollout.completed')).toBe(true);
    expect(webhookWants({ events: ['gate.*', 'rollout.completed'] }, 'rollout.started')).toBe(false);
    expect(webhookWants({ events: ['rollout.*'] }, 'rollback.started')).toBe(false);
  });
});

describe('signing (what a receiver verifies)', () => {
  const body = JSON.stringify(webhookEventFor(CTX, 1, record('rollout.started'))!);

  it('signs "<timestamp>.<raw body>" with HMAC-SHA256 under the secret, as node:crypto computes it', () => {
    const expected = createHmac('sha256', 's3cret').update(`1767225600.${body}`).digest('hex');
    expect(signedString('1767225600', body)).toBe(`1767225600.${body}`);
    expect(webhookSignature('s3cret', '1767225600', body)).toBe(`sha256=${expected}`);
    // Another secret, timestamp or body is another signature.
    expect(webhookSignature('other', '1767225600', body)).not.toBe(`sha256=${expected}`);
    expect(webhookSignature('s3cret', '1767225601', body)).not.toBe(`sha256=${expected}`);
    expect(webhookSignature('s3cret', '1767225600', `${body} `)).not.toBe(`sha256=${expected}`);
  });

  it('sends the delivery id, event and timestamp beside the signature, never the secret', () => {
    const event = webhookEventFor(CTX, 1, record('rollout.started'))!;
    const headers = webhookRequestHeaders(event, 's3cret', '1767225600', body);
    expect(headers).toEqual({
      'Content-Type': 'application/json',
      'X-Wavegate-Signature': webhookSignature('s3cret', '1767225600', body),
      'X-Wavegate-Timestamp': '1767225600',
      'X-Wavegate-Delivery': 'rollout:demo:run-1:1',
      'X-Wavegate-Event': 'rollout.started',
    });
    expect(JSON.stringify(headers)).not.toContain('s3cret');
  });

  it('2xx is delivered; 408, 429 and 5xx are retried; other 4xx and redirects are permanent', () => {
    expect([200, 202, 204].map(deliveryVerdict)).toEqual(['delivered', 'delivered', 'delivered']);
    expect([408, 429, 500, 502, 503].map(deliveryVerdict)).toEqual(['retry', 'retry', 'retry', 'retry', 'retry']);
    expect([400, 401, 403, 404, 410, 301, 302].map(deliveryVerdict)).toEqual(Array(7).fill('permanent'));
  });
});

describe('the delivery ledger (status.webhooks)', () => {
  it('counts pending, delivered and failed, and lists a bounded number of failures', () => {
    const ledger = new DeliveryLedger();
    for (let i = 0; i < MAX_LISTED_FAILURES + 5; i++) ledger.queued();
    ledger.queued();
    ledger.delivered();
    for (let i = 0; i < MAX_LISTED_FAILURES + 5; i++)
      ledger.failed({ deliveryId: `r:x:${i}`, event: 'phase.started', url: 'http://h/', error: 'e'.repeat(1000) });
    const status = ledger.status();
    expect(status).toMatchObject({ delivered: 1, pending: 0, failedTotal: MAX_LISTED_FAILURES + 5 });
    expect(status.failed).toHaveLength(MAX_LISTED_FAILURES);
    expect(status.failed[0]!.error).toHaveLength(300);
    // A copy: status taken earlier does not change.
    ledger.queued();
    expect(status.pending).toBe(0);
  });
});

describe('spec validation of webhooks (exit 2, naming the field)', () => {
  const spec = (webhooks: unknown) => ({
    rollout: { profile: 'demo', fromRevision: 1, toRevision: 2, waves: [100], webhooks },
  });
  const problem = (webhooks: unknown) => refusal(() => parseRolloutSpec(spec(webhooks), 'spec.yaml'));

  it('accepts http(s) urls with a secret by reference and an events filter', () => {
    const parsed = parseRolloutSpec(
      spec([
        {
          url: 'https://hooks.example.com/wavegate',
          secretEnv: 'WAVEGATE_WEBHOOK_SECRET_HOOKS',
          events: ['gate.*', 'rollout.completed'],
        },
        { url: 'http://127.0.0.1:9000/', secretFile: '/etc/wavegate/webhook-secrets/hook.secret' },
      ]),
      'spec.yaml',
    );
    expect(parsed.webhooks).toHaveLength(2);
  });

  it('refuses a url with user:password@, without printing the password', () => {
    const err = problem([{ url: 'https://bob:hunter2@hooks.example.com/x', secretEnv: 'WAVEGATE_WEBHOOK_SECRET_S' }]);
    expect(err.code).toBe('INVALID_INPUT');
    expect(err.message).toMatch(
      /rollout\.webhooks\[0\]\.url: has a user:password@ in a url; secrets must not be written in the spec.*secretEnv.*secretFile/,
    );
    expect(err.message).not.toContain('hunter2');
  });

  it('refuses a scheme other than http(s) and a url that is not one', () => {
    expect(problem([{ url: 'ftp://hooks.example.com/x', secretEnv: 'WAVEGATE_WEBHOOK_SECRET_S' }]).message).toMatch(
      /rollout\.webhooks\[0\]\.url: must be an http:\/\/ or https:\/\/ url, not ftp: \(got "ftp:\/\/hooks\.example\.com\/x"\)/,
    );
    expect(problem([{ url: 'hooks.example.com/x', secretEnv: 'WAVEGATE_WEBHOOK_SECRET_S' }]).message).toMatch(
      /rollout\.webhooks\[0\]\.url: must be an absolute http:\/\/ or https:\/\/ url/,
    );
  });

  it('refuses both secret references, and neither', () => {
    expect(problem([{ url: 'https://h/x', secretEnv: 'WAVEGATE_WEBHOOK_SECRET_S', secretFile: '/s' }]).message).toMatch(
      /rollout\.webhooks\[0\]\.secretFile: give either "secretEnv" or "secretFile", not both/,
    );
    expect(problem([{ url: 'https://h/x' }]).message).toMatch(
      /rollout\.webhooks\[0\]\.secretEnv: a webhook needs its secret: give the HMAC secret by reference \(secretEnv: WAVEGATE_WEBHOOK_SECRET_<NAME> or secretFile: <file in the worker's webhook secrets directory>\)/,
    );
    // An inline secret is not a field at all.
    expect(problem([{ url: 'https://h/x', secret: 'inline' }]).message).toMatch(
      /rollout\.webhooks\[0\]\.secret: unknown field; allowed: url, secretEnv, secretFile, events/,
    );
  });

  it("refuses a secretEnv that is not one of the webhook secrets (the worker's database password, its own policy variables), naming the field and the value", () => {
    for (const name of [
      'PGPASSWORD',
      'AWS_SECRET_ACCESS_KEY',
      'WAVEGATE_WEBHOOK_SECRET_',
      'WAVEGATE_WEBHOOK_SECRETS_DIR',
      'wavegate_webhook_secret_x',
      'WAVEGATE_HOOK_SECRET',
    ]) {
      const err = problem([{ url: 'https://hooks.example.com/x', secretEnv: name }]);
      expect(err.code, name).toBe('INVALID_INPUT');
      expect(err.message).toContain(
        `rollout.webhooks[0].secretEnv: must be an environment variable named WAVEGATE_WEBHOOK_SECRET_<NAME> (letters, digits, "_")`,
      );
      expect(err.message).toContain(`(got ${JSON.stringify(name)})`);
    }
    expect(
      parseRolloutSpec(
        spec([{ url: 'https://hooks.example.com/x', secretEnv: 'WAVEGATE_WEBHOOK_SECRET_chat_2' }]),
        'spec.yaml',
      ).webhooks![0]!.secretEnv,
    ).toBe('WAVEGATE_WEBHOOK_SECRET_chat_2');
  });

  it('refuses more than 10 webhooks and an unknown event', () => {
    const many = Array.from({ length: 11 }, (_, i) => ({
      url: `https://h/${i}`,
      secretEnv: 'WAVEGATE_WEBHOOK_SECRET_S',
    }));
    expect(problem(many).message).toMatch(/rollout\.webhooks: at most 10 webhooks/);
    expect(
      problem([{ url: 'https://h/x', secretEnv: 'WAVEGATE_WEBHOOK_SECRET_S', events: ['rollout.exploded'] }]).message,
    ).toMatch(
      /rollout\.webhooks\[0\]\.events\[0\]: must be an event name or family; allowed: rollout\.started, .*gate\.\*, .*\(got "rollout\.exploded"\)/,
    );
  });
});

describe('wavegate plan and start refuse a bad webhook before anything starts (real processes)', () => {
  const scratch = scratchDir('webhook-spec');
  afterAll(() => scratch.cleanup());

  it('exit 2 naming each field; start never reaches Temporal; the password is not printed', async () => {
    const file = join(scratch.dir, 'spec.yaml');
    const webhooks = [
      { url: 'https://bob:hunter2@hooks.example.com/x', secretEnv: 'WAVEGATE_WEBHOOK_SECRET_S' },
      { url: 'ftp://hooks.example.com/x', secretEnv: 'WAVEGATE_WEBHOOK_SECRET_S' },
      { url: 'https://hooks.example.com/x', secretEnv: 'WAVEGATE_WEBHOOK_SECRET_S', secretFile: '/s' },
      { url: 'https://hooks.example.com/x' },
      { url: 'https://hooks.example.com/x', secretEnv: 'PGPASSWORD' },
    ];
    writeFileSync(
      file,
      stringify({ rollout: { profile: 'demo', fromRevision: 1, toRevision: 2, waves: [100], webhooks } }),
    );
    const common = [
      '-f',
      file,
      '--inventory',
      join(PROJECT_ROOT, 'examples/plan/fleet-20.yaml'),
      '--profiles',
      join(PROJECT_ROOT, 'profiles'),
    ];
    const runs = await Promise.all([
      runCli(['plan', ...common]),
      runCli(['start', ...common, '--address', '127.0.0.1:1'], { env: { TEMPORAL_ADDRESS: '', TEMPORAL_PROFILE: '' } }),
    ]);
    for (const run of runs) {
      expect(run.code, run.stderr).toBe(2);
      expect(run.stderr).toContain('rollout.webhooks[0].url: has a user:password@ in a url');
      expect(run.stderr).toContain('rollout.webhooks[1].url: must be an http:// or https:// url, not ftp:');
      expect(run.stderr).toContain('rollout.webhooks[2].secretFile: give either "secretEnv" or "secretFile", not both');
      expect(run.stderr).toContain('rollout.webhooks[3].secretEnv: a webhook needs its secret');
      expect(run.stderr).toContain(
        'rollout.webhooks[4].secretEnv: must be an environment variable named WAVEGATE_WEBHOOK_SECRET_<NAME>',
      );
      expect(run.stderr).toContain('(got "PGPASSWORD")');
      expect(run.stderr + run.stdout).not.toContain('hunter2');
      expect(run.stderr).not.toContain('cannot reach Temporal');
    }
  }, 120_000);
});
